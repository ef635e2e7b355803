/**
 * One table per aggregate kind, as ceph-csi configures its volume and snapshot journals
 * (NewCSIVolumeJournal / NewCSISnapshotJournal): where the kind's events go, how its request
 * names and records are kept in Redis, how its images are named, which events create and end
 * it, how its record is read and shown. Code that serves several kinds looks them up here
 * instead of asking `kind === "volume" ? … : …`.
 *
 * The Redis encoding of these kinds (keys, hash fields) is store/'s (projection/redis/layout.ts).
 */

import {
  type DeviceReport,
  type EventBody,
  type JournalEvent,
  KIND_TOKENS,
  type Kind,
  SNAPSHOT_IMAGE_PREFIX,
  type SnapshotView,
  snapshotImageName,
  subjects,
  VOLUME_IMAGE_PREFIX,
  type VolumeView,
  volumeImageName,
} from "@csi/contracts";
import { addressOf } from "./evolve.js";
import { type GroupRecord, type GroupSnapshotHead, groupHead, type SnapshotRecord, snapshotView, type VolumeRecord, volumeView } from "./records.js";

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
  reserved: Extract<EventType, `${string}Reserved`>;
  created: Shapes[K]["created"];
  deleted: Extract<EventType, `${string}Deleted`>;
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
      reserved: "VolumeReserved",
      created: "VolumeCreated",
      deleted: "VolumeDeleted",
      view: volumeView,
    }),
    imageName: volumeImageName,
  },
  snapshot: {
    ...spec("snapshot", {
      reserved: "SnapshotReserved",
      created: "SnapshotCreated",
      deleted: "SnapshotDeleted",
      view: snapshotView,
    }),
    imageName: snapshotImageName,
  },
  groupsnapshot: spec("groupsnapshot", {
    reserved: "GroupSnapshotReserved",
    created: "GroupSnapshotCreated",
    deleted: "GroupSnapshotDeleted",
    view: groupHead,
  }),
};

/** The *Created event of an aggregate whose image exists. */
export function createdEvent(kind: ImageKind, uuid: string, image: { id: string; sizeBytes: number }): EventBody {
  return { type: KINDS[kind].created, uuid, imageId: image.id, sizeBytes: image.sizeBytes };
}

/** The events every kind shares: a request name taken and released, a reservation undone, an aggregate deleted. */
export const shared = {
  nameReserved: (kind: Kind, name: string, uuid: string): EventBody => ({ type: "NameReserved", kind, name, uuid }),
  nameReleased: (kind: Kind, name: string, uuid: string): EventBody => ({ type: "NameReleased", kind, name, uuid }),
  undone: (kind: Kind, uuid: string, reason: string): EventBody => ({ type: "ReservationUndone", kind, uuid, reason }),
  deleted: (kind: Kind, uuid: string): EventBody => ({ type: KINDS[kind].deleted, uuid }) as EventBody,
  /** A node-agent's report of a device step, as its volume's history keeps it. */
  deviceReported: (report: Omit<DeviceReport, "requestId">): EventBody => ({ type: "DeviceStateReported", ...report }),
};

/** The subject an event goes to: its aggregate's (a request name's, a record's), else its pool's or its volume's device history. */
export function subjectOf(body: EventBody, cluster: string, instance: string): string {
  const a = addressOf(body);
  if (a?.kind === "name") return KINDS[a.of].nameEvents(cluster, instance, a.name);
  if (a) return KINDS[a.kind].events(cluster, a.uuid);
  if (body.type === "ImageLeakCollected") return subjects.poolEvents(cluster, body.pool);
  if (body.type === "DeviceStateReported") return subjects.deviceEvents(cluster, body.uuid);
  throw new Error(`no subject for ${body.type}`);
}

/** Every subject that holds events of one uuid: its aggregate's (whatever its kind) and its device reports. */
export function uuidSubjects(cluster: string, uuid: string): string[] {
  return [...Object.values(KINDS).map((k) => k.events(cluster, uuid)), subjects.deviceEvents(cluster, uuid)];
}

/** The aggregate an image is named after (`csi-vol-<uuid>`, `csi-snap-<uuid>`), if it is one of ours. */
export function imageOwner(imageName: string): { kind: "volume" | "snapshot"; uuid: string } | undefined {
  const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  for (const [prefix, kind] of [
    [VOLUME_IMAGE_PREFIX, "volume"],
    [SNAPSHOT_IMAGE_PREFIX, "snapshot"],
  ] as const) {
    if (imageName.startsWith(prefix) && uuid.test(imageName) && imageName.length === prefix.length + 36) return { kind, uuid: imageName.slice(prefix.length) };
  }
  return undefined;
}
