/**
 * Group snapshots: CreateVolumeGroupSnapshot, DeleteVolumeGroupSnapshot, GetVolumeGroupSnapshot.
 *
 * Create (idempotent by name, crash-safe like a single snapshot):
 *  1. Lock the group name and every source volume (all or none, bounded wait → Aborted), reading
 *     the name's directory entry and record, and the source volumes, in one round trip.
 *  2. Decide (domain/group.ts): reuse, conflict, complete, stale (undo, then afresh), new.
 *  3. New: append NameReserved + GroupSnapshotReserved (listing every member's snapshot uuid),
 *     then every member's SnapshotReserved; cut every member; append every SnapshotCreated and
 *     GroupSnapshotCreated together (one time for them all). A failure before the cuts are all
 *     made removes every member image and undoes the group and its members.
 * Delete: lock the group, then its name and its members; remove the members' images; append
 * their SnapshotDeleted, then GroupSnapshotDeleted + NameReleased (so a crash in between leaves a
 * live group whose members are gone, which the CO's retry finishes).
 */
import { randomUUID } from "node:crypto";
import {
  DriverError,
  type GroupMember,
  type GroupSnapshotView,
  invalidArgument,
  type Kind,
  notFound,
  type ParsedRequest,
  type StoredEvent,
} from "@csi/contracts";
import { type Append, AppendError, isFenced } from "../adapters/event-log.js";
import { foldOne, liveRecord } from "../domain/evolve.js";
import { checkGroupReservation, type GroupState, groupDigest, groupPool, type MemberState, membersMismatch } from "../domain/group.js";
import { KINDS } from "../domain/kinds.js";
import type { PoolBackend } from "../domain/pool-backend.js";
import { stateFromHash } from "../domain/projection.js";
import {
  type GroupRecord,
  groupFromHash,
  groupSnapshotView,
  type Hash,
  isLive,
  isMade,
  snapshotFromHash,
  type VolumeRecord,
  volumeFromHash,
} from "../domain/records.js";
import type { Aggregates } from "./aggregates.js";
import { type Operation, runOperation } from "./operation.js";

const view = (s: GroupState): GroupSnapshotView =>
  groupSnapshotView(
    s.record,
    s.members.flatMap((m) => (m.record ? [m.record] : [])),
  );

export class GroupSnapshots {
  constructor(private readonly a: Aggregates) {}

  async create(req: ParsedRequest<"groupsnapshot.create">): Promise<GroupSnapshotView> {
    const digest = groupDigest(req.sourceUuids, req.parameters);
    const sources = req.sourceUuids.map((uuid) => ({ kind: "volume" as const, uuid }));
    return runOperation(this.a.d, req.requestId, async (op) => {
      const { dirUuid, nameSeq, hash, alsoHashes } = await this.a.lockName(op, "groupsnapshot", req.name, sources);
      const state = hash && dirUuid ? await this.#state(groupFromHash(dirUuid, hash)) : undefined;
      const verdict = checkGroupReservation({ name: req.name, sourceUuids: req.sourceUuids, digest }, dirUuid, state);
      const settled = await this.a.settle({ kind: "groupsnapshot", name: req.name, nameSeq }, verdict, {
        complete: (v) => this.#complete(op, v.record, hash, v.cut),
        undo: (v) => this.#undo(op, req.name, v.uuid, nameSeq, v.record, v.reason),
      });
      if ("done" in settled) return view(settled.done);
      const volumes = req.sourceUuids.map((uuid, i) => {
        const h = alsoHashes[i];
        if (!isMade(h)) throw notFound(`source volume ${uuid} does not exist`);
        return volumeFromHash(uuid, h);
      });
      const where = groupPool(volumes);
      if ("refused" in where) throw new DriverError("FailedPrecondition", where.refused);
      const made = await this.#reserveAndCut(op, req.name, settled.fence, this.a.pool(where.pool), digest, volumes);
      return view(made);
    });
  }

  /** The group's members as they are now: their records and (`stat`) whether their images exist. */
  async #state(record: GroupRecord, stat = true): Promise<GroupState> {
    const hashes = await this.a.read(record.members.map((m) => this.a.keys.record("snapshot", m.snapshotUuid)));
    const members = await Promise.all(
      record.members.map(async (member, i): Promise<MemberState> => {
        const h = hashes[i];
        if (!isLive(h)) return h ? { member, hash: h } : { member };
        const r = snapshotFromHash(member.snapshotUuid, h);
        const image = stat ? await this.a.poolOf(r.pool)?.statImage(r.imageName) : undefined;
        return { member, hash: h, record: r, ...(image ? { image } : {}) };
      }),
    );
    return { record, members };
  }

  /** The group and its members once `landed` is applied (the projection's fold). */
  #after(groupUuid: string, groupHash: Hash | undefined, members: { member: GroupMember; hash?: Hash }[], landed: StoredEvent[]): GroupState {
    return {
      record: this.a.after("groupsnapshot", groupUuid, groupHash, landed),
      members: members.map((m) => {
        const uuid = m.member.snapshotUuid;
        const record = liveRecord(foldOne({ kind: "snapshot", uuid }, stateFromHash("snapshot", uuid, m.hash), landed), "snapshot");
        return record ? { member: m.member, record } : { member: m.member };
      }),
    };
  }

  /** Record the members that were cut but not recorded, and the group. */
  async #complete(op: Operation, state: GroupState, groupHash: Hash | undefined, cut: MemberState[]): Promise<GroupState> {
    const list: Append[] = cut.flatMap((m) => (m.record && m.image ? [this.#created(m.record.uuid, m.image, m.record.seq)] : []));
    if (!state.record.ready)
      list.push({
        subject: this.a.recordSubject("groupsnapshot", state.record.uuid),
        body: { type: "GroupSnapshotCreated", uuid: state.record.uuid },
        expectedSeq: state.record.seq,
      });
    const landed = await op.append(...list);
    return this.#after(state.record.uuid, groupHash, state.members, landed);
  }

  #created(snapshotUuid: string, image: { id: string; sizeBytes: number }, expectedSeq: number): Append {
    return {
      subject: this.a.recordSubject("snapshot", snapshotUuid),
      body: { type: "SnapshotCreated", uuid: snapshotUuid, imageId: image.id, sizeBytes: image.sizeBytes },
      expectedSeq,
    };
  }

  async #reserveAndCut(op: Operation, name: string, fence: number, pool: PoolBackend, digest: string, volumes: VolumeRecord[]): Promise<GroupState> {
    const uuid = randomUUID();
    const members = volumes.map((v) => ({ volumeUuid: v.uuid, snapshotUuid: randomUUID() }));
    const imageOf = (m: GroupMember) => KINDS.snapshot.imageName(m.snapshotUuid);
    const groupSubject = this.a.recordSubject("groupsnapshot", uuid);
    const instance = this.a.d.cluster.instance;
    const reserved = { type: "GroupSnapshotReserved", uuid, name, instance, pool: pool.poolName, poolId: pool.poolId, digest, members } as const;
    const [nameEv, groupEv] = await op
      .append(
        { subject: this.a.nameSubject("groupsnapshot", name), body: { type: "NameReserved", kind: "groupsnapshot", name, uuid }, expectedSeq: fence },
        { subject: groupSubject, body: reserved, expectedSeq: 0 },
      )
      .catch(async (err: unknown) => {
        const [nameLanded, groupLanded] = err instanceof AppendError ? err.landed : [];
        if (groupLanded && !nameLanded) {
          await op
            .append({
              subject: groupSubject,
              body: { type: "ReservationUndone", kind: "groupsnapshot", uuid, reason: "name fenced off" },
              expectedSeq: groupLanded.seq,
            })
            .catch(() => {});
        }
        throw err;
      });
    // Undo everything that landed: the members' reservations, the group's, the name.
    const undo = async (landed: (StoredEvent | undefined)[], reason: string) => {
      await Promise.all(members.map((m) => pool.deleteImage(imageOf(m)).catch(() => {})));
      const ends: { kind: Kind; uuid: string; seq: number }[] = [
        { kind: "groupsnapshot", uuid, seq: groupEv?.seq ?? 0 },
        ...members.map((m, i) => ({ kind: "snapshot" as const, uuid: m.snapshotUuid, seq: landed[i]?.seq ?? 0 })),
      ];
      await this.a.releaseAndUndo(op, { kind: "groupsnapshot", name, uuid, seq: nameEv?.seq ?? 0 }, ends, reason).catch(() => {});
    };
    const memberEvs = await op
      .append(
        ...members.map((m, i): Append => {
          const v = volumes[i] as VolumeRecord;
          const body = {
            type: "SnapshotReserved",
            uuid: m.snapshotUuid,
            name,
            instance,
            sourceUuid: v.uuid,
            pool: pool.poolName,
            poolId: pool.poolId,
            imageName: imageOf(m),
            digest,
            groupSnapshotUuid: uuid,
          } as const;
          return { subject: this.a.recordSubject("snapshot", m.snapshotUuid), body, expectedSeq: 0 };
        }),
      )
      .catch(async (err: unknown) => {
        await undo(err instanceof AppendError ? err.landed : [], "a member's reservation failed");
        throw err;
      });
    // Every member is cut while every source volume is locked.
    const cuts = await Promise.allSettled(members.map((m, i) => pool.snapshotImage((volumes[i] as VolumeRecord).imageName, imageOf(m))));
    const failed = cuts.find((c) => c.status === "rejected");
    if (failed) {
      await undo(memberEvs, `a member's cut failed: ${(failed.reason as Error)?.message}`);
      throw failed.reason;
    }
    const images = cuts.map((c) => (c.status === "fulfilled" ? c.value : undefined));
    const landed = await op
      .append(...members.map((m, i) => this.#created(m.snapshotUuid, images[i] as { id: string; sizeBytes: number }, memberEvs[i]?.seq ?? 0)), {
        subject: groupSubject,
        body: { type: "GroupSnapshotCreated", uuid },
        expectedSeq: groupEv?.seq ?? 0,
      })
      .catch(async (err: unknown) => {
        // As for a single snapshot: the member images are an orphan only if another writer undid the group.
        if (isFenced(err) && (await this.a.ended(groupSubject))) await Promise.all(members.map((m) => pool.deleteImage(imageOf(m)).catch(() => {})));
        throw err;
      });
    return this.#after(
      uuid,
      undefined,
      members.map((member) => ({ member })),
      [groupEv, ...memberEvs, ...landed].filter((e) => e !== undefined),
    );
  }

  /** Undo a group that was not cut whole: remove what images there are, end its records, release the name. Returns the name fence after. */
  async #undo(op: Operation, name: string, uuid: string, nameSeq: number, state: GroupState | undefined, reason: string): Promise<number> {
    // A group record lost from Redis is still in the log: its reservation lists the members.
    const known = state ?? (await this.#fromLog(uuid));
    const ends: { kind: Kind; uuid: string; seq: number }[] = [
      { kind: "groupsnapshot", uuid, seq: known?.record.seq ?? (await this.a.d.log.lastSeqOf(this.a.recordSubject("groupsnapshot", uuid))) },
    ];
    for (const m of known?.members ?? []) {
      const pools = m.record ? [this.a.poolOf(m.record.pool)] : [...this.a.d.pools.values()];
      for (const p of pools) await p?.deleteImage(KINDS.snapshot.imageName(m.member.snapshotUuid));
      // A member already ended (a tombstone) has nothing left to undo.
      const seq = m.record?.seq ?? (m.hash ? 0 : await this.a.d.log.lastSeqOf(this.a.recordSubject("snapshot", m.member.snapshotUuid)));
      ends.push({ kind: "snapshot", uuid: m.member.snapshotUuid, seq });
    }
    const [released] = await this.a.releaseAndUndo(op, { kind: "groupsnapshot", name, uuid, seq: nameSeq }, ends, reason);
    return released?.seq ?? nameSeq;
  }

  async #fromLog(uuid: string): Promise<GroupState | undefined> {
    const history = await this.a.d.log.history([this.a.recordSubject("groupsnapshot", uuid)]);
    const record = liveRecord(foldOne({ kind: "groupsnapshot", uuid }, undefined, history), "groupsnapshot");
    return record ? this.#state(record) : undefined;
  }

  async delete(req: ParsedRequest<"groupsnapshot.delete">): Promise<{ deleted: boolean }> {
    return runOperation(this.a.d, req.requestId, async (op) => {
      const k = this.a.keys;
      const first = await op.lock({ locks: [k.uuidLock("groupsnapshot", req.uuid)], hashes: [k.record("groupsnapshot", req.uuid)], fields: [] });
      const h = first.hashes[0];
      if (!isLive(h)) return { deleted: false }; // unknown: deleting is idempotent
      const r = groupFromHash(req.uuid, h);
      const mismatch = membersMismatch(r, req.snapshotUuids);
      if (mismatch) throw invalidArgument(mismatch);
      const second = await op.lock({
        locks: [k.nameLock("groupsnapshot", r.name), ...r.members.map((m) => k.uuidLock("snapshot", m.snapshotUuid))],
        hashes: r.members.map((m) => k.record("snapshot", m.snapshotUuid)),
        fields: [
          [k.dir("groupsnapshot"), k.dirField("groupsnapshot", r.name)],
          [k.dirSeq("groupsnapshot"), r.name],
        ],
      });
      const live = r.members.flatMap((m, i) => {
        const mh = second.hashes[i];
        return isLive(mh) ? [snapshotFromHash(m.snapshotUuid, mh)] : [];
      });
      for (const s of live) await this.a.poolOf(s.pool)?.deleteImage(s.imageName);
      if (live.length > 0) {
        await op.append(
          ...live.map(
            (s): Append => ({ subject: this.a.recordSubject("snapshot", s.uuid), body: { type: "SnapshotDeleted", uuid: s.uuid }, expectedSeq: s.seq }),
          ),
        );
      }
      const list: Append[] = [
        { subject: this.a.recordSubject("groupsnapshot", r.uuid), body: { type: "GroupSnapshotDeleted", uuid: r.uuid }, expectedSeq: r.seq },
      ];
      if (second.fields[0] === r.uuid) {
        list.push({
          subject: this.a.nameSubject("groupsnapshot", r.name),
          body: { type: "NameReleased", kind: "groupsnapshot", name: r.name, uuid: r.uuid },
          expectedSeq: Number(second.fields[1] ?? 0),
        });
      }
      await op.append(...list);
      return { deleted: true };
    });
  }

  async get(req: ParsedRequest<"groupsnapshot.get">): Promise<GroupSnapshotView> {
    const [h] = await this.a.read([this.a.keys.record("groupsnapshot", req.uuid)]);
    if (!isLive(h)) throw notFound(`group snapshot ${req.uuid} does not exist`);
    const r = groupFromHash(req.uuid, h);
    const mismatch = membersMismatch(r, req.snapshotUuids);
    if (mismatch) throw invalidArgument(mismatch);
    return view(await this.#state(r, false));
  }

  /** Whether a group snapshot exists (reserved or made, not deleted): its members are deleted with it only. */
  async isLive(uuid: string): Promise<boolean> {
    const [h] = await this.a.read([this.a.keys.record("groupsnapshot", uuid)]);
    return isLive(h);
  }
}
