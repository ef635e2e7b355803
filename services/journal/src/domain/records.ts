/**
 * The journal's records: what the projection holds for one volume or snapshot, rebuilt from
 * events. Pure code: parsing the Redis hash shape (see kinds.ts for the key layout and
 * projection.ts for how events write it) and building the views replies carry.
 */
import { type Capability, Claim, type ContentSource, MutableParameters, type SnapshotView, type VolumeView } from "@csi/contracts";

interface RecordBase {
  uuid: string;
  name: string;
  pool: string;
  poolId: number;
  imageName: string;
  /** Empty until the image exists (the *Created event). */
  imageId: string;
  digest: string;
  createdAt: string;
  /** Sequence of the last event applied to this aggregate: the next append's fence. */
  seq: number;
}

export interface VolumeRecord extends RecordBase {
  sizeBytes: number;
  parameters: Record<string, string>;
  capabilities: Capability[];
  source?: ContentSource;
  claims: Claim[];
  /** The I/O limits in force (no zeros). */
  mutableParameters: MutableParameters;
}

export interface SnapshotRecord extends RecordBase {
  sourceUuid: string;
  sizeBytes: number;
}

/** A raw hash as HGETALL returns it. */
export type Hash = Record<string, string>;

/** A hash that exists but holds only `_seq` (and `_gone`) is a tombstone: the aggregate ended. */
export function isLive(h: Hash | undefined): h is Hash {
  return !!h && h._gone !== "1" && h["csi.volname"] !== undefined;
}

export function aggregateSeq(h: Hash | undefined): number {
  return h?._seq ? Number(h._seq) : 0;
}

function baseFromHash(uuid: string, h: Hash): RecordBase & { sizeBytes: number } {
  return {
    uuid,
    name: h["csi.volname"] ?? "",
    pool: h["csi.pool"] ?? "",
    poolId: Number(h["csi.poolid"] ?? 0),
    imageName: h["csi.imagename"] ?? "",
    imageId: h["csi.imageid"] ?? "",
    digest: h["csi.digest"] ?? "",
    createdAt: h["csi.created"] ?? "",
    seq: aggregateSeq(h),
    sizeBytes: Number(h["csi.size"] ?? 0),
  };
}

export function volumeFromHash(uuid: string, h: Hash): VolumeRecord {
  return {
    ...baseFromHash(uuid, h),
    parameters: JSON.parse(h["csi.parameters"] ?? "{}"),
    capabilities: JSON.parse(h["csi.capabilities"] ?? "[]"),
    ...(h["csi.source"] ? { source: JSON.parse(h["csi.source"]) as ContentSource } : {}),
    claims: claimsOf(h),
    mutableParameters: MutableParameters.parse(JSON.parse(h["csi.mutable"] ?? "{}")),
  };
}

/** Claims are fields `claim.<nodeId>` of the volume hash. */
function claimsOf(h: Hash): Claim[] {
  return Object.entries(h)
    .filter(([k]) => k.startsWith("claim."))
    .map(([, v]) => Claim.parse(JSON.parse(v)))
    .sort((a, b) => (a.nodeId < b.nodeId ? -1 : 1));
}

export function snapshotFromHash(uuid: string, h: Hash): SnapshotRecord {
  return { ...baseFromHash(uuid, h), sourceUuid: h["csi.source"] ?? "" };
}

export function volumeView(r: VolumeRecord): VolumeView {
  return {
    uuid: r.uuid,
    name: r.name,
    pool: r.pool,
    poolId: r.poolId,
    imageName: r.imageName,
    imageId: r.imageId,
    sizeBytes: r.sizeBytes,
    parameters: r.parameters,
    capabilities: r.capabilities,
    ...(r.source ? { source: r.source } : {}),
    createdAt: r.createdAt,
    claims: r.claims,
    mutableParameters: r.mutableParameters,
  };
}

export function snapshotView(r: SnapshotRecord): SnapshotView {
  return {
    uuid: r.uuid,
    name: r.name,
    sourceUuid: r.sourceUuid,
    pool: r.pool,
    poolId: r.poolId,
    imageName: r.imageName,
    imageId: r.imageId,
    sizeBytes: r.sizeBytes,
    createdAt: r.createdAt,
    readyToUse: r.imageId !== "",
  };
}
