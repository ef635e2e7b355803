/**
 * Pure translation between CSI messages (proto-loader objects: keepCase, longs as strings,
 * oneofs named) and the journal's contract, with the CSI argument checks. No I/O.
 */
import {
  composeVolumeId,
  DriverError,
  decomposeVolumeId,
  GiB,
  inForce,
  invalidArgument,
  isUuid,
  type MutableParameters,
  parseMutableParameters,
  pickMutableParameters,
  type ResolvedCluster,
  roundUpToMiB,
  type SnapshotView,
  type VolumeIdParts,
  type VolumeView,
} from "@csi/contracts";
import type { CapacityRangeMsg, SnapshotMsg, VolumeMsg } from "@csi/runtime";
import { accessibleTopology } from "./topology.js";

export const DEFAULT_VOLUME_BYTES = GiB;

const toBytes = (v: unknown, field: string): number => {
  const n = Number(v ?? 0);
  if (!Number.isSafeInteger(n) || n < 0) throw invalidArgument(`${field} must be a non-negative byte count`);
  return n;
};

/** CapacityRange → (size to ask for, limit). No range → the default size. */
export function capacityOf(range: CapacityRangeMsg | null | undefined, defaultBytes = DEFAULT_VOLUME_BYTES): { sizeBytes: number; limitBytes: number } {
  const req = toBytes(range?.required_bytes, "capacity_range.required_bytes");
  const limit = toBytes(range?.limit_bytes, "capacity_range.limit_bytes");
  if (limit > 0 && req > limit) throw new DriverError("OutOfRange", `required_bytes ${req} exceeds limit_bytes ${limit}`);
  const size = req > 0 ? req : limit > 0 ? Math.min(defaultBytes, limit) : defaultBytes;
  const rounded = roundUpToMiB(size);
  if (limit > 0 && rounded > limit)
    throw new DriverError("OutOfRange", `the smallest size this driver makes, ${rounded} bytes (whole MiB), exceeds limit_bytes ${limit}`);
  return { sizeBytes: rounded, limitBytes: limit };
}

/** Decode an id a CO gave us; `undefined` when it is malformed (each RPC decides what that means). */
export function tryDecode(id: string): VolumeIdParts | undefined {
  try {
    return decomposeVolumeId(id);
  } catch {
    return undefined;
  }
}

export const volumeIdOf = (clusterID: string, v: { poolId: number; uuid: string }) => composeVolumeId({ clusterID, poolID: v.poolId, uuid: v.uuid });

export function timestamp(iso: string): { seconds: string; nanos: number } {
  const ms = Date.parse(iso);
  return { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 };
}

const RESERVED_PARAMS = new Set(["clusterID", "pool"]);
export function splitParameters(params: Record<string, string> | undefined): { clusterID?: string; pool?: string; rest: Record<string, string> } {
  const p = params ?? {};
  const rest = Object.fromEntries(Object.entries(p).filter(([k]) => !RESERVED_PARAMS.has(k) && !k.startsWith("csi.storage.k8s.io/")));
  return { ...(p.clusterID ? { clusterID: p.clusterID } : {}), ...(p.pool ? { pool: p.pool } : {}), rest };
}

/**
 * CreateVolume's I/O limits: our keys found in `parameters` (StorageClass defaults) overlaid by
 * `mutable_parameters` (which take precedence, as CSI says); both validated the same way. The
 * limit keys are taken out of the parameters kept with the volume.
 */
export function createLimits(
  rest: Record<string, string>,
  mutable: Record<string, string>,
): { parameters: Record<string, string>; mutableParameters: MutableParameters } {
  const { picked, rest: parameters } = pickMutableParameters(rest);
  const fromParameters = parseMutableParameters(picked, "parameters");
  return { parameters, mutableParameters: inForce({ ...fromParameters, ...parseMutableParameters(mutable) }) };
}

/** The volume context shows the parameters and the I/O limits in force (so ControllerGetVolume/ListVolumes show current values). */
export function csiVolume(cluster: ResolvedCluster, v: VolumeView): VolumeMsg {
  const clusterID = cluster.clusterID;
  // A source is in the volume's pool (clones never cross pools), so its id shares the pool id.
  const sourceId = v.source && composeVolumeId({ clusterID, poolID: v.poolId, uuid: v.source.uuid });
  const content_source = !v.source ? null : v.source.kind === "snapshot" ? { snapshot: { snapshot_id: sourceId } } : { volume: { volume_id: sourceId } };
  return {
    volume_id: volumeIdOf(clusterID, v),
    capacity_bytes: String(v.sizeBytes),
    volume_context: { ...v.parameters, ...v.mutableParameters, clusterID, pool: v.pool, imageName: v.imageName },
    content_source,
    accessible_topology: accessibleTopology(cluster.pools.find((p) => p.name === v.pool)),
  };
}

export function csiSnapshot(clusterID: string, s: SnapshotView): SnapshotMsg {
  return {
    snapshot_id: composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.uuid }),
    source_volume_id: composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.sourceUuid }),
    size_bytes: String(s.sizeBytes),
    creation_time: timestamp(s.createdAt),
    ready_to_use: s.readyToUse,
    // A member of a group snapshot names it (the group is in its members' pool, so it shares their pool id).
    group_snapshot_id: s.groupSnapshotUuid ? composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.groupSnapshotUuid }) : "",
  };
}

/** Paging over several clusters: `<clusterID>/<journal token>` (empty token = the cluster's start). */
export function parsePageToken(token: string, clusters: string[]): { cluster: string; inner?: string } {
  if (!token) return { cluster: clusters[0] ?? "" };
  const slash = token.indexOf("/");
  const cluster = token.slice(0, slash);
  const inner = token.slice(slash + 1);
  if (slash < 0 || !clusters.includes(cluster) || (inner !== "" && !isUuid(inner))) {
    throw new DriverError("Aborted", `invalid starting_token ${JSON.stringify(token)}`);
  }
  return inner ? { cluster, inner } : { cluster };
}

export function maxEntriesOf(v: unknown): number {
  const n = Number(v ?? 0);
  if (!Number.isInteger(n) || n < 0) throw invalidArgument("max_entries must not be negative");
  return n;
}
