/**
 * Event → projection mutation. Pure: a stored event in, a guarded list of Redis commands out.
 * The Lua applier runs the commands only if the event's sequence is newer than the one the
 * aggregate last applied (its guard), so applying is idempotent and order-safe per aggregate:
 * the writer's inline apply, the catch-up replay and a full rebuild can all run at once.
 */
import type { StoredEvent } from "@csi/contracts";
import type { Keys } from "./records.js";

export type RedisOp = [string, ...(string | number)[]];

export interface Mutation {
  /** Hash and field that hold the aggregate's applied sequence. */
  guard: [string, string];
  seq: number;
  ops: RedisOp[];
}

/** How long a deleted aggregate's tombstone (its last seq) is kept, so old replays cannot resurrect it. */
export const TOMBSTONE_TTL_MS = 24 * 3600 * 1000;

/** The projection mutations of a batch of events (events that project nothing are skipped). */
export function mutationsFor(k: Keys, events: StoredEvent[]): Mutation[] {
  return events.flatMap((e) => mutationFor(k, e) ?? []);
}

export function mutationFor(k: Keys, stored: StoredEvent): Mutation | undefined {
  const { seq, event: e } = stored;
  switch (e.type) {
    case "NameReserved":
      return {
        guard: [k.dirSeq(e.kind), e.name],
        seq,
        ops: [["HSET", k.dir(e.kind), k.dirField(e.kind, e.name), e.uuid]],
      };
    case "NameReleased":
      return {
        guard: [k.dirSeq(e.kind), e.name],
        seq,
        // Only remove the entry if it still points at the released uuid.
        ops: [["HDELIFEQ", k.dir(e.kind), k.dirField(e.kind, e.name), e.uuid]],
      };
    case "VolumeReserved": {
      const key = k.record("volume", e.uuid);
      const fields: (string | number)[] = [
        "csi.volname", e.name, "csi.imagename", e.imageName, "csi.imageid", "", "csi.pool", e.pool,
        "csi.poolid", e.poolId, "csi.size", e.sizeBytes, "csi.digest", e.digest,
        "csi.parameters", JSON.stringify(e.parameters), "csi.capabilities", JSON.stringify(e.capabilities),
        "csi.created", e.time, "_gone", "0",
      ];
      if (e.source) fields.push("csi.source", JSON.stringify(e.source));
      if (e.mutableParameters) fields.push("csi.mutable", JSON.stringify(e.mutableParameters));
      return { guard: [key, "_seq"], seq, ops: [["PERSIST", key], ["HSET", key, ...fields], ["ZADD", k.index("volume"), 0, e.uuid]] };
    }
    case "VolumeCreated": {
      const key = k.record("volume", e.uuid);
      return { guard: [key, "_seq"], seq, ops: [["HSET", key, "csi.imageid", e.imageId, "csi.size", e.sizeBytes]] };
    }
    case "VolumeExpanded": {
      const key = k.record("volume", e.uuid);
      return { guard: [key, "_seq"], seq, ops: [["HSET", key, "csi.size", e.sizeBytes]] };
    }
    case "VolumeModified": {
      const key = k.record("volume", e.uuid);
      return { guard: [key, "_seq"], seq, ops: [["HSET", key, "csi.mutable", JSON.stringify(e.mutableParameters)]] };
    }
    case "VolumeClaimed": {
      const key = k.record("volume", e.uuid);
      const claim = { nodeId: e.nodeId, accessMode: e.accessMode, accessType: e.accessType, readOnly: e.readOnly };
      return { guard: [key, "_seq"], seq, ops: [["HSET", key, `claim.${e.nodeId}`, JSON.stringify(claim)], ["SADD", k.nodeClaims(e.nodeId), e.uuid]] };
    }
    case "VolumeUnclaimed": {
      const key = k.record("volume", e.uuid);
      return { guard: [key, "_seq"], seq, ops: [["HDEL", key, `claim.${e.nodeId}`], ["SREM", k.nodeClaims(e.nodeId), e.uuid]] };
    }
    case "SnapshotReserved": {
      const key = k.record("snapshot", e.uuid);
      return {
        guard: [key, "_seq"],
        seq,
        ops: [
          ["PERSIST", key],
          ["HSET", key, "csi.volname", e.name, "csi.imagename", e.imageName, "csi.imageid", "", "csi.source", e.sourceUuid,
            "csi.pool", e.pool, "csi.poolid", e.poolId, "csi.size", 0, "csi.digest", e.digest, "csi.created", e.time, "_gone", "0"],
          ["ZADD", k.index("snapshot"), 0, e.uuid],
          ["ZADD", k.snapsOf(e.sourceUuid), 0, e.uuid],
        ],
      };
    }
    case "SnapshotCreated": {
      const key = k.record("snapshot", e.uuid);
      return { guard: [key, "_seq"], seq, ops: [["HSET", key, "csi.imageid", e.imageId, "csi.size", e.sizeBytes, "csi.created", e.time]] };
    }
    case "DeviceStateReported":
      return undefined; // history only: device states live in the log, not in the omaps
    case "VolumeDeleted":
      return ended(k, "volume", e.uuid, seq);
    case "SnapshotDeleted":
      return ended(k, "snapshot", e.uuid, seq);
    case "ReservationUndone":
      return ended(k, e.kind, e.uuid, seq);
    default: {
      const never: never = e;
      throw new Error(`no projection for ${(never as { type: string }).type}`);
    }
  }
}

function ended(k: Keys, kind: "volume" | "snapshot", uuid: string, seq: number): Mutation {
  const key = k.record(kind, uuid);
  const ops: RedisOp[] = [
    ["SNAPINDEXREM", k.prefix, key, uuid], // removes the uuid from its source's snapshot index (snapshots only)
    ["DEL", key],
    ["ZREM", k.index(kind), uuid],
    ["HSET", key, "_gone", "1"],
    ["PEXPIRE", key, TOMBSTONE_TTL_MS],
  ];
  if (kind === "volume") ops.shift();
  return { guard: [key, "_seq"], seq, ops };
}
