/**
 * Events: the durable facts the journal appends to JetStream. Every event carries its type, a
 * schema version, the time, the request id and the actor; events are never rewritten. The
 * aggregate an event belongs to is its subject (see subjects.ts); the stream sequence is
 * assigned by JetStream and travels beside the event, not inside it.
 */
import { z } from "zod";
import { NATS_DEFAULT_MAX_PAYLOAD } from "./bounds.js";
import { AccessMode, Actor, Capability, ContentSource, Uuid } from "./common.js";
import { Kind } from "./kinds.js";
import { PodInfo, SnapshotRequester, VolumeRequester } from "./kubernetes.js";
import { MutableParameters } from "./mutable-parameters.js";

const meta = {
  v: z.literal(1),
  time: z.string(),
  requestId: z.string(),
  actor: Actor,
};

const ev = <T extends string, S extends z.ZodRawShape>(type: T, data: S) => z.object({ type: z.literal(type), ...meta, ...data });

// --- request-name aggregate: the fence for "one name, one reservation" ---
export const NameReserved = ev("NameReserved", { kind: Kind, name: z.string(), uuid: Uuid });
export const NameReleased = ev("NameReleased", { kind: Kind, name: z.string(), uuid: Uuid });

// --- volume aggregate ---
export const VolumeReserved = ev("VolumeReserved", {
  uuid: Uuid,
  name: z.string(),
  instance: z.string(),
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  imageName: z.string(),
  sizeBytes: z.number().int().positive(),
  digest: z.string(),
  parameters: z.record(z.string(), z.string()),
  capabilities: z.array(Capability),
  source: ContentSource.optional(),
  /** The I/O limits given at creation (in force: no zeros); absent in logs written before they existed. */
  mutableParameters: MutableParameters.optional(),
  /** The PVC and PV it was made for (Kubernetes' --extra-create-metadata); history only, not part of the volume's state. */
  kubernetes: VolumeRequester.optional(),
  /** Recorded for an image that was there before its record (`csictl volume adopt`): an operator said it is live. */
  adopted: z.literal(true).optional(),
});
export const VolumeCreated = ev("VolumeCreated", { uuid: Uuid, imageId: z.string(), sizeBytes: z.number().int().positive() });
export const VolumeExpanded = ev("VolumeExpanded", { uuid: Uuid, sizeBytes: z.number().int().positive() });
export const VolumeDeleted = ev("VolumeDeleted", { uuid: Uuid });
/** ControllerModifyVolume: the volume's I/O limits in force after the change (the whole set, not the difference). */
export const VolumeModified = ev("VolumeModified", { uuid: Uuid, mutableParameters: MutableParameters });

/** ControllerPublishVolume: the volume is claimed by a node (Nomad's claim). */
export const VolumeClaimed = ev("VolumeClaimed", {
  uuid: Uuid,
  nodeId: z.string(),
  accessMode: AccessMode,
  accessType: z.enum(["mount", "block"]),
  readOnly: z.boolean(),
});
export const VolumeUnclaimed = ev("VolumeUnclaimed", { uuid: Uuid, nodeId: z.string() });

// --- device history of a volume (reported by node-agents, appended by the journal) ---
/** `limited`: the node set (or removed) the volume's I/O limits on its device. */
export const DeviceState = z.enum(["attached", "staged", "published", "unpublished", "unstaged", "detached", "healed", "failed", "limited"]);
export type DeviceState = z.infer<typeof DeviceState>;
/** Where a node step came from: kubelet's gRPC call, NATS node work, or the node's healer. */
export const Via = z.enum(["grpc", "nats", "healer"]);
export type Via = z.infer<typeof Via>;
/** How a node maps an RBD image: the kernel's rbd driver, rbd-nbd, or rbd-fuse + a loop device. */
export const RbdMapping = z.enum(["krbd", "rbd-nbd", "fuse"]);
export type RbdMapping = z.infer<typeof RbdMapping>;
/** How a volume's image became a block device on a node: a loop device on a file pool's file ("loop"), or an RBD mapping. */
export const MappingKind = z.enum(["loop", ...RbdMapping.options]);
export type MappingKind = z.infer<typeof MappingKind>;
export const DeviceStateReported = ev("DeviceStateReported", {
  uuid: Uuid,
  nodeId: z.string(),
  state: DeviceState,
  /** What the step was about: the device path, the staging or target path. */
  device: z.string().optional(),
  path: z.string().optional(),
  /** Why a step failed, or what a heal action did. */
  reason: z.string().optional(),
  /** How the image is mapped ("attached" reports): loop (file pool), krbd, rbd-nbd, fuse (rbd-fuse + loop). */
  mapping: MappingKind.optional(),
  /** Where the step came from. */
  via: Via,
  /** When the node did it (the event's own time is when the journal appended it). */
  at: z.string(),
  /** The pod a publish was for (the kubelet's podInfoOnMount); an unpublish names the pod its publish was for. */
  pod: PodInfo.optional(),
});

// --- snapshot aggregate ---
export const SnapshotReserved = ev("SnapshotReserved", {
  uuid: Uuid,
  name: z.string(),
  instance: z.string(),
  sourceUuid: Uuid,
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  imageName: z.string(),
  digest: z.string(),
  /** Set when the snapshot is a member of a group snapshot (then it is deleted only with the group). */
  groupSnapshotUuid: Uuid.optional(),
  /** The VolumeSnapshot and its content it was made for (Kubernetes' --extra-create-metadata); history only. */
  kubernetes: SnapshotRequester.optional(),
});
export const SnapshotCreated = ev("SnapshotCreated", { uuid: Uuid, imageId: z.string(), sizeBytes: z.number().int().nonnegative() });
export const SnapshotDeleted = ev("SnapshotDeleted", { uuid: Uuid });

// --- group snapshot aggregate: snapshots of several volumes cut together ---
export const GroupMember = z.object({ volumeUuid: Uuid, snapshotUuid: Uuid });
export type GroupMember = z.infer<typeof GroupMember>;
/** Reserves the group and, up front, the uuid of every member snapshot (each then a SnapshotReserved). */
export const GroupSnapshotReserved = ev("GroupSnapshotReserved", {
  uuid: Uuid,
  name: z.string(),
  instance: z.string(),
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  digest: z.string(),
  members: z.array(GroupMember).min(1),
});
/** Every member was cut and recorded: the group is usable. */
export const GroupSnapshotCreated = ev("GroupSnapshotCreated", { uuid: Uuid });
export const GroupSnapshotDeleted = ev("GroupSnapshotDeleted", { uuid: Uuid });

/** A reservation that never became usable, rolled back (any aggregate kind). */
export const ReservationUndone = ev("ReservationUndone", { kind: Kind, uuid: Uuid, reason: z.string() });

// --- garbage collection (`audit.gc`): every cleanup is in the log too ---
/**
 * An image that no live reservation owns was removed from its pool. Appended on the pool's
 * subject (`csi.<c>.evt.pool.<pool>`): such an image belongs to no aggregate.
 */
export const ImageLeakCollected = ev("ImageLeakCollected", {
  pool: z.string(),
  imageName: z.string(),
  imageId: z.string(),
  sizeBytes: z.number().int().nonnegative(),
  reason: z.string(),
});
/** A reservation whose image was never made, older than gc's threshold, was ended (like ReservationUndone). */
export const ReservationCollected = ev("ReservationCollected", { kind: Kind, uuid: Uuid, reason: z.string() });

export const JournalEvent = z.discriminatedUnion("type", [
  NameReserved,
  NameReleased,
  VolumeReserved,
  VolumeCreated,
  VolumeExpanded,
  VolumeDeleted,
  VolumeModified,
  VolumeClaimed,
  VolumeUnclaimed,
  DeviceStateReported,
  SnapshotReserved,
  SnapshotCreated,
  SnapshotDeleted,
  GroupSnapshotReserved,
  GroupSnapshotCreated,
  GroupSnapshotDeleted,
  ReservationUndone,
  ImageLeakCollected,
  ReservationCollected,
]);
export type JournalEvent = z.infer<typeof JournalEvent>;
/** An event as a writer builds it: the metadata is stamped by the appender. */
export type EventBody<E extends JournalEvent = JournalEvent> = E extends JournalEvent ? Omit<E, "v" | "time" | "requestId" | "actor"> : never;

/** An event read back from the log with its position. */
export interface StoredEvent {
  seq: number;
  subject: string;
  event: JournalEvent;
}

/**
 * The most bytes an event may have in the log: a journal refuses to append a larger one (and a
 * server with the default max_payload would refuse it anyway), so a larger record is none of its
 * events and is not even parsed.
 */
export const MAX_EVENT_BYTES = NATS_DEFAULT_MAX_PAYLOAD;
/**
 * The largest event a journal writes: MAX_EVENT_BYTES less room for the headers of the publish
 * (a fenced append carries its expected sequence in one, and NATS counts headers against
 * max_payload). A reader still takes anything up to MAX_EVENT_BYTES as an event.
 */
export const MAX_WRITTEN_EVENT_BYTES = MAX_EVENT_BYTES - 1024;

/**
 * Why a record of an event stream is not a valid event written by a journal (docs/journal.md,
 * "Foreign records in the log"): larger than MAX_EVENT_BYTES, not JSON (or not a JSON object), a
 * type no journal writes, a known type that does not match its schema, or a valid event on a
 * subject other than the one its journal appends it on.
 */
export const ForeignReason = z.enum(["too-large", "not-json", "unknown-type", "schema", "wrong-subject"]);
export type ForeignReason = z.infer<typeof ForeignReason>;

/** A foreign record as verify, history and purge report it: where it is and why it is foreign, never its body beyond a short sanitised prefix. */
export const ForeignRecordView = z.object({
  seq: z.number().int().positive(),
  subject: z.string(),
  reason: ForeignReason,
  /** What is wrong, in a few words (never a value of the record). */
  detail: z.string(),
  bytes: z.number().int().nonnegative(),
  /** The first characters of the record, unsafe characters replaced, quoted (`quote`). */
  preview: z.string(),
});
export type ForeignRecordView = z.infer<typeof ForeignRecordView>;
