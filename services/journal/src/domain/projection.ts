/**
 * Event → record, and event → projection mutation. Pure.
 *
 * `recordChange` says what one event does to its aggregate's record (the omap hash). It is the
 * one fold of the journal: the Redis projection applies it (as a guarded list of Redis commands,
 * `mutationsFor`) and the journal's replies apply it in memory (`foldRecord`) to the record they
 * read under the lock — so a reply and a later read show the same fields.
 *
 * The Lua applier runs a mutation only if its event's sequence is newer than the one the
 * aggregate last applied (its guard), so applying is idempotent and order-safe per aggregate:
 * the writer's inline apply, the catch-up replay and a full rebuild can all run at once.
 */
import type { JournalEvent, Kind, StoredEvent } from "@csi/contracts";
import { type Keys, KINDS } from "./kinds.js";
import { aggregateSeq, type Hash } from "./records.js";

export type RedisOp = [string, ...(string | number)[]];

export interface Mutation {
  /** Hash and field that hold the aggregate's applied sequence. */
  guard: [string, string];
  seq: number;
  ops: RedisOp[];
}

/** How long a deleted aggregate's tombstone (its last seq) is kept, so old replays cannot resurrect it. */
export const TOMBSTONE_TTL_MS = 24 * 3600 * 1000;

type Fields = Record<string, string | number>;

/** What one event does to its aggregate's record: a new record, fields set or removed, or the end. */
export interface RecordChange {
  kind: Kind;
  uuid: string;
  /** A new record (over the tombstone of an earlier one, if any), indexed under its kind. */
  fresh?: boolean;
  set?: Fields;
  unset?: string[];
  /** The aggregate ended: only a tombstone is left. */
  end?: boolean;
}

type Reserved = Extract<JournalEvent, { type: "VolumeReserved" | "SnapshotReserved" }>;

/** What every reservation records; the image id stays empty until the *Created event. */
function reservedFields(e: Reserved): Fields {
  return {
    "csi.volname": e.name,
    "csi.imagename": e.imageName,
    "csi.imageid": "",
    "csi.pool": e.pool,
    "csi.poolid": e.poolId,
    "csi.digest": e.digest,
    "csi.created": e.time,
  };
}

export function recordChange(e: JournalEvent): RecordChange | undefined {
  switch (e.type) {
    case "VolumeReserved":
      return {
        kind: "volume",
        uuid: e.uuid,
        fresh: true,
        set: {
          ...reservedFields(e),
          "csi.size": e.sizeBytes,
          "csi.parameters": JSON.stringify(e.parameters),
          "csi.capabilities": JSON.stringify(e.capabilities),
          ...(e.source ? { "csi.source": JSON.stringify(e.source) } : {}),
          ...(e.mutableParameters ? { "csi.mutable": JSON.stringify(e.mutableParameters) } : {}),
        },
      };
    case "VolumeCreated":
      return { kind: "volume", uuid: e.uuid, set: { "csi.imageid": e.imageId, "csi.size": e.sizeBytes } };
    case "VolumeExpanded":
      return { kind: "volume", uuid: e.uuid, set: { "csi.size": e.sizeBytes } };
    case "VolumeModified":
      return { kind: "volume", uuid: e.uuid, set: { "csi.mutable": JSON.stringify(e.mutableParameters) } };
    case "VolumeClaimed": {
      const claim = { nodeId: e.nodeId, accessMode: e.accessMode, accessType: e.accessType, readOnly: e.readOnly };
      return { kind: "volume", uuid: e.uuid, set: { [`claim.${e.nodeId}`]: JSON.stringify(claim) } };
    }
    case "VolumeUnclaimed":
      return { kind: "volume", uuid: e.uuid, unset: [`claim.${e.nodeId}`] };
    case "SnapshotReserved":
      return {
        kind: "snapshot",
        uuid: e.uuid,
        fresh: true,
        set: { ...reservedFields(e), "csi.size": 0, "csi.source": e.sourceUuid, ...(e.groupSnapshotUuid ? { "csi.group": e.groupSnapshotUuid } : {}) },
      };
    case "SnapshotCreated":
      // A snapshot's creation time is when it was cut.
      return { kind: "snapshot", uuid: e.uuid, set: { "csi.imageid": e.imageId, "csi.size": e.sizeBytes, "csi.created": e.time } };
    case "GroupSnapshotReserved":
      return {
        kind: "groupsnapshot",
        uuid: e.uuid,
        fresh: true,
        set: {
          "csi.volname": e.name,
          "csi.pool": e.pool,
          "csi.poolid": e.poolId,
          "csi.digest": e.digest,
          "csi.created": e.time,
          "csi.members": JSON.stringify(e.members),
          "csi.ready": "",
        },
      };
    case "GroupSnapshotCreated":
      // A group's creation time is when its members were recorded (their SnapshotCreated share it).
      return { kind: "groupsnapshot", uuid: e.uuid, set: { "csi.ready": "1", "csi.created": e.time } };
    case "GroupSnapshotDeleted":
      return { kind: "groupsnapshot", uuid: e.uuid, end: true };
    case "VolumeDeleted":
      return { kind: "volume", uuid: e.uuid, end: true };
    case "SnapshotDeleted":
      return { kind: "snapshot", uuid: e.uuid, end: true };
    case "ReservationUndone":
      return { kind: e.kind, uuid: e.uuid, end: true };
    case "NameReserved":
    case "NameReleased":
    case "DeviceStateReported": // history only: device states live in the log, not in the omaps
      return undefined;
    default: {
      const never: never = e;
      throw new Error(`no record change for ${(never as { type: string }).type}`);
    }
  }
}

/**
 * The record of aggregate `kind`/`uuid` after `events` (others' events are skipped), starting from
 * `h` as read from the projection: what the projection will hold once it has applied them.
 */
export function foldRecord(kind: Kind, uuid: string, h: Hash | undefined, events: StoredEvent[]): Hash | undefined {
  let cur = h;
  for (const { seq, event } of events) {
    const c = recordChange(event);
    if (!c || c.kind !== kind || c.uuid !== uuid || seq <= aggregateSeq(cur)) continue;
    if (c.end) {
      cur = { _seq: String(seq), _gone: "1" };
      continue;
    }
    const next: Hash = { ...cur };
    for (const f of c.unset ?? []) delete next[f];
    for (const [f, v] of Object.entries(c.set ?? {})) next[f] = String(v);
    if (c.fresh) next._gone = "0";
    next._seq = String(seq);
    cur = next;
  }
  return cur;
}

/** The projection mutations of a batch of events (events that project nothing are skipped). */
export function mutationsFor(k: Keys, events: StoredEvent[]): Mutation[] {
  return events.flatMap((e) => mutationFor(k, e) ?? []);
}

function mutationFor(k: Keys, { seq, event: e }: StoredEvent): Mutation | undefined {
  if (e.type === "NameReserved" || e.type === "NameReleased") {
    const field = k.dirField(e.kind, e.name);
    return {
      guard: [k.dirSeq(e.kind), e.name],
      seq,
      // A release only removes the entry if it still points at the released uuid.
      ops: [e.type === "NameReserved" ? ["HSET", k.dir(e.kind), field, e.uuid] : ["HDELIFEQ", k.dir(e.kind), field, e.uuid]],
    };
  }
  const c = recordChange(e);
  if (!c) return undefined;
  const key = k.record(c.kind, c.uuid);
  const ops: RedisOp[] = [];
  if (c.end) {
    // SNAPINDEXREM reads the record's source before DEL: it takes the uuid out of its source's index.
    if (KINDS[c.kind].indexedBySource) ops.push(["SNAPINDEXREM", k.prefix, key, c.uuid]);
    ops.push(["DEL", key], ["ZREM", k.index(c.kind), c.uuid], ["HSET", key, "_gone", "1"], ["PEXPIRE", key, TOMBSTONE_TTL_MS]);
  } else {
    if (c.fresh) ops.push(["PERSIST", key]);
    if (c.unset?.length) ops.push(["HDEL", key, ...c.unset]);
    const set = Object.entries({ ...c.set, ...(c.fresh ? { _gone: "0" } : {}) }).flat();
    if (set.length) ops.push(["HSET", key, ...set]);
    if (c.fresh) ops.push(["ZADD", k.index(c.kind), 0, c.uuid]);
  }
  ops.push(...sideOps(k, e));
  return { guard: [key, "_seq"], seq, ops };
}

/** Indexes beside the record: snapshots by source volume, claims by node. */
function sideOps(k: Keys, e: JournalEvent): RedisOp[] {
  switch (e.type) {
    case "SnapshotReserved":
      return [["ZADD", k.snapsOf(e.sourceUuid), 0, e.uuid]];
    case "VolumeClaimed":
      return [["SADD", k.nodeClaims(e.nodeId), e.uuid]];
    case "VolumeUnclaimed":
      return [["SREM", k.nodeClaims(e.nodeId), e.uuid]];
    default:
      return [];
  }
}
