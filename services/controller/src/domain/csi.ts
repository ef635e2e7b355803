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
  MAX_PAGE_ENTRIES,
  MiB,
  type MutableParameters,
  parseMutableParameters,
  pickMutableParameters,
  quote,
  type ResolvedCluster,
  roundUpToMiB,
  type SnapshotView,
  type VolumeIdParts,
  type VolumeView,
} from "@csi/contracts";
import type { CapacityRangeMsg, SnapshotMsg, VolumeMsg } from "@csi/runtime";
import { accessibleTopology } from "./topology.js";

export const DEFAULT_VOLUME_BYTES = GiB;
/** The most bytes any volume may have: what a JS number holds exactly, in whole MiB (each pool's own maximum is the journal's check). */
export const MAX_VOLUME_BYTES = Math.floor(Number.MAX_SAFE_INTEGER / MiB) * MiB;

/**
 * A CSI byte count (int64, a decimal string from proto-loader). Negative → INVALID_ARGUMENT.
 * A required size past MAX_VOLUME_BYTES is OUT_OF_RANGE (no volume can be that big); a limit
 * past it limits nothing and reads as MAX_VOLUME_BYTES.
 */
function toBytes(v: unknown, field: string, kind: "required" | "limit"): number {
  const s = String(v ?? "0");
  if (!/^-?[0-9]{1,40}$/.test(s)) throw invalidArgument(`${field} must be a byte count, got ${quote(s)}`);
  if (s.startsWith("-") && /[1-9]/.test(s)) throw invalidArgument(`${field} must not be negative`);
  const n = Number(s.replace(/^-/, ""));
  if (n <= MAX_VOLUME_BYTES) return n;
  if (kind === "limit") return MAX_VOLUME_BYTES;
  throw new DriverError("OutOfRange", `${field} ${s} is more than a volume can have (${MAX_VOLUME_BYTES} bytes)`);
}

function rangeOf(range: CapacityRangeMsg | null | undefined): { req: number; limit: number } {
  const req = toBytes(range?.required_bytes, "capacity_range.required_bytes", "required");
  const limit = toBytes(range?.limit_bytes, "capacity_range.limit_bytes", "limit");
  if (limit > 0 && req > limit) throw new DriverError("OutOfRange", `required_bytes ${req} exceeds limit_bytes ${limit}`);
  return { req, limit };
}

/** The size a range asks for, in whole MiB, if it fits under its limit. */
function roundedWithin(size: number, limit: number): number {
  const rounded = roundUpToMiB(size);
  if (limit > 0 && rounded > limit)
    throw new DriverError("OutOfRange", `the smallest size this driver makes, ${rounded} bytes (whole MiB), exceeds limit_bytes ${limit}`);
  return rounded;
}

/** CapacityRange → (size to ask for, limit). No range → the default size. */
export function capacityOf(range: CapacityRangeMsg | null | undefined, defaultBytes = DEFAULT_VOLUME_BYTES): { sizeBytes: number; limitBytes: number } {
  const { req, limit } = rangeOf(range);
  const size = req > 0 ? req : limit > 0 ? Math.min(defaultBytes, limit) : defaultBytes;
  return { sizeBytes: roundedWithin(size, limit), limitBytes: limit };
}

/**
 * ControllerExpandVolume's CapacityRange → (size to grow to, 0 = none asked; limit). The range
 * is REQUIRED and CSI says at least one of its fields MUST be set: an empty one is
 * INVALID_ARGUMENT. Create's default size never applies: with only a limit nothing grows (the
 * current size answers if it is within the limit).
 */
export function expansionOf(range: CapacityRangeMsg | null | undefined): { sizeBytes: number; limitBytes: number } {
  if (!range) throw invalidArgument("capacity_range is required");
  const { req, limit } = rangeOf(range);
  if (req === 0 && limit === 0) throw invalidArgument("capacity_range must set required_bytes or limit_bytes");
  return { sizeBytes: req > 0 ? roundedWithin(req, limit) : 0, limitBytes: limit };
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

/** max_entries: negative is INVALID_ARGUMENT; past our page cap it is clamped (CSI lets a plugin return fewer, with a next_token). */
export function maxEntriesOf(v: unknown): number {
  const n = Number(v ?? 0);
  if (!Number.isInteger(n) || n < 0) throw invalidArgument("max_entries must not be negative");
  return Math.min(n, MAX_PAGE_ENTRIES);
}

/**
 * The most bytes the entries of one List reply may have (measured as JSON, which is no smaller
 * than their protobuf encoding): well under the 4 MiB a gRPC client (grpc-go, so every CO)
 * receives by default. An unpaged list longer than that is answered in pages (next_token).
 */
export const LIST_REPLY_MAX_BYTES = 2 * MiB;
