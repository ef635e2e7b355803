/**
 * The reservation state machine of ceph-csi's voljournal (CheckReservation / ReserveName /
 * UndoReservation), as pure decisions. The caller reads the name directory entry and the
 * per-uuid record (under the name lock), asks the backend whether the image exists, and gets
 * one verdict back:
 *
 *   new           nothing reserved under this name: reserve and create
 *   reuse         reserved, created and compatible: answer with the same volume (idempotent)
 *   complete      reserved, the image exists but its *Created event is missing (the writer
 *                 died between the two): record the image and answer
 *   stale         reserved but unusable (record gone, image never made): undo, then start afresh
 *   conflict      reserved and created but incompatible: AlreadyExists
 *   inconsistent  the directory and the record disagree on the name: an operator must look
 */
import { createHash } from "node:crypto";
import { alreadyExists, type Capability, type ContentSource, DriverError, type EventBody, type Kind } from "@csi/contracts";
import { type Address, isEnded, liveRecord, type NameState } from "../../fold/evolve.js";
import { createdEvent, type ImageKind, KINDS, type RecordOf, shared } from "../../fold/kinds.js";
import type { SnapshotRecord, VolumeRecord } from "../../fold/records.js";
import type { ImageInfo } from "../../pools/port.js";
import type { Act, Ctx, Decision, Effect, ReadPlan, View } from "../decider.js";

/** `C`: what completing needs (for an image, the image found; for a group, its unrecorded members). */
export type Verdict<R, C = { image: ImageInfo }> =
  | { kind: "new" }
  | { kind: "reuse"; record: R }
  | ({ kind: "complete"; record: R } & C)
  | { kind: "stale"; uuid: string; record?: R; reason: string }
  | { kind: "conflict"; reason: string }
  | { kind: "inconsistent"; reason: string };

/** Order-independent digest of what makes two create requests "the same". */
export function digestOf(value: Record<string, unknown>): string {
  return createHash("sha256").update(canonicalJson(value)).digest("hex").slice(0, 32);
}

function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v && typeof v === "object") {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

/**
 * What a repeated create must match: pool, parameters and the I/O limits given at creation
 * (not the current ones: a retried create after a ControllerModifyVolume still matches). A volume
 * without limits digests as before they existed.
 */
export function volumeDigest(pool: string, parameters: Record<string, string>, mutableParameters: Record<string, string> = {}): string {
  return digestOf({ pool, parameters, ...(Object.keys(mutableParameters).length > 0 ? { mutableParameters } : {}) });
}

export const sameSet = (a: string[], b: string[]) => a.length === b.length && [...a].sort().join() === [...b].sort().join();

const sameSource = (a?: ContentSource, b?: ContentSource) => a?.kind === b?.kind && a?.uuid === b?.uuid;

export interface VolumeAsk {
  name: string;
  sizeBytes: number;
  limitBytes: number;
  digest: string;
  source?: ContentSource;
  capabilities: Capability[];
}

/** The common part: directory entry vs record vs image. */
function checkCommon<R extends VolumeRecord | SnapshotRecord>(
  name: string,
  dirUuid: string | undefined,
  record: R | undefined,
  image: ImageInfo | undefined,
): Verdict<R> | undefined {
  if (!dirUuid) return { kind: "new" };
  if (!record) return { kind: "stale", uuid: dirUuid, reason: "the per-uuid record is missing" };
  if (record.name !== name) {
    return { kind: "inconsistent", reason: `name directory points ${name} at ${dirUuid}, whose record names ${record.name}` };
  }
  if (!image) {
    return { kind: "stale", uuid: dirUuid, record, reason: record.imageId ? "the image is gone from the pool" : "the image was never created" };
  }
  if (image.sizeBytes < record.sizeBytes) {
    return { kind: "stale", uuid: dirUuid, record, reason: `the image is ${image.sizeBytes} bytes, smaller than reserved (left half-made)` };
  }
  if (!record.imageId) return { kind: "complete", record, image };
  return undefined;
}

export function checkVolumeReservation(
  ask: VolumeAsk,
  dirUuid: string | undefined,
  record: VolumeRecord | undefined,
  image: ImageInfo | undefined,
): Verdict<VolumeRecord> {
  const common = checkCommon(ask.name, dirUuid, record, image);
  if (common && common.kind !== "complete") return common;
  // A reservation whose image exists but was never recorded is judged with the image's size.
  const r = common ? { ...common.record, sizeBytes: common.image.sizeBytes } : (record as VolumeRecord);
  if (!sameSource(r.source, ask.source)) return { kind: "conflict", reason: `volume ${ask.name} exists with another content source` };
  if (r.digest !== ask.digest) return { kind: "conflict", reason: `volume ${ask.name} exists with other parameters` };
  if (r.sizeBytes < ask.sizeBytes || (ask.limitBytes > 0 && r.sizeBytes > ask.limitBytes)) {
    return { kind: "conflict", reason: `volume ${ask.name} exists with size ${r.sizeBytes}, outside the requested range` };
  }
  return common ?? { kind: "reuse", record: r };
}

export function checkSnapshotReservation(
  ask: { name: string; sourceUuid: string; digest: string },
  dirUuid: string | undefined,
  record: SnapshotRecord | undefined,
  image: ImageInfo | undefined,
): Verdict<SnapshotRecord> {
  // A snapshot name that already points at another source is a conflict whatever state it is in.
  if (record && dirUuid && record.name === ask.name && record.sourceUuid !== ask.sourceUuid) {
    return { kind: "conflict", reason: `snapshot ${ask.name} exists for another source volume` };
  }
  const common = checkCommon(ask.name, dirUuid, record, image);
  if (common && common.kind !== "complete") return common;
  const r = common ? common.record : (record as SnapshotRecord);
  if (r.digest !== ask.digest) return { kind: "conflict", reason: `snapshot ${ask.name} exists with other parameters` };
  return common ?? { kind: "reuse", record: r };
}

/** Page over a sorted list of uuids: the token is the last uuid of the previous page. */
export function nextToken(uuids: string[], maxEntries: number): string | undefined {
  return maxEntries > 0 && uuids.length > maxEntries ? uuids[maxEntries - 1] : undefined;
}

/**
 * How a volume or a snapshot is created, as one decider over the rounds of a run (the same for
 * both kinds; group snapshots: group.ts). Each round looks at its phase (CreatePhase), the
 * request name, the record it points at and that record's image, and takes the next step:
 *
 *   the name points nowhere                        build the image of a fresh uuid (ids(0))       → built
 *   built (our image made)                         the whole reservation in one write: NameReserved,
 *                                                  *Reserved and *Created (commands/runner.ts, "One write") → written
 *   written                                        the answer: our record
 *   anyone's, no record in the projection (start)  read the record from the log                    → pointedRead
 *   anyone's, image not looked at                  stat it                                         → looked
 *   looked (or recorded)                           the verdict (reservation state machine above):
 *                                                  reuse → reply; complete → *Created (→ recorded); stale → undo
 *                                                  (remove the image, NameReleased + ReservationUndone → undone),
 *                                                  after which the name points nowhere; conflict → AlreadyExists
 *   failed                                         undo what of ours needs it (failed below); reading the log first
 *                                                  (→ logRead) when our one write got no answer
 *
 * The image comes before any event (docs/journal.md, "A create in three round trips"): a crash
 * between leaves an image no record names, which `verify` reports and `gc` removes; no reply ever
 * named it. A failed step of our own is undone (failed below).
 *
 * One rule keeps a name to one live record (docs/operations.md, "The extra snapshot"): the name is
 * released only together with the end of the record it pointed at — a record the run has not seen
 * live included, ended on the fence of what the run saw (none: sequence 0), so that a record stored
 * without its writer hearing of it, or still on its way to the log, is either seen (the fence fails,
 * the run catches up and decides again) or refused when it arrives; and a record of ours that landed
 * while our name was refused is ended before the run fails.
 */
export interface ImageCreate<K extends ImageKind, V, Res extends Reservation = Reservation> {
  kind: K;
  name: string;
  verdict(record: RecordOf<K> | undefined, dirUuid: string | undefined, image: ImageInfo | undefined): Verdict<RecordOf<K>>;
  /** The reservation of a new aggregate `uuid`; throws what refuses it (its source, pool, size). */
  reserve(uuid: string): Res;
  /** The step that makes the image of our reservation. */
  build(reservation: Res): Extract<Effect, { op: "create" | "clone" | "snapshot" }>;
  reply(record: RecordOf<K>): V;
}

/** The phases of a create (volume or snapshot), named by its steps (decideImageCreate above). */
export type CreatePhase = "pointedRead" | "looked" | "undone" | "recorded" | "built" | "written" | "logRead";

/** A reservation event: what it says of its image. */
export type Reservation = Extract<EventBody, { type: "VolumeReserved" | "SnapshotReserved" }>;

/** The first read of a create: the name (and the record it points at) and the run's fresh uuid, locked; `also` besides. */
export function createRead(kind: ImageKind, name: string, ctx: Ctx, also: Address[] = []): ReadPlan {
  const named = { kind: "name", of: kind, name } as const; // a lock and an address alike
  // The fresh uuid's lock: gc, which finds our image before our events land, waits for them and checks again.
  return { locks: [named, { kind, uuid: ctx.ids(0) }, ...also], states: [named, ...also], follow: true };
}

export function decideImageCreate<K extends ImageKind, V, Res extends Reservation>(
  v: View<CreatePhase>,
  ctx: Ctx,
  c: ImageCreate<K, V, Res>,
): Decision<V, CreatePhase> {
  const ours = ctx.ids(0);
  switch (v.phase) {
    case "failed":
    case "logRead":
      return failed(v, c, ours);
    case "built":
      return write(v, c, ours);
    case "written":
      return { reply: c.reply(ourRecord(v, c.kind, ours)) };
    case "start":
    case "pointedRead":
    case "looked":
    case "undone":
    case "recorded":
      return judge(v, c, ours);
    default: {
      const never: never = v.phase;
      throw new Error(`unhandled phase ${JSON.stringify(never)}`);
    }
  }
}

/** The name, the record it points at and that record's image, as the view has them: the next step, or the answer. */
function judge<K extends ImageKind, V, Res extends Reservation>(v: View<CreatePhase>, c: ImageCreate<K, V, Res>, ours: string): Decision<V, CreatePhase> {
  const dirUuid = nameState(v, c.kind, c.name)?.uuid;
  const pointed = dirUuid ? { kind: c.kind, uuid: dirUuid } : undefined;
  const state = pointed && v.state(pointed);
  const record = liveRecord(state, c.kind);
  // The name points at a record the projection does not have: the log says whether it lives.
  if (v.phase === "start" && pointed && !state) return { read: { fromLog: [pointed] }, phase: "pointedRead" };
  const ref = record && { pool: record.pool, imageName: record.imageName };
  const looked = v.phase === "looked" || v.phase === "recorded";
  if (ref && !looked) return { stat: [ref], phase: "looked" };
  const verdict = c.verdict(record, dirUuid, (ref && v.image(ref)) ?? undefined);
  switch (verdict.kind) {
    case "reuse":
      return { reply: c.reply(verdict.record) };
    case "conflict":
      throw alreadyExists(verdict.reason);
    case "inconsistent":
      throw new DriverError("Inconsistent", verdict.reason);
    case "complete":
      return { act: { events: [createdEvent(c.kind, verdict.record.uuid, verdict.image)] }, phase: "recorded" };
    case "stale":
      return { act: undoStale(v, c.kind, c.name, verdict.uuid, verdict.reason), phase: "undone" };
    case "new":
      // What refuses the reservation (its source, pool, size) refuses it before anything is made.
      return { act: { effects: [{ ...c.build(c.reserve(ours)), name: c.name }] }, phase: "built" };
    default: {
      const never: never = verdict;
      throw new Error(`unhandled verdict ${JSON.stringify(never)}`);
    }
  }
}

/** Our image made: the name, our reservation and its *Created in one write (commands/runner.ts, "One write"). */
function write<K extends ImageKind, V, Res extends Reservation>(v: View<CreatePhase>, c: ImageCreate<K, V, Res>, ours: string): Decision<V, CreatePhase> {
  const reservation = c.reserve(ours);
  const made = v.image({ pool: reservation.pool, imageName: reservation.imageName });
  if (!made) throw new DriverError("Internal", `${c.kind} ${ours}: built, but its image is not known`);
  return { act: { events: [shared.nameReserved(c.kind, c.name, ours), reservation, createdEvent(c.kind, ours, made)] }, phase: "written" };
}

function ourRecord<K extends ImageKind>(v: View, kind: K, ours: string): RecordOf<K> {
  const r = liveRecord(v.state({ kind, uuid: ours }), kind);
  if (!r) throw new DriverError("Internal", `${kind} ${ours}: written, but its record is not known`);
  return r;
}

export function nameState(v: View, of: Kind, name: string): NameState | undefined {
  const s = v.state({ kind: "name", of, name });
  return s?.kind === "name" ? s : undefined;
}

/**
 * Undo a stale reservation of `uuid` under `name`: remove its image (from its pool; from every
 * pool when its record is lost), release the name, and end the record unless it has ended — also
 * when the log has none (yet): fenced on sequence 0, that end refuses a reservation still on its way.
 */
function undoStale(v: View, kind: ImageKind, name: string, uuid: string, reason: string): Act {
  const state = v.state({ kind, uuid });
  const record = liveRecord(state, kind);
  const imageName = record?.imageName ?? KINDS[kind].imageName(uuid);
  return {
    effects: [{ op: "delete", pool: record?.pool ?? "*", imageName }],
    events: [shared.nameReleased(kind, name, uuid), ...(isEnded(state) ? [] : [shared.undone(kind, uuid, reason)])],
  };
}

/**
 * A step of this run failed. A build that failed leaves nothing in the log: what it may have left
 * of the image is removed. Otherwise nothing of ours to undo unless the step failed once built (our
 * image made): then our one write was tried, and what of it landed is known from its acks (a
 * refusal is an answer), or, when it got no answer, from the log read once more (→ logRead). It may have landed whole (the answer after
 * all), or in part: our record ended (fenced on what the log has of it; on 0 when it may still
 * arrive), our name released, and only then our image removed.
 */
function failed<K extends ImageKind, V, Res extends Reservation>(v: View<CreatePhase>, c: ImageCreate<K, V, Res>, ours: string): Decision<V, CreatePhase> {
  const f = v.failed as NonNullable<View["failed"]>;
  const kind = c.kind;
  const ourImage = KINDS[kind].imageName(ours);
  if (f.effect && f.effect.op !== "delete" && f.effect.imageName === ourImage)
    return { fail: f.error, act: { effects: [{ op: "delete", pool: f.effect.pool, imageName: ourImage }] } };
  // Our one write is the step taken once built; any other left nothing of ours.
  const made = v.made.find((r) => r.imageName === ourImage);
  if (v.failedIn !== "built" || !made) return { fail: f.error };
  const name = { kind: "name" as const, of: kind, name: c.name };
  const me = { kind, uuid: ours };
  // Unanswered: only the log can say what of it landed. Answered (refused, fenced): the acks said.
  if (f.uncertain && v.phase === "failed") return { read: { fromLog: [name, me] }, phase: "logRead" };
  const mine = liveRecord(v.state(me), kind);
  const named = nameState(v, kind, c.name)?.uuid === ours;
  if (mine?.imageId && named) return { reply: c.reply(mine) }; // it all landed: the answer after all
  // Our record, if it may still arrive (no answer) and the log has nothing on its subject: end it on 0.
  const sealed = !v.state(me) && f.uncertain;
  const reason = f.fenced ? "name fenced off" : "its reservation failed";
  const events = [...(named ? [shared.nameReleased(kind, c.name, ours)] : []), ...(mine || sealed ? [shared.undone(kind, ours, reason)] : [])];
  // A record of ours the log has without its image recorded is left for the CO's retry to complete.
  if (mine && !mine.imageId && named) return { fail: f.error };
  return { fail: f.error, act: { events, cleanup: [{ op: "delete", ...made }] } };
}
