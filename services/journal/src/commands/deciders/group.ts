/**
 * Group snapshots (CSI GroupController): snapshots of several volumes cut together, under the
 * group name's lock and every source volume's lock. Each member is a snapshot record of its
 * own (restorable like any snapshot) that names its group. Pure decisions:
 *
 *   new           nothing reserved under this name
 *   reuse         the group was made (GroupSnapshotCreated): answer it
 *   complete      reserved and every member cut, but not every cut recorded (the writer died
 *                 between the cuts and their events): record them and answer
 *   stale         reserved but not every member was cut: undo the whole group and cut afresh, so
 *                 that no group mixes cuts taken at different times
 *   conflict      the name holds a group of other source volumes or parameters: AlreadyExists
 *   inconsistent  the directory and the record disagree on the name
 */
import {
  alreadyExists,
  DriverError,
  type EventBody,
  type GroupMember,
  type GroupSnapshotView,
  invalidArgument,
  notFound,
  type ParsedRequest,
} from "@csi/contracts";
import { type Address, isEnded, liveRecord } from "../../fold/evolve.js";
import { createdEvent, KINDS, shared } from "../../fold/kinds.js";
import { type GroupRecord, groupSnapshotView, type SnapshotRecord, type VolumeRecord } from "../../fold/records.js";
import type { ImageInfo } from "../../pools/port.js";
import type { Act, Command, Ctx, Decision, Effect, ImageRef, View } from "../decider.js";
import { digestOf, nameState, sameSet, type Verdict } from "./reservation.js";
import { madeIn, poolIn } from "./volumes.js";

/** One member as read under the lock: its snapshot record (if it lives) and its image (if cut). */
export interface MemberState {
  member: GroupMember;
  record?: SnapshotRecord;
  image?: ImageInfo;
}

export interface GroupState {
  record: GroupRecord;
  members: MemberState[];
}

/** Completing a group records the members that were cut but not recorded. */
export type GroupVerdict = Verdict<GroupState, { cut: MemberState[] }>;

/** What makes two group creates "the same": the set of source volumes (any order) and the parameters. */
export function groupDigest(sourceUuids: string[], parameters: Record<string, string>): string {
  return digestOf({ sources: [...sourceUuids].sort(), parameters });
}

export function checkGroupReservation(
  ask: { name: string; sourceUuids: string[]; digest: string },
  dirUuid: string | undefined,
  state: GroupState | undefined,
): GroupVerdict {
  if (!dirUuid) return { kind: "new" };
  if (!state) return { kind: "stale", uuid: dirUuid, reason: "the group record is missing" };
  const { record, members } = state;
  if (record.name !== ask.name) {
    return { kind: "inconsistent", reason: `name directory points ${ask.name} at ${dirUuid}, whose record names ${record.name}` };
  }
  // Other members or parameters are a conflict whatever state the group is in (as for snapshots).
  if (
    !sameSet(
      record.members.map((m) => m.volumeUuid),
      ask.sourceUuids,
    )
  ) {
    return { kind: "conflict", reason: `group snapshot ${ask.name} exists for other source volumes` };
  }
  if (record.digest !== ask.digest) return { kind: "conflict", reason: `group snapshot ${ask.name} exists with other parameters` };
  const unrecorded = members.filter((m) => !m.record?.imageId);
  if (record.ready && unrecorded.length === 0) return { kind: "reuse", record: state };
  if (members.every((m) => m.record && m.image)) return { kind: "complete", record: state, cut: unrecorded };
  // Made once, a member lost since (its image removed behind our back, a delete cut short): as it is.
  if (record.ready) return { kind: "reuse", record: state };
  const missing = members.filter((m) => !m.record || !m.image).map((m) => m.member.volumeUuid);
  return { kind: "stale", uuid: dirUuid, record: state, reason: `not every member was cut (volumes ${missing.join(", ")})` };
}

/** Why a caller's list of snapshot ids is not the group's members (CSI's snapshot_ids check); undefined when it is, or when none was given. */
export function membersMismatch(record: GroupRecord, snapshotUuids: string[] | undefined): string | undefined {
  if (!snapshotUuids?.length) return undefined;
  const have = record.members.map((m) => m.snapshotUuid);
  return sameSet(have, snapshotUuids) ? undefined : `snapshot ids do not match the ${have.length} snapshots of group snapshot ${record.uuid}`;
}

/** The pool a group is cut in: every source volume's, which must be one (a group is cut in one pool). */
export function groupPool(sources: { uuid: string; pool: string }[]): { pool: string } | { refused: string } {
  const pools = [...new Set(sources.map((s) => s.pool))];
  if (pools.length === 1 && pools[0]) return { pool: pools[0] };
  return { refused: `the source volumes are in several pools (${pools.sort().join(", ")}): a group snapshot is cut in one pool` };
}

const memberAddress = (m: GroupMember): Address => ({ kind: "snapshot", uuid: m.snapshotUuid });
const imageOf = (m: GroupMember) => KINDS.snapshot.imageName(m.snapshotUuid);

/** The group's members as the view has them: their records and images (as looked at). */
function membersOf(v: View, record: GroupRecord): MemberState[] {
  return record.members.map((member) => {
    const r = liveRecord(v.state(memberAddress(member)), "snapshot");
    const image = r ? v.image({ pool: r.pool, imageName: r.imageName }) : undefined;
    return { member, ...(r ? { record: r } : {}), ...(image ? { image } : {}) };
  });
}

export const groupView = (s: GroupState): GroupSnapshotView =>
  groupSnapshotView(
    s.record,
    s.members.flatMap((m) => (m.record ? [m.record] : [])),
  );

/**
 * CreateVolumeGroupSnapshot (idempotent by name, crash-safe like a single snapshot): lock the
 * group name and every source volume; judge (checkGroupReservation); new: NameReserved, then (the
 * name ours) GroupSnapshotReserved (listing every member's snapshot uuid, ids(1…)), then every
 * member's SnapshotReserved, then every member cut (at once, while every source volume is locked),
 * then every SnapshotCreated and GroupSnapshotCreated together. A failure before every cut is made
 * removes every member image and undoes the group and its members.
 *
 * The rule of single reservations holds for the group and its members (reservation.ts,
 * decideImageCreate; docs/operations.md, "The extra snapshot"): the group is reserved only once
 * its name points at it, and its members only once it lives; a group or member the projection
 * lacks is read from the log before it is judged (another writer's: ours are fresh uuids); and the
 * name is released only together with the end of the group and of every member it lists that
 * has not ended — also those the run has not seen live, fenced on what the log has of them (none:
 * sequence 0), so that a reservation stored without its writer hearing of it, or still on its
 * way, is either seen or refused.
 */
/**
 * The phases of a group create: ours named, reserved, its members reserved, cut, all recorded;
 * another's read from the log, its members read (projection, then log) and looked at; undone.
 */
export type GroupPhase = "named" | "reserved" | "membersReserved" | "cut" | "recorded" | "pointedRead" | "membersRead" | "membersLogged" | "looked" | "undone";

export function createGroupSnapshot(req: ParsedRequest<"groupsnapshot.create">): Command<GroupSnapshotView, GroupPhase> {
  const digest = groupDigest(req.sourceUuids, req.parameters);
  const name: Address = { kind: "name", of: "groupsnapshot", name: req.name };
  const sources = req.sourceUuids.map((uuid) => ({ kind: "volume" as const, uuid }));
  return {
    requestId: req.requestId,
    first: { locks: [{ kind: "name", of: "groupsnapshot", name: req.name }, ...sources], states: [name, ...sources], follow: true },
    decide: (v, ctx) => {
      const dirUuid = nameState(v, "groupsnapshot", req.name)?.uuid;
      const pointed: Address | undefined = dirUuid ? { kind: "groupsnapshot", uuid: dirUuid } : undefined;
      const groupState = pointed && v.state(pointed);
      const record = liveRecord(groupState, "groupsnapshot");
      const ours = dirUuid !== undefined && dirUuid === ctx.ids(0);
      if (v.phase === "failed") return groupFailed(v, req.name, ctx.ids(0));
      if (v.phase === "named") return { act: { events: [reserveGroup(v, ctx, req, digest)] }, phase: "reserved" };
      // The name points at a group the projection does not have: the log says whether it lives.
      if (pointed && !groupState && !v.fromLog(pointed)) return { read: { fromLog: [pointed] }, phase: "pointedRead" };
      if (record && ours && !record.ready) {
        // Our members are fresh uuids: nobody else can have reserved them (and, unread, an undo reads them from the log).
        const step = buildStep(v, ctx, record);
        if (step) return step;
      } else if (record) {
        const addresses = record.members.map(memberAddress);
        const unread = addresses.filter((a) => !v.has(a));
        if (unread.length > 0) return { read: { states: unread }, phase: "membersRead" };
        // Members the projection does not have (a reservation stored without its ack): the log says whether they live.
        const unlogged = addresses.filter((a) => !v.state(a) && !v.fromLog(a));
        if (unlogged.length > 0) return { read: { fromLog: unlogged }, phase: "membersLogged" };
      }
      // A member's image is looked at once (ours were cut by this run): which are is the view's to say, member by member.
      if (record) {
        const unseen = membersOf(v, record).flatMap((m) => (m.record && v.image(refOf(m.record)) === undefined ? [refOf(m.record)] : []));
        if (unseen.length > 0) return { stat: unseen, phase: "looked" };
      }
      const state = record && { record, members: membersOf(v, record) };
      const verdict = checkGroupReservation({ name: req.name, sourceUuids: req.sourceUuids, digest }, dirUuid, state);
      switch (verdict.kind) {
        case "reuse":
          return { reply: groupView(verdict.record) };
        case "conflict":
          throw alreadyExists(verdict.reason);
        case "inconsistent":
          throw new DriverError("Inconsistent", verdict.reason);
        case "complete":
          return { act: { events: recordCuts(verdict.record.record, verdict.cut) }, phase: "recorded" };
        case "stale":
          return { act: undoGroup(v, req.name, verdict.uuid, verdict.reason), phase: "undone" };
        case "new":
          reserveGroup(v, ctx, req, digest); // what refuses the group (a missing source, several pools) refuses it before the name is taken
          return { act: { events: [shared.nameReserved("groupsnapshot", req.name, ctx.ids(0))] }, phase: "named" };
        default: {
          const never: never = verdict;
          throw new Error(`unhandled verdict ${JSON.stringify(never)}`);
        }
      }
    },
  };
}

const refOf = (r: { pool: string; imageName: string }): ImageRef => ({ pool: r.pool, imageName: r.imageName });

/** The group's reservation (its members' snapshot uuids chosen now); refused when a source is missing or the sources are in several pools. */
function reserveGroup(v: View, ctx: Ctx, req: ParsedRequest<"groupsnapshot.create">, digest: string): EventBody {
  const volumes = req.sourceUuids.map((uuid) => {
    const r = madeIn(v, "volume", uuid, undefined);
    if (!r) throw notFound(`source volume ${uuid} does not exist`);
    return r;
  });
  const where = groupPool(volumes);
  if ("refused" in where) throw new DriverError("FailedPrecondition", where.refused);
  const uuid = ctx.ids(0);
  const members = volumes.map((vol, i) => ({ volumeUuid: vol.uuid, snapshotUuid: ctx.ids(i + 1) }));
  const pool = { pool: where.pool, poolId: poolIn(ctx, where.pool).poolId };
  return { type: "GroupSnapshotReserved", uuid, name: req.name, instance: ctx.cluster.instance, ...pool, digest, members };
}

/** Our own group, not made yet: reserve the members not reserved, else cut the members not cut; undefined when all are. */
function buildStep(v: View, ctx: Ctx, g: GroupRecord): { act: Act; phase: GroupPhase } | undefined {
  const members = membersOf(v, g);
  const unreserved = members.filter((m) => !m.record);
  if (unreserved.length > 0) {
    const events = unreserved.map(
      ({ member }): EventBody => ({
        type: "SnapshotReserved",
        uuid: member.snapshotUuid,
        name: g.name,
        instance: ctx.cluster.instance,
        sourceUuid: member.volumeUuid,
        pool: g.pool,
        poolId: g.poolId,
        imageName: imageOf(member),
        digest: g.digest,
        groupSnapshotUuid: g.uuid,
      }),
    );
    return { act: { events }, phase: "membersReserved" };
  }
  const uncut = members.filter((m) => !m.image);
  if (uncut.length === 0) return undefined;
  const effects = uncut.map(({ member }): Effect => {
    const source = liveRecord(v.state({ kind: "volume", uuid: member.volumeUuid }), "volume") as VolumeRecord;
    return { op: "snapshot", pool: g.pool, from: source.imageName, imageName: imageOf(member) };
  });
  return { act: { effects }, phase: "cut" };
}

/** Record the members that were cut but not recorded, and the group (one time for them all). */
function recordCuts(g: GroupRecord, cut: MemberState[]): EventBody[] {
  const created = cut.flatMap((m) => (m.record && m.image ? [createdEvent("snapshot", m.record.uuid, m.image)] : []));
  return g.ready ? created : [...created, { type: "GroupSnapshotCreated", uuid: g.uuid }];
}

/**
 * Undo a group that was not cut whole: remove what member images there are, release the name, and
 * end the group and every member it lists unless they have ended — also those not seen live (fenced
 * on what the log has of them, or sequence 0: a reservation still on its way is refused).
 */
function undoGroup(v: View, name: string, uuid: string, reason: string): Act {
  const state = v.state({ kind: "groupsnapshot", uuid });
  const record = liveRecord(state, "groupsnapshot");
  const members = record ? membersOf(v, record) : [];
  const unended = members.filter((m) => !isEnded(v.state(memberAddress(m.member))));
  return {
    effects: members.map((m) => ({ op: "delete" as const, pool: m.record?.pool ?? "*", imageName: imageOf(m.member) })),
    events: [
      shared.nameReleased("groupsnapshot", name, uuid),
      ...(isEnded(state) ? [] : [shared.undone("groupsnapshot", uuid, reason)]),
      ...unended.map((m) => shared.undone("snapshot", m.member.snapshotUuid, reason)),
    ],
  };
}

/** A step of our own group failed: unless every member was cut (an append failed after), undo it whole. */
function groupFailed(v: View, name: string, ours: string): Decision<GroupSnapshotView, GroupPhase> {
  const f = v.failed as NonNullable<View["failed"]>;
  const record = liveRecord(v.state({ kind: "groupsnapshot", uuid: ours }), "groupsnapshot");
  const named = nameState(v, "groupsnapshot", name)?.uuid === ours;
  if (!record && !named) return { fail: f.error };
  const members = record ? membersOf(v, record) : [];
  if (f.step === "append" && members.length > 0 && members.every((m) => m.image)) return { fail: f.error };
  const reason = f.step === "effect" ? `a member's cut failed: ${f.error.message}` : f.fenced ? "name fenced off" : "a reservation failed";
  // Our name taken, our group's reservation unanswered: it may be in the log, or on its way. End it
  // with the name (fenced on what the log has of it, or 0), never release the name alone.
  const maybeOurs = !record && named && !!f.uncertain && !isEnded(v.state({ kind: "groupsnapshot", uuid: ours }));
  const undo = record
    ? undoGroup(v, name, ours, reason)
    : { events: [shared.nameReleased("groupsnapshot", name, ours), ...(maybeOurs ? [shared.undone("groupsnapshot", ours, reason)] : [])] };
  return { fail: f.error, act: named ? undo : { ...undo, events: (undo.events ?? []).filter((e) => e.type !== "NameReleased") } };
}

/**
 * DeleteVolumeGroupSnapshot: lock the group, then its name and its members; remove the members'
 * images and append their SnapshotDeleted, then GroupSnapshotDeleted + NameReleased (so a crash
 * in between leaves a live group whose members are gone, which the CO's retry finishes).
 */
/** Its phases: the name and the members read (when the first read did not bring them), the members deleted, the group deleted. */
export function deleteGroupSnapshot(req: ParsedRequest<"groupsnapshot.delete">): Command<{ deleted: boolean }, "nameRead" | "membersDeleted" | "deleted"> {
  const me = { kind: "groupsnapshot" as const, uuid: req.uuid };
  return {
    requestId: req.requestId,
    first: { locks: [me], states: [me] },
    decide: (v) => {
      // Deleted; or a failed step that landed GroupSnapshotDeleted (not the name's release): deleted all the same.
      if (v.phase === "deleted" || (v.phase === "failed" && v.appended.some((e) => e.event.type === "GroupSnapshotDeleted")))
        return { reply: { deleted: true } };
      const r = liveRecord(v.state(me), "groupsnapshot");
      if (!r) return { reply: { deleted: false } }; // unknown: deleting is idempotent
      const mismatch = membersMismatch(r, req.snapshotUuids);
      if (mismatch) throw invalidArgument(mismatch);
      const name: Address = { kind: "name", of: "groupsnapshot", name: r.name };
      if (!v.has(name)) {
        const members = r.members.map((m) => ({ kind: "snapshot" as const, uuid: m.snapshotUuid }));
        return { read: { locks: [{ kind: "name", of: "groupsnapshot", name: r.name }, ...members], states: [name, ...members] }, phase: "nameRead" };
      }
      const live = membersOf(v, r).flatMap((m) => (m.record ? [m.record] : []));
      if (live.length > 0) {
        return {
          act: {
            effects: live.map((s) => ({ op: "delete" as const, pool: s.pool, imageName: s.imageName })),
            events: live.map((s) => shared.deleted("snapshot", s.uuid)),
          },
          phase: "membersDeleted",
        };
      }
      const release = nameState(v, "groupsnapshot", r.name)?.uuid === r.uuid ? [shared.nameReleased("groupsnapshot", r.name, r.uuid)] : [];
      return { act: { events: [shared.deleted("groupsnapshot", r.uuid), ...release] }, phase: "deleted" };
    },
  };
}
