/**
 * One table per aggregate kind, as ceph-csi configures its volume and snapshot journals
 * (NewCSIVolumeJournal / NewCSISnapshotJournal): where the kind's events go, how its request
 * names and records are kept in Redis, how its images are named, which events create and end
 * it, how its record is read and shown. Code that serves several kinds looks them up here
 * instead of asking `kind === "volume" ? … : …`.
 *
 * Redis layout (ceph-csi's omaps, one Redis hash tag per cluster so Lua scripts touch one slot):
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
 */
import {
  type EventBody,
  type JournalEvent,
  KIND_TOKENS,
  type Kind,
  type SnapshotView,
  snapshotImageName,
  subjects,
  type VolumeView,
  volumeImageName,
} from "@csi/contracts";
import {
  type GroupRecord,
  type GroupSnapshotHead,
  groupFromHash,
  groupHash,
  groupHead,
  type Hash,
  type SnapshotRecord,
  snapshotFromHash,
  snapshotHash,
  snapshotView,
  type VolumeRecord,
  volumeFromHash,
  volumeHash,
  volumeView,
} from "./records.js";

interface Shapes {
  volume: { record: VolumeRecord; view: VolumeView; created: "VolumeCreated" };
  snapshot: { record: SnapshotRecord; view: SnapshotView; created: "SnapshotCreated" };
  groupsnapshot: { record: GroupRecord; view: GroupSnapshotHead; created: "GroupSnapshotCreated" };
}
type EventType = JournalEvent["type"];

export interface KindSpec<K extends Kind> {
  kind: K;
  /** Subject of one aggregate's events. */
  events(cluster: string, uuid: string): string;
  /** Subject of a request name's events (the fence of "one name, one reservation"). */
  nameEvents(cluster: string, instance: string, name: string): string;
  /** ceph-csi's omap words: the directory `csi.<dir>.<instance>`, the record `csi.<word>.<uuid>`. */
  redis: { dir: string; word: string };
  /** Whether records are also indexed by their source volume (`csi.index.snap.src.<uuid>`). */
  indexedBySource: boolean;
  reserved: Extract<EventType, `${string}Reserved`>;
  created: Shapes[K]["created"];
  deleted: Extract<EventType, `${string}Deleted`>;
  fromHash(uuid: string, h: Hash): Shapes[K]["record"];
  /** The record's hash fields (the inverse of fromHash). */
  toHash(r: Shapes[K]["record"]): Hash;
  view(r: Shapes[K]["record"]): Shapes[K]["view"];
}

/** The kinds that are an image in a pool (a group snapshot is a set of snapshots). */
export type ImageKind = "volume" | "snapshot";
export type RecordOf<K extends Kind> = Shapes[K]["record"];
export type KindTable = { [K in Kind]: KindSpec<K> } & { [K in ImageKind]: { imageName(uuid: string): string } };

function spec<K extends Kind>(kind: K, rest: Omit<KindSpec<K>, "kind" | "events" | "nameEvents">): KindSpec<K> {
  return {
    kind,
    events: (cluster, uuid) => subjects.aggregateEvents(cluster, kind, uuid),
    nameEvents: (cluster, instance, name) => subjects.nameEvents(cluster, KIND_TOKENS[kind], instance, name),
    ...rest,
  };
}

export const KINDS: KindTable = {
  volume: {
    ...spec("volume", {
      redis: { dir: "volumes", word: "volume" },
      indexedBySource: false,
      reserved: "VolumeReserved",
      created: "VolumeCreated",
      deleted: "VolumeDeleted",
      fromHash: volumeFromHash,
      toHash: volumeHash,
      view: volumeView,
    }),
    imageName: volumeImageName,
  },
  snapshot: {
    ...spec("snapshot", {
      redis: { dir: "snaps", word: "snap" },
      indexedBySource: true,
      reserved: "SnapshotReserved",
      created: "SnapshotCreated",
      deleted: "SnapshotDeleted",
      fromHash: snapshotFromHash,
      toHash: snapshotHash,
      view: snapshotView,
    }),
    imageName: snapshotImageName,
  },
  groupsnapshot: spec("groupsnapshot", {
    redis: { dir: "groups", word: "group" },
    indexedBySource: false,
    reserved: "GroupSnapshotReserved",
    created: "GroupSnapshotCreated",
    deleted: "GroupSnapshotDeleted",
    fromHash: groupFromHash,
    toHash: groupHash,
    view: groupHead,
  }),
};

/** The *Created event of an aggregate whose image exists. */
export function createdEvent(kind: ImageKind, uuid: string, image: { id: string; sizeBytes: number }): EventBody {
  return { type: KINDS[kind].created, uuid, imageId: image.id, sizeBytes: image.sizeBytes };
}

/** Every subject that holds events of one uuid: its aggregate's (whatever its kind) and its device reports. */
export function uuidSubjects(cluster: string, uuid: string): string[] {
  return [...Object.values(KINDS).map((k) => k.events(cluster, uuid)), subjects.deviceEvents(cluster, uuid)];
}

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
    dir: (k) => `${prefix}csi.${KINDS[k].redis.dir}.${instance}`,
    dirSeq: (k) => `${prefix}csi.${KINDS[k].redis.dir}.${instance}.seq`,
    dirField: (k, name) => `csi.${KINDS[k].redis.word}.${name}`,
    record: (k, uuid) => `${prefix}csi.${KINDS[k].redis.word}.${uuid}`,
    index: (k) => `${prefix}csi.index.${KINDS[k].redis.word}`,
    snapsOf: (src) => `${prefix}csi.index.snap.src.${src}`,
    nodeClaims: (nodeId) => `${prefix}csi.node.${nodeId}`,
    projection: `${prefix}projection`,
    keyIndex: `${prefix}projection.keys`,
    nameLock: (k, name) => lock(`name.${k}.${name}`),
    uuidLock: (k, uuid) => lock(`${k}.${uuid}`),
    lock,
  };
}
