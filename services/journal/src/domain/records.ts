/**
 * The journal's records: what the projection holds for one volume, snapshot or group snapshot,
 * as evolve.ts folds them from events. Pure code: the Redis hash shape both ways (`toHash`
 * writes it, `*FromHash` reads it back, one the inverse of the other; kinds.ts has the key
 * layout, projection.ts the writes) and the views replies carry.
 */
import {
  type Capability,
  Claim,
  type ContentSource,
  type GroupMember,
  type GroupSnapshotView,
  MutableParameters,
  type SnapshotView,
  type VolumeView,
} from "@csi/contracts";

/** What every record has: a request name, a pool, a parameter digest, a creation time, a fence. */
interface RecordHead {
  uuid: string;
  name: string;
  pool: string;
  poolId: number;
  digest: string;
  createdAt: string;
  /** Sequence of the last event applied to this aggregate: the next append's fence. */
  seq: number;
}

/** A record that is an image in a pool. */
interface RecordBase extends RecordHead {
  imageName: string;
  /** Empty until the image exists (the *Created event). */
  imageId: string;
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
  groupSnapshotUuid?: string;
}

/** A group snapshot: its members' snapshots are records of their own. */
export interface GroupRecord extends RecordHead {
  members: GroupMember[];
  /** GroupSnapshotCreated applied: every member was cut and recorded. */
  ready: boolean;
}

/** A raw hash as HGETALL returns it. */
export type Hash = Record<string, string>;

/** A hash that exists but holds only `_seq` (and `_gone`) is a tombstone: the aggregate ended. */
export function isLive(h: Hash | undefined): h is Hash {
  return !!h && h._gone !== "1" && h["csi.volname"] !== undefined;
}

/** A live record whose image was made (its *Created event applied): a volume or snapshot one can use. */
export function isMade(h: Hash | undefined): h is Hash {
  return isLive(h) && !!h["csi.imageid"];
}

/**
 * Whether a record is in the pool a CSI id names (`undefined`: the id's pool is not checked). A
 * record in another pool is "not found": ids differing only in their pool part never alias it.
 */
export function inPool(h: Hash | undefined, poolId: number | undefined): boolean {
  return poolId === undefined || Number(h?.["csi.poolid"] ?? -1) === poolId;
}

export function aggregateSeq(h: Hash | undefined): number {
  return h?._seq ? Number(h._seq) : 0;
}

function headFromHash(uuid: string, h: Hash): RecordHead {
  return {
    uuid,
    name: h["csi.volname"] ?? "",
    pool: h["csi.pool"] ?? "",
    poolId: Number(h["csi.poolid"] ?? 0),
    digest: h["csi.digest"] ?? "",
    createdAt: h["csi.created"] ?? "",
    seq: aggregateSeq(h),
  };
}

function baseFromHash(uuid: string, h: Hash): RecordBase & { sizeBytes: number } {
  return { ...headFromHash(uuid, h), imageName: h["csi.imagename"] ?? "", imageId: h["csi.imageid"] ?? "", sizeBytes: Number(h["csi.size"] ?? 0) };
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
  return { ...baseFromHash(uuid, h), sourceUuid: h["csi.source"] ?? "", ...(h["csi.group"] ? { groupSnapshotUuid: h["csi.group"] } : {}) };
}

export function groupFromHash(uuid: string, h: Hash): GroupRecord {
  return { ...headFromHash(uuid, h), members: JSON.parse(h["csi.members"] ?? "[]"), ready: h["csi.ready"] === "1" };
}

type Fields = Record<string, string>;

function headHash(r: RecordHead): Fields {
  return { "csi.volname": r.name, "csi.pool": r.pool, "csi.poolid": String(r.poolId), "csi.digest": r.digest, "csi.created": r.createdAt };
}

function baseHash(r: RecordBase & { sizeBytes: number }): Fields {
  return { ...headHash(r), "csi.imagename": r.imageName, "csi.imageid": r.imageId, "csi.size": String(r.sizeBytes) };
}

/** The claim as its hash field holds it (fields in this order). */
const claimJson = (c: Claim) => JSON.stringify({ nodeId: c.nodeId, accessMode: c.accessMode, accessType: c.accessType, readOnly: c.readOnly });

export function volumeHash(r: VolumeRecord): Fields {
  const h: Fields = {
    ...baseHash(r),
    "csi.parameters": JSON.stringify(r.parameters),
    "csi.capabilities": JSON.stringify(r.capabilities),
  };
  if (r.source) h["csi.source"] = JSON.stringify(r.source);
  // No limits, no field (a volume without limits reads as one).
  if (Object.keys(r.mutableParameters).length > 0) h["csi.mutable"] = JSON.stringify(r.mutableParameters);
  for (const c of r.claims) h[`claim.${c.nodeId}`] = claimJson(c);
  return h;
}

export function snapshotHash(r: SnapshotRecord): Fields {
  return { ...baseHash(r), "csi.source": r.sourceUuid, ...(r.groupSnapshotUuid ? { "csi.group": r.groupSnapshotUuid } : {}) };
}

export function groupHash(r: GroupRecord): Fields {
  return { ...headHash(r), "csi.members": JSON.stringify(r.members), "csi.ready": r.ready ? "1" : "" };
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
    ...(r.groupSnapshotUuid ? { groupSnapshotUuid: r.groupSnapshotUuid } : {}),
  };
}

export type GroupSnapshotHead = Omit<GroupSnapshotView, "snapshots">;

/** The group without its members (their views come from their own records: `groupSnapshotView`). */
export function groupHead(r: GroupRecord): GroupSnapshotHead {
  return { uuid: r.uuid, name: r.name, pool: r.pool, poolId: r.poolId, createdAt: r.createdAt, readyToUse: r.ready };
}

/** A group and the records of its members, in the group's member order; ready when all are. */
export function groupSnapshotView(r: GroupRecord, members: SnapshotRecord[]): GroupSnapshotView {
  const snapshots = members.map(snapshotView);
  return { ...groupHead(r), readyToUse: r.ready && snapshots.length === r.members.length && snapshots.every((s) => s.readyToUse), snapshots };
}
