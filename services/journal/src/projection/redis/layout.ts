/**
 * The Redis layout of one cluster's projection — the one place that knows it (ceph-csi's omaps,
 * as internal/journal/voljournal.go explains them at its top). One Redis hash tag per cluster,
 * so every function call touches one slot:
 *
 *   {c}:csi.volumes.<instance>      hash  csi.volume.<name> → uuid     (the name directory)
 *   {c}:csi.volumes.<instance>.seq  hash  <name> → last seq of the name's subject (fence)
 *   {c}:csi.snaps.<instance>        hash  csi.snap.<name> → uuid
 *   {c}:csi.snaps.<instance>.seq    hash  <name> → seq
 *   {c}:csi.volume.<uuid>           hash  csi.volname, csi.imagename, csi.imageid, csi.size, ...,
 *                                         csi.mutable (I/O limits in force, JSON; absent = none),
 *                                         _seq (last applied seq of the volume's subject)
 *   {c}:csi.snap.<uuid>             hash  the same fields; csi.source = the source volume's uuid,
 *                                         csi.group = its group snapshot's uuid (members only)
 *   {c}:csi.groups.<instance>[.seq] the same for group snapshots (csi.group.<name>)
 *   {c}:csi.group.<uuid>            hash  csi.volname, csi.pool, csi.poolid, csi.digest, csi.created,
 *                                         csi.members (JSON [{volumeUuid, snapshotUuid}]), csi.ready
 *   {c}:csi.index.volume/.snap/.group zset uuids (lexicographic paging)
 *   {c}:csi.index.snap.src.<uuid>   zset  snapshot uuids of one source volume
 *   {c}:csi.node.<nodeId>           set   volume uuids the node holds claims on
 *   {c}:projection                  hash  applied → stream seq up to which the log was replayed
 *   {c}:lock.name.<kind>.<name>     string lock token of a request name (SET NX PX)
 *   {c}:lock.<kind>.<uuid>          string lock token of an aggregate
 *
 * Why a create or delete can be repeated safely: every write is the projection of an event
 * (projection/redis/writes.ts), guarded by the aggregate's applied sequence (`_seq`, or the name's field in
 * `.seq`): a write older than what the key holds does nothing, so a command's own apply, a
 * catch-up and a rebuild agree in any interleaving. The hash fields: projection/redis/hash.ts.
 */
import type { Kind } from "@csi/contracts";
import type { Difference, ProjectionIndex } from "../port.js";

/** ceph-csi's omap words: the directory `csi.<dir>.<instance>`, the record `csi.<word>.<uuid>`. */
const WORDS: Record<Kind, { dir: string; word: string }> = {
  volume: { dir: "volumes", word: "volume" },
  snapshot: { dir: "snaps", word: "snap" },
  groupsnapshot: { dir: "groups", word: "group" },
};

const KIND_LIST = Object.keys(WORDS) as Kind[];

export interface Keys {
  prefix: string;
  dir(kind: Kind): string;
  dirSeq(kind: Kind): string;
  dirField(kind: Kind, name: string): string;
  record(kind: Kind, uuid: string): string;
  index(kind: Kind): string;
  snapsOf(sourceUuid: string): string;
  /** Set of volume uuids a node holds claims on. */
  nodeClaims(nodeId: string): string;
  projection: string;
  /** Sorted set of every projection key the journal's functions wrote (score 0, or a tombstone's expiry): lists the projection without SCAN. */
  keyIndex: string;
  nameLock(kind: Kind, name: string): string;
  uuidLock(kind: Kind, uuid: string): string;
  lock(what: string): string;
}

export function keysFor(cluster: string, instance: string): Keys {
  const prefix = `{${cluster}}:`;
  const lock = (what: string) => `${prefix}lock.${what}`;
  return {
    prefix,
    dir: (k) => `${prefix}csi.${WORDS[k].dir}.${instance}`,
    dirSeq: (k) => `${prefix}csi.${WORDS[k].dir}.${instance}.seq`,
    dirField: (k, name) => `csi.${WORDS[k].word}.${name}`,
    record: (k, uuid) => `${prefix}csi.${WORDS[k].word}.${uuid}`,
    index: (k) => `${prefix}csi.index.${WORDS[k].word}`,
    snapsOf: (src) => `${prefix}csi.index.snap.src.${src}`,
    nodeClaims: (nodeId) => `${prefix}csi.node.${nodeId}`,
    projection: `${prefix}projection`,
    keyIndex: `${prefix}projection.keys`,
    nameLock: (k, name) => lock(`name.${k}.${name}`),
    uuidLock: (k, uuid) => lock(`${k}.${uuid}`),
    lock,
  };
}

/** The key of one of the projection's indexes (port.ts ProjectionIndex). */
export function indexKey(k: Keys, i: ProjectionIndex): string {
  return "kind" in i ? k.index(i.kind) : "snapshotsOf" in i ? k.snapsOf(i.snapshotsOf) : k.nodeClaims(i.claimsOf);
}

/** What a projection key holds, in domain words: a record, a kind's request names (uuids, or sequences), an index. */
export type KeyEntry = { record: { kind: Kind; uuid: string } } | { names: Kind } | { nameSeqs: Kind } | { index: ProjectionIndex };

/** What the projection key `key` holds (the inverse of `keysFor`'s projection keys); undefined: no key of the layout. */
export function entryOfKey(k: Keys, key: string): KeyEntry | undefined {
  const after = (prefix: string) => (key.startsWith(prefix) && key.length > prefix.length ? key.slice(prefix.length) : undefined);
  for (const kind of KIND_LIST) {
    if (key === k.dir(kind)) return { names: kind };
    if (key === k.dirSeq(kind)) return { nameSeqs: kind };
    if (key === k.index(kind)) return { index: { kind } };
  }
  const source = after(k.snapsOf(""));
  if (source !== undefined) return { index: { snapshotsOf: source } };
  const node = after(k.nodeClaims(""));
  if (node !== undefined) return { index: { claimsOf: node } };
  for (const kind of KIND_LIST) {
    const uuid = after(k.record(kind, ""));
    if (uuid !== undefined && !uuid.includes(".")) return { record: { kind, uuid } };
  }
  return undefined;
}

/** The request name of a directory field (`dirField`), if it is one. */
export function nameOfField(k: Keys, kind: Kind, field: string): string | undefined {
  const prefix = k.dirField(kind, "");
  return field.startsWith(prefix) ? field.slice(prefix.length) : undefined;
}

/** The keys that hold what a difference is about: the record's, the kind's names and their sequences, the index's. */
export function keysOfDifference(k: Keys, d: Difference): string[] {
  if (d.index) return [indexKey(k, d.index)];
  const a = d.address;
  return a.kind === "name" ? [k.dir(a.of), k.dirSeq(a.of)] : [k.record(a.kind, a.uuid)];
}
