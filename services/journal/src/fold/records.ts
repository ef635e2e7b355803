/**
 * The journal's records: what the projection holds for one volume, snapshot or group snapshot,
 * as evolve.ts folds them from events, and the views replies carry. Pure code. How Redis holds
 * them is projection/redis/hash.ts's concern.
 */
import type { Capability, Claim, ContentSource, GroupMember, GroupSnapshotView, MutableParameters, SnapshotView, VolumeView } from "@csi/contracts";

/** What every record has: a request name, a pool, a parameter digest, a creation time, a fence. */
export interface RecordHead {
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
export interface RecordBase extends RecordHead {
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
