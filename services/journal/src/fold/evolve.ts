/**
 * The one fold (Emmett's decider `evolve`): `evolve(state, event) → state`. Pure, and the only
 * code that turns events into volume, snapshot, group-snapshot, claim and request-name state.
 * Everything else derives from what it returns:
 *   - the Redis projection: `projection.ts` maps states to hashes (`toHash`) and plans each
 *     write as the step from the state before to the state after (`planWrites`);
 *   - the journal's replies: the record read under the lock, evolved by the events the
 *     operation appended (`Aggregates.after`);
 *   - point-in-time replay (`replay.ts`) and `verify` (`audit/audit.ts`): the log folded alone.
 * Decisions (commands/deciders/reservation.ts, claims.ts, group.ts) are pure functions of these states.
 *
 * State is kept per aggregate — one per event subject: a volume, a snapshot, a group snapshot,
 * a request name. `addressOf(event)` says which one an event evolves. A state carries the
 * stream sequence of the last event applied to it; an event at or below it changes nothing (so
 * folding is idempotent and a partial view, e.g. a record read from Redis, can be evolved by
 * any stretch of the log that follows it). States are never changed in place.
 *
 * A foreign record (log/records.ts: not a valid event of a journal) changes nothing but the
 * sequence of the aggregate whose subject it is on: a state's sequence is its subject's last
 * sequence, the fence its next append is made on, so a foreign record never wedges it.
 */
import type { Claim, EventBody, JournalEvent, Kind, StoredEvent } from "@csi/contracts";
import { type Address, addressKey } from "./address.js";
import type { LogRecord } from "./log-record.js";
import type { GroupRecord, SnapshotRecord, VolumeRecord } from "./records.js";

interface Records {
  volume: VolumeRecord;
  snapshot: SnapshotRecord;
  groupsnapshot: GroupRecord;
}

/** A volume, snapshot or group snapshot: its record while it lives; none once it ended (a tombstone). */
export type RecordState<K extends Kind = Kind> = { [P in K]: { kind: P; uuid: string; seq: number; record?: Records[P] } }[K];

/** A request name of a kind: the uuid it points at, if any. */
export interface NameState {
  kind: "name";
  of: Kind;
  name: string;
  seq: number;
  uuid?: string;
}

export type Aggregate = RecordState | NameState;

export { type Address, addressKey };

/** The aggregate an event evolves, or none (device history and pool events change no state). */
export function addressOf(e: EventBody): Address | undefined {
  switch (e.type) {
    case "NameReserved":
    case "NameReleased":
      return { kind: "name", of: e.kind, name: e.name };
    case "VolumeReserved":
    case "VolumeCreated":
    case "VolumeExpanded":
    case "VolumeModified":
    case "VolumeClaimed":
    case "VolumeUnclaimed":
    case "VolumeDeleted":
      return { kind: "volume", uuid: e.uuid };
    case "SnapshotReserved":
    case "SnapshotCreated":
    case "SnapshotDeleted":
      return { kind: "snapshot", uuid: e.uuid };
    case "GroupSnapshotReserved":
    case "GroupSnapshotCreated":
    case "GroupSnapshotDeleted":
      return { kind: "groupsnapshot", uuid: e.uuid };
    case "ReservationUndone":
    case "ReservationCollected":
      return { kind: e.kind, uuid: e.uuid };
    case "DeviceStateReported": // history only: device states live in the log
    case "ImageLeakCollected": // the image belonged to no aggregate
      return undefined;
    default: {
      const never: never = e;
      throw new Error(`no address for ${(never as { type: string }).type}`);
    }
  }
}

/** The aggregate a record of the log evolves: an event's (`addressOf`), or the one whose subject a foreign record is on. */
export function addressOfRecord(r: LogRecord): Address | undefined {
  return "foreign" in r ? r.address : addressOf(r.event);
}

export function addressOfState(s: Aggregate): Address {
  return s.kind === "name" ? { kind: "name", of: s.of, name: s.name } : { kind: s.kind, uuid: s.uuid };
}

/** Whether evolving `e` ignores the state before it (it starts its aggregate afresh). */
export function startsAfresh(e: EventBody): boolean {
  return e.type === "NameReserved" || e.type === "VolumeReserved" || e.type === "SnapshotReserved" || e.type === "GroupSnapshotReserved";
}

export function evolve(state: Aggregate | undefined, stored: LogRecord): Aggregate | undefined {
  const { seq } = stored;
  if (state && seq <= state.seq) return state; // applied already
  if ("foreign" in stored) return skipped(state, stored.address, seq);
  const e = stored.event;
  switch (e.type) {
    case "NameReserved":
      return { kind: "name", of: e.kind, name: e.name, seq, uuid: e.uuid };
    case "NameReleased": {
      // A release frees the name only if it still points at the released uuid.
      const keep = state?.kind === "name" && state.uuid !== undefined && state.uuid !== e.uuid ? { uuid: state.uuid } : {};
      return { kind: "name", of: e.kind, name: e.name, seq, ...keep };
    }
    case "VolumeReserved":
      return volumeReserved(e, seq);
    case "VolumeCreated":
      return onVolume(state, seq, () => ({ imageId: e.imageId, sizeBytes: e.sizeBytes }));
    case "VolumeExpanded":
      return onVolume(state, seq, () => ({ sizeBytes: e.sizeBytes }));
    case "VolumeModified":
      return onVolume(state, seq, () => ({ mutableParameters: e.mutableParameters }));
    case "VolumeClaimed": {
      const claim: Claim = { nodeId: e.nodeId, accessMode: e.accessMode, accessType: e.accessType, readOnly: e.readOnly };
      return onVolume(state, seq, (r) => ({ claims: [...r.claims.filter((c) => c.nodeId !== e.nodeId), claim].sort(byNode) }));
    }
    case "VolumeUnclaimed":
      return onVolume(state, seq, (r) => ({ claims: r.claims.filter((c) => c.nodeId !== e.nodeId) }));
    case "SnapshotReserved":
      return snapshotReserved(e, seq);
    case "SnapshotCreated":
      // A snapshot's creation time is when it was cut (recorded), also when a retry completes it.
      return onSnapshot(state, seq, () => ({ imageId: e.imageId, sizeBytes: e.sizeBytes, createdAt: e.time }));
    case "GroupSnapshotReserved":
      return {
        kind: "groupsnapshot",
        uuid: e.uuid,
        seq,
        record: { uuid: e.uuid, name: e.name, pool: e.pool, poolId: e.poolId, digest: e.digest, createdAt: e.time, seq, members: e.members, ready: false },
      };
    case "GroupSnapshotCreated":
      // A group's creation time is when its members were recorded (their SnapshotCreated share it).
      return onGroup(state, seq, () => ({ ready: true, createdAt: e.time }));
    case "VolumeDeleted":
      return { kind: "volume", uuid: e.uuid, seq };
    case "SnapshotDeleted":
      return { kind: "snapshot", uuid: e.uuid, seq };
    case "GroupSnapshotDeleted":
      return { kind: "groupsnapshot", uuid: e.uuid, seq };
    case "ReservationUndone":
    case "ReservationCollected":
      return { kind: e.kind, uuid: e.uuid, seq } as RecordState;
    case "DeviceStateReported":
    case "ImageLeakCollected":
      return state;
    default: {
      const never: never = e;
      throw new Error(`evolve: unknown event ${(never as { type: string }).type}`);
    }
  }
}

/**
 * A foreign record on an aggregate's subject: only the aggregate's sequence moves (its fence). A
 * request name gets a state even if it had none (a name subject's sequence is the name's fence,
 * whether or not it points at anything); a volume, snapshot or group never seen stays unknown
 * (nothing is made up, and nothing appends to it on that fence: its first event expects 0 on a
 * fresh uuid).
 */
function skipped(state: Aggregate | undefined, address: Address | undefined, seq: number): Aggregate | undefined {
  if (!address) return state;
  if (address.kind === "name") {
    const uuid = state?.kind === "name" ? state.uuid : undefined;
    return { kind: "name", of: address.of, name: address.name, seq, ...(uuid ? { uuid } : {}) };
  }
  if (state?.kind !== address.kind) return state;
  return (state.record ? { ...state, seq, record: { ...state.record, seq } } : { ...state, seq }) as Aggregate;
}

function volumeReserved(e: Extract<JournalEvent, { type: "VolumeReserved" }>, seq: number): Aggregate {
  const { sizeBytes, parameters, capabilities, source } = e;
  const record = {
    ...reservedImage(e, seq),
    sizeBytes,
    parameters,
    capabilities,
    ...(source ? { source } : {}),
    claims: [],
    mutableParameters: e.mutableParameters ?? {},
  };
  return { kind: "volume", uuid: e.uuid, seq, record };
}

function snapshotReserved(e: Extract<JournalEvent, { type: "SnapshotReserved" }>, seq: number): Aggregate {
  const group = e.groupSnapshotUuid ? { groupSnapshotUuid: e.groupSnapshotUuid } : {};
  return { kind: "snapshot", uuid: e.uuid, seq, record: { ...reservedImage(e, seq), sizeBytes: 0, sourceUuid: e.sourceUuid, ...group } };
}

/** What a volume's or snapshot's reservation records: created at the reservation, no image id until its *Created. */
function reservedImage(e: Extract<JournalEvent, { type: "VolumeReserved" | "SnapshotReserved" }>, seq: number) {
  return { uuid: e.uuid, name: e.name, pool: e.pool, poolId: e.poolId, digest: e.digest, createdAt: e.time, seq, imageName: e.imageName, imageId: "" };
}

const byNode = (a: Claim, b: Claim) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0);

/**
 * A change of a live record of one kind: the fields `change` gives, over a copy of the record
 * (one copy per event). On an ended record only the sequence moves; on an aggregate never seen
 * (a log that starts mid-way) nothing is known, so nothing is made up.
 */
function onRecord<K extends Kind>(kind: K, state: Aggregate | undefined, seq: number, change: (r: Records[K]) => Partial<Records[K]>): Aggregate | undefined {
  if (state?.kind !== kind) return state;
  const s = state as RecordState<K> & { record?: Records[K] };
  return (s.record ? { kind, uuid: s.uuid, seq, record: { ...s.record, ...change(s.record), seq } } : { kind, uuid: s.uuid, seq }) as Aggregate;
}
const onVolume = (s: Aggregate | undefined, seq: number, f: (r: VolumeRecord) => Partial<VolumeRecord>) => onRecord("volume", s, seq, f);
const onSnapshot = (s: Aggregate | undefined, seq: number, f: (r: SnapshotRecord) => Partial<SnapshotRecord>) => onRecord("snapshot", s, seq, f);
const onGroup = (s: Aggregate | undefined, seq: number, f: (r: GroupRecord) => Partial<GroupRecord>) => onRecord("groupsnapshot", s, seq, f);

/** The states of many aggregates: the accumulator of a fold (entries are replaced, never changed). */
export type States = Map<string, Aggregate>;

/** Fold `events` into `states`, each into its own aggregate (a foreign record moves its subject's aggregate's sequence only). */
export function foldInto(states: States, events: Iterable<LogRecord>): States {
  for (const e of events) foldStep(states, e);
  return states;
}

/** One step of `foldInto`: `r` folded into its aggregate in `states`; the aggregate's key and its states before and after (none when `r` evolves no aggregate). */
export function foldStep(states: States, r: LogRecord): { key: string; before: Aggregate | undefined; after: Aggregate | undefined } | undefined {
  const a = addressOfRecord(r);
  if (!a) return undefined;
  const key = addressKey(a);
  const before = states.get(key);
  const after = evolve(before, r);
  if (after) states.set(key, after);
  return { key, before, after };
}

/** One aggregate's state after `events` (others' events skipped), starting from `from`. */
export function foldOne(address: Address, from: Aggregate | undefined, events: Iterable<LogRecord>): Aggregate | undefined {
  const key = addressKey(address);
  let s = from;
  for (const e of events) {
    const a = addressOfRecord(e);
    if (a && addressKey(a) === key) s = evolve(s, e);
  }
  return s;
}

/**
 * Aggregates as read, and every state each one went through as records were folded into it:
 * the one place a command's (or a replay batch's) records are evolved — once each. The trail
 * of an aggregate (its state before, then after each record that changed it) is what the
 * projection's writes are planned from (store/), and its last state what the reply shows.
 */
export class Fold {
  readonly #before = new Map<string, Aggregate | undefined>();
  readonly #trails = new Map<string, { address: Address; states: (Aggregate | undefined)[] }>();
  /** How many times evolve ran (a test counts it: once per record). */
  evolutions = 0;

  /**
   * Take `s` as the state of `a` (an address, or its `addressKey`) before any record of this fold:
   * ignored once `a` is known, unless `replace` (a better source, e.g. the log, before any record
   * of this fold touched it).
   */
  know(a: Address | string, s: Aggregate | undefined, replace = false): void {
    const key = typeof a === "string" ? a : addressKey(a);
    if (this.#trails.has(key) || (this.#before.has(key) && !replace)) return;
    this.#before.set(key, s);
  }

  has(a: Address): boolean {
    const key = addressKey(a);
    return this.#before.has(key) || this.#trails.has(key);
  }

  /** Whether a record of this fold changed `a`. */
  touched(a: Address): boolean {
    return this.#trails.has(addressKey(a));
  }

  state(a: Address): Aggregate | undefined {
    const key = addressKey(a);
    return this.#trails.get(key)?.states.at(-1) ?? this.#before.get(key);
  }

  /** Evolve each record into its aggregate (an aggregate not known starts from nothing). */
  apply(records: Iterable<LogRecord>): void {
    for (const r of records) {
      const a = addressOfRecord(r);
      if (!a) continue;
      const key = addressKey(a);
      const prev = this.state(a);
      const next = evolve(prev, r);
      this.evolutions++;
      if (next === prev) continue;
      const trail = this.#trails.get(key) ?? { address: a, states: [this.#before.get(key)] };
      trail.states.push(next);
      this.#trails.set(key, trail);
    }
  }

  /** Every aggregate that changed: its state before, then after each change (the last is now). */
  trails(): Trail[] {
    return [...this.#trails.values()];
  }
}

/** `records` folded (once each), every aggregate starting from `before` (by `addressKey`; undefined = none). */
export function foldFrom(records: LogRecord[], before: (key: string) => Aggregate | undefined): Fold {
  const fold = new Fold();
  for (const r of records) {
    const a = addressOfRecord(r);
    if (a && !fold.has(a)) fold.know(a, before(addressKey(a)));
  }
  fold.apply(records);
  return fold;
}

/** An aggregate's states through a fold: `states[0]` before it, the last one after it. */
export interface Trail {
  address: Address;
  states: (Aggregate | undefined)[];
}

/** The record of a record state, if it lives. */
export function liveRecord<K extends Kind>(s: Aggregate | undefined, kind: K): Records[K] | undefined {
  return s?.kind === kind ? ((s as { record?: Records[K] }).record ?? undefined) : undefined;
}

/** Whether a state is an aggregate that ended (deleted, undone, collected). */
export function isEnded(s: Aggregate | undefined): boolean {
  return !!s && s.kind !== "name" && !s.record;
}

/** Whether an event ends its aggregate (what is left is a tombstone). */
export function endsAggregate(e: StoredEvent): boolean {
  return isEnded(evolve(undefined, e));
}

/** reserved: its image is not made (a group: not every member recorded); ready: usable; deleted: ended. */
export function statusOf(s: RecordState): "reserved" | "ready" | "deleted" {
  const r = s.record;
  if (!r) return "deleted";
  if ("members" in r) return r.ready ? "ready" : "reserved";
  return r.imageId ? "ready" : "reserved";
}

/** Addresses of the aggregates `events` evolve whose state before them matters and is not `known`. */
export function beforesNeeded(events: LogRecord[], known: { has(key: string): boolean }): Address[] {
  const out: Address[] = [];
  const first = new Set<string>();
  for (const r of events) {
    const a = addressOfRecord(r);
    if (!a) continue;
    const key = addressKey(a);
    if (first.has(key)) continue;
    first.add(key);
    if (!known.has(key) && ("foreign" in r || !startsAfresh(r.event))) out.push(a);
  }
  return out;
}
