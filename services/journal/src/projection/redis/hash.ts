/**
 * How Redis holds a record (projection/redis/layout.ts has the keys): the hash fields of a volume, snapshot
 * or group snapshot both ways — `toHash` writes them, `fromHash` reads them back, one the inverse
 * of the other — and a request name's directory entry. Only store/ sees a Hash; everything above
 * it gets domain states (fold/evolve.ts: RecordState, NameState).
 */
import { Claim, type ContentSource, type Kind, MutableParameters } from "@csi/contracts";
import type { NameState, RecordState } from "../../fold/evolve.js";
import type { GroupRecord, RecordBase, RecordHead, SnapshotRecord, VolumeRecord } from "../../fold/records.js";

/** A raw hash as HGETALL returns it. */
export type Hash = Record<string, string>;

/** A hash that exists but holds only `_seq` (and `_gone`) is a tombstone: the aggregate ended. */
export function isLive(h: Hash | undefined): h is Hash {
  return !!h && h._gone !== "1" && h["csi.volname"] !== undefined;
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

const CODEC = {
  volume: { fromHash: volumeFromHash, toHash: volumeHash },
  snapshot: { fromHash: snapshotFromHash, toHash: snapshotHash },
  groupsnapshot: { fromHash: groupFromHash, toHash: groupHash },
};

/** The record hash of a live record state (without the guard's `_seq`). */
export function recordHash(s: RecordState): Hash | undefined {
  if (!s.record) return undefined;
  // The KINDS row of s.kind takes s.record's type.
  const hash = (CODEC[s.kind].toHash as (r: typeof s.record) => Hash)(s.record); // a new object: completed in place
  hash._gone = "0";
  return hash;
}

/** A record state as read back from its Redis hash: live, a tombstone, or unknown. */
export function stateFromHash<K extends Kind>(kind: K, uuid: string, h: Hash | undefined): RecordState<K> | undefined {
  if (!h) return undefined;
  const seq = aggregateSeq(h);
  if (!isLive(h)) return { kind, uuid, seq } as RecordState<K>; // a tombstone (or a stray partial hash: nothing to read)
  return { kind, uuid, seq, record: CODEC[kind].fromHash(uuid, h) } as RecordState<K>;
}

/** A request name as read back from its directory entry and its sequence field. */
export function nameFromRedis(of: Kind, name: string, uuid: string | undefined, seq: number): NameState | undefined {
  if (!uuid && !seq) return undefined;
  return { kind: "name", of, name, seq, ...(uuid ? { uuid } : {}) };
}
