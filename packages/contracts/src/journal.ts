/**
 * The journal's request/reply commands (one schema per command and per reply) and the reply
 * envelope. The controller sends these; the journal answers. A contract entry ties the subject
 * verb, the request schema and the result schema together, so both sides are typed from one
 * object and cannot drift.
 */
import { z } from "zod";
import { MAX_PAGE_ENTRIES, validateMountFlags } from "./bounds.js";
import { AccessMode, Capability, ContentSource, CsiName, Paging, StringMap, Uuid } from "./common.js";
import { WireError } from "./errors.js";
import { ForeignReason, ForeignRecordView, GroupMember } from "./events.js";
import { MiB } from "./images.js";
import { Kind } from "./kinds.js";
import { SnapshotRequester, VolumeRequester } from "./kubernetes.js";
import { MutableParameters } from "./mutable-parameters.js";

export const Claim = z.object({
  nodeId: z.string(),
  accessMode: AccessMode,
  accessType: z.enum(["mount", "block"]),
  readOnly: z.boolean(),
});
export type Claim = z.infer<typeof Claim>;

export const VolumeView = z.object({
  uuid: Uuid,
  name: z.string(),
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  imageName: z.string(),
  imageId: z.string(),
  sizeBytes: z.number().int().nonnegative(),
  parameters: z.record(z.string(), z.string()),
  capabilities: z.array(Capability),
  source: ContentSource.optional(),
  createdAt: z.string(),
  claims: z.array(Claim),
  /** The I/O limits in force (no zeros; empty = none). Replies of older journals lack it. */
  mutableParameters: MutableParameters.default({}),
  /** Set by volume.get (the image present and sized as recorded) and volume.list (the image present). */
  condition: z.object({ abnormal: z.boolean(), message: z.string() }).optional(),
});
export type VolumeView = z.infer<typeof VolumeView>;

export const SnapshotView = z.object({
  uuid: Uuid,
  name: z.string(),
  sourceUuid: Uuid,
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  imageName: z.string(),
  imageId: z.string(),
  sizeBytes: z.number().int().nonnegative(),
  createdAt: z.string(),
  readyToUse: z.boolean(),
  /** The group snapshot this snapshot is a member of (it is deleted with the group only). */
  groupSnapshotUuid: Uuid.optional(),
});
export type SnapshotView = z.infer<typeof SnapshotView>;

/** Most volumes one group snapshot takes (every one is locked and cut in one operation). */
export const MAX_GROUP_MEMBERS = 128;

export const GroupSnapshotView = z.object({
  uuid: Uuid,
  name: z.string(),
  /** Every member is in this pool (a group is cut in one pool). */
  pool: z.string(),
  poolId: z.number().int().nonnegative(),
  createdAt: z.string(),
  readyToUse: z.boolean(),
  snapshots: z.array(SnapshotView).max(MAX_GROUP_MEMBERS),
});
export type GroupSnapshotView = z.infer<typeof GroupSnapshotView>;

/**
 * Every command's request id; `resend`: the caller sent this very request again (it lost sight of
 * the first send: a reconnect, the replica's silence) — a journal runs it only if no run of it was
 * answered (services/journal/src/commands/run-served.ts).
 */
const RequestMeta = { requestId: z.string().min(1).max(128), resend: z.boolean().optional() };

/**
 * The pool id a CSI id carries (its `poolID` part): when given, a record in another pool is
 * "not found", so ids that differ only in their pool part never alias one volume.
 */
const PoolRef = z.number().int().nonnegative().optional();

/** A capability as a command carries it: the mount-flag rule holds here too (events keep the plain schema). */
const CommandCapability = Capability.superRefine((c, ctx) => {
  try {
    validateMountFlags(c.mountFlags ?? []);
  } catch (err) {
    ctx.addIssue({ code: "custom", path: ["mountFlags"], message: (err as Error).message });
  }
});

/**
 * A size the controller decided (docs/controller.md, "What the journal checks"): whole MiB. The
 * journal never rounds; a size that is not a whole number of MiB is refused.
 */
const DecidedSize = z.number().int().positive({ abort: true }).multipleOf(MiB, "must be a whole number of MiB (the controller rounds)");

export const VolumeCreate = z
  .object({
    ...RequestMeta,
    name: CsiName,
    sizeBytes: DecidedSize,
    /** Upper bound from the CSI capacity range (0 = none). */
    limitBytes: z.number().int().nonnegative().default(0),
    /** The pool the controller placed the volume in; absent: the cluster's default pool. A clone or restore must name its source's. */
    pool: z.string().min(1).optional(),
    parameters: StringMap.default({}),
    capabilities: z.array(CommandCapability).min(1).max(128),
    source: ContentSource.optional(),
    /** The pool id of the source's CSI id. */
    sourcePoolId: PoolRef,
    /** I/O limits at creation (part of what a repeated create must match); absent = none. */
    mutableParameters: MutableParameters.optional(),
    /** The PVC and PV it is made for: recorded on its reservation, never part of what a repeat must match. */
    kubernetes: VolumeRequester.optional(),
  })
  .refine((r) => r.limitBytes === 0 || r.limitBytes >= r.sizeBytes, { message: "is below sizeBytes", path: ["limitBytes"] });
/**
 * Record a volume for an image that is in a pool and that no record names (`csictl volume adopt`):
 * an image an operator says is live, named after a volume of this driver; its size is the image's.
 */
export const VolumeAdopt = z.object({
  ...RequestMeta,
  name: CsiName,
  /** The pool holding it; absent: the cluster's default pool. */
  pool: z.string().min(1).max(128).optional(),
  imageName: z.string().min(1).max(128),
  parameters: StringMap.default({}),
  capabilities: z.array(CommandCapability).min(1).max(128),
});
export const VolumeDelete = z.object({ ...RequestMeta, uuid: Uuid, poolId: PoolRef });
export const VolumeExpand = z.object({ ...RequestMeta, uuid: Uuid, poolId: PoolRef, sizeBytes: DecidedSize });
export const VolumeGet = z.object({ uuid: Uuid, poolId: PoolRef });
/** ControllerModifyVolume: only the keys given change; 0 removes a limit. */
export const VolumeModify = z.object({ ...RequestMeta, uuid: Uuid, poolId: PoolRef, mutableParameters: MutableParameters });
/** The volume after the change, the sequence at which its limits are current, and whether an event was appended. */
export const ModifyResult = z.object({ volume: VolumeView, seq: z.number().int().nonnegative(), changed: z.boolean() });
export const VolumePublish = z.object({
  ...RequestMeta,
  uuid: Uuid,
  poolId: PoolRef,
  nodeId: z.string().min(1).max(128),
  capability: CommandCapability,
  readOnly: z.boolean(),
  /** The node's max volumes (from its registration); 0 = no limit. */
  maxVolumes: z.number().int().nonnegative().default(0),
});
export const VolumeUnpublish = z.object({ ...RequestMeta, uuid: Uuid, poolId: PoolRef, nodeId: z.string().min(1).max(128).optional() });
export const PublishResult = z.object({ publishContext: z.record(z.string(), z.string()) });
/**
 * A page of an aggregate's history: events after `startingToken` (a stream sequence), at most
 * `maxEntries` (0 = as many as fit in one reply); `nextToken` says where the next page starts.
 */
export const VolumeHistory = z.object({
  uuid: Uuid,
  maxEntries: z.number().int().min(0).max(MAX_PAGE_ENTRIES).default(0),
  startingToken: z
    .string()
    .regex(/^[0-9]{1,15}$/, "must be a stream sequence")
    .optional(),
});
export const HistoryResult = z.object({
  /**
   * Every record of the aggregate's subjects in log order; a foreign record (not a valid event of
   * a journal: docs/journal.md) has an empty `event` and says why in `foreign`.
   */
  events: z.array(
    z.object({
      seq: z.number(),
      subject: z.string(),
      event: z.record(z.string(), z.unknown()),
      foreign: ForeignRecordView.omit({ seq: true, subject: true }).optional(),
    }),
  ),
  nextToken: z.string().optional(),
});
export const VolumeList = Paging;

export const SnapshotCreate = z.object({
  ...RequestMeta,
  name: CsiName,
  sourceUuid: Uuid,
  sourcePoolId: PoolRef,
  parameters: StringMap.default({}),
  /** The VolumeSnapshot and its content it is made for: recorded on its reservation, never part of what a repeat must match. */
  kubernetes: SnapshotRequester.optional(),
});
export const SnapshotDelete = z.object({ ...RequestMeta, uuid: Uuid, poolId: PoolRef });
export const SnapshotGet = z.object({ uuid: Uuid, poolId: PoolRef });
export const SnapshotList = Paging.extend({ snapshotUuid: Uuid.optional(), sourceUuid: Uuid.optional() });

const members = z
  .array(Uuid)
  .max(MAX_GROUP_MEMBERS, `at most ${MAX_GROUP_MEMBERS} volumes per group snapshot`)
  .refine((l) => new Set(l).size === l.length, { message: "must not repeat a uuid" });
export const GroupSnapshotCreate = z.object({
  ...RequestMeta,
  name: CsiName,
  sourceUuids: members.refine((l) => l.length > 0, { message: "at least one source volume is required" }),
  parameters: StringMap.default({}),
});
/** `snapshotUuids`, when given, must be the group's members (CSI's snapshot_ids check). */
export const GroupSnapshotDelete = z.object({ ...RequestMeta, uuid: Uuid, snapshotUuids: members.optional() });
export const GroupSnapshotGet = z.object({ uuid: Uuid, snapshotUuids: members.optional() });

const page = <T extends z.ZodTypeAny>(entry: T) => z.object({ entries: z.array(entry), nextToken: z.string().optional() });

export const Deleted = z.object({ deleted: z.boolean() });
/**
 * A node that, by its own reports, still holds a volume whose claim was just released (a CO that
 * skipped NodeUnstageVolume: Docker Swarm): what it holds, and the released claim's capability, so
 * that the controller can ask the node to let go of a staging no target uses any more.
 */
export const NodeHold = z.object({
  nodeId: z.string().max(128),
  staged: z.string().max(4096).optional(),
  published: z.array(z.string().max(4096)).max(16),
  device: z.string().max(4096).optional(),
  capability: Capability.optional(),
});
export type NodeHold = z.infer<typeof NodeHold>;
export const UnpublishResult = Deleted.extend({ held: z.array(NodeHold).max(16).default([]) });
export const PoolStatus = z.object({ pool: z.string(), poolId: z.number(), totalBytes: z.number(), freeBytes: z.number(), maxImageBytes: z.number() });
export const PoolStat = z.object({ pool: z.string().optional() });

// --- audit (csictl replay / verify / gc / rebuild) ---

/**
 * A point of the log: a stream sequence, or an ISO time — then the longest prefix of the log
 * whose events' times are not after it (the log's order is the truth; replicas' clocks may differ).
 */
export const LogPoint = z.union([
  z.number().int().nonnegative(),
  z
    .string()
    .max(64)
    .refine((s) => /^\d{4}-\d\d-\d\d/.test(s) && !Number.isNaN(Date.parse(s)), { message: "must be a stream sequence or an ISO time" }),
]);
export type LogPoint = z.infer<typeof LogPoint>;

/** The state at a point of the log, of the whole cluster (paged by uuid) or of one aggregate (`uuid`). */
export const AuditReplay = Paging.extend({ at: LogPoint, uuid: Uuid.optional() });
export const GroupSnapshotHeadView = GroupSnapshotView.omit({ snapshots: true }).extend({ members: z.array(GroupMember) });
export const ReplayEntry = z.object({
  kind: Kind,
  uuid: Uuid,
  /** reserved: its image not made (yet); ready: usable; deleted: ended (deleted, undone or collected). */
  status: z.enum(["reserved", "ready", "deleted"]),
  /** The aggregate's last event at that point. */
  seq: z.number().int().nonnegative(),
  volume: VolumeView.optional(),
  snapshot: SnapshotView.optional(),
  groupSnapshot: GroupSnapshotHeadView.optional(),
});
export type ReplayEntry = z.infer<typeof ReplayEntry>;
export const ReplayResult = z.object({
  /** The last event folded (seq 0: none): the state is the log up to and including it. */
  upTo: z.object({ seq: z.number().int().nonnegative(), time: z.string().optional() }),
  /** Whole cluster: the live aggregates, by uuid. One aggregate: it, whatever its status (none: it did not exist yet). */
  entries: z.array(ReplayEntry),
  nextToken: z.string().optional(),
});

/**
 * How old a reservation without an image must be before verify calls it orphaned (and gc may
 * collect it), and a leaked image before gc may remove it: well past a CO's retry horizon.
 */
export const DEFAULT_ORPHAN_AGE_MS = 15 * 60 * 1000;
const OrphanAge = z
  .number()
  .int()
  .nonnegative()
  .max(10 * 365 * 24 * 3600 * 1000)
  .default(DEFAULT_ORPHAN_AGE_MS);

export const AuditVerify = z.object({
  olderThanMs: OrphanAge,
  /** At most this many findings in the reply (the counts are complete). */
  maxFindings: z.number().int().min(0).max(MAX_PAGE_ENTRIES).default(100),
});
/**
 * Whose an image says it is, where the pool writes it on the image (RBD image metadata
 * `<plugin>/{kind,uuid,name,cluster}`): an image traced back without Redis or the log. Each part
 * only when the image carries it.
 */
export const ImageOwnerView = z.object({
  kind: z.string().max(16).optional(),
  uuid: z.string().max(64).optional(),
  /** The CSI request name (a PVC's `pvc-…`). */
  name: z.string().max(128).optional(),
  cluster: z.string().max(64).optional(),
  /** The identity of the event log whose journal made it (RBD images made since pools know their log). */
  log: z.string().max(128).optional(),
});
export type ImageOwnerView = z.infer<typeof ImageOwnerView>;
export const Finding = z.discriminatedUnion("type", [
  /** An image in a pool that no live reservation owns (`owner`: what the image says of itself). */
  z.object({
    type: z.literal("leakedImage"),
    pool: z.string(),
    imageName: z.string(),
    imageId: z.string(),
    sizeBytes: z.number(),
    owner: ImageOwnerView.optional(),
  }),
  /**
   * A reservation never completed, older than the threshold: its image was never made, or made and
   * never recorded (`imageMade`: a journal that died between the two). gc collects it and removes the image.
   */
  z.object({
    type: z.literal("orphanedReservation"),
    kind: Kind,
    uuid: Uuid,
    name: z.string(),
    pool: z.string(),
    imageName: z.string(),
    reservedAt: z.string(),
    imageMade: z.boolean().optional(),
  }),
  /**
   * An image of a pool whose images carry their owner (RBD) that is not this cluster's: no owner
   * metadata of this driver, or another cluster's. Reported, never touched by gc.
   */
  z.object({
    type: z.literal("foreignImage"),
    pool: z.string(),
    imageName: z.string(),
    imageId: z.string(),
    sizeBytes: z.number(),
    reason: z.string(),
  }),
  /**
   * An image this driver deleted, still in the pool's trash (RBD) though no clone reads from it any
   * more (the pool's sweep has not purged it yet). One that clones still need is where it should be: not reported.
   */
  z.object({
    type: z.literal("trashedImage"),
    pool: z.string(),
    imageName: z.string(),
    imageId: z.string(),
    sizeBytes: z.number(),
    deletedAt: z.string(),
    owner: ImageOwnerView.optional(),
  }),
  /** A temporary image of an interrupted snapshot or clone build (`.tmp-<name>-<hex>`), older than the threshold. */
  z.object({
    type: z.literal("tempImage"),
    pool: z.string(),
    imageName: z.string(),
    imageId: z.string(),
    sizeBytes: z.number(),
    createdAt: z.string(),
    owner: ImageOwnerView.optional(),
  }),
  /** A made volume or snapshot whose image is gone from its pool (gc never touches it: data loss to look at). */
  z.object({ type: z.literal("missingImage"), kind: Kind, uuid: Uuid, name: z.string(), pool: z.string(), imageName: z.string() }),
  /** What of the projection differs from what the log says: an aggregate (`key`: its address, e.g. `volume:<uuid>`), or an index's entry of it (`… in the claims of node n1`). */
  z.object({ type: z.literal("projectionDrift"), key: z.string() }),
  /**
   * A made volume or snapshot whose image is not the size its record says (an older log restored:
   * a volume expanded after the backup; or an image changed behind the driver's back). Never touched.
   */
  z.object({
    type: z.literal("imageSizeDiffers"),
    kind: Kind,
    uuid: Uuid,
    name: z.string(),
    pool: z.string(),
    imageName: z.string(),
    recordBytes: z.number(),
    imageBytes: z.number(),
  }),
  /** A node that, by its own registration, still holds a volume this log has no live record of (its device left attached or staged). */
  z.object({ type: z.literal("strayDevice"), nodeId: z.string().max(128), uuid: z.string().max(64), since: z.string() }),
  /** A claim of a node that stopped heartbeating (or never registered). */
  z.object({ type: z.literal("staleClaim"), uuid: Uuid, nodeId: z.string(), lastHeartbeat: z.string().optional() }),
  /** A record of the event stream that is not a valid event written by a journal: skipped by the fold (`audit.purge` removes it). */
  ForeignRecordView.extend({ type: z.literal("foreignRecord") }),
]);
export type Finding = z.infer<typeof Finding>;
export const VerifyCounts = z.object({
  leakedImages: z.number(),
  orphanedReservations: z.number(),
  missingImages: z.number(),
  projectionDrift: z.number(),
  staleClaims: z.number(),
  /** Replies of journals before foreign records were reported lack it. */
  foreignRecords: z.number().default(0),
  /** Findings of pools that have them (RBD): present when not zero. Foreign images are not this driver's: reported, not a fault. */
  foreignImages: z.number().optional(),
  trashedImages: z.number().optional(),
  tempImages: z.number().optional(),
  /** Present when not zero (journals before these findings lack them). */
  imagesOfAnotherSize: z.number().optional(),
  strayDevices: z.number().optional(),
});
export const VerifyResult = z.object({
  /** The log's last sequence the check folded. */
  upTo: z.number().int().nonnegative(),
  counts: VerifyCounts,
  findings: z.array(Finding),
  /** Findings were left out of the reply (maxFindings, or the reply's size). */
  truncated: z.boolean(),
});

export const AuditGc = z.object({
  ...RequestMeta,
  /** false (the default): a dry run, nothing is touched. */
  apply: z.boolean().default(false),
  /** Reservations without an image older than this are collected; leaked images too, unless `graceMs` says otherwise. */
  olderThanMs: OrphanAge,
  /** How old a leaked image must be before gc may remove it (default: `olderThanMs`). */
  graceMs: z
    .number()
    .int()
    .nonnegative()
    .max(10 * 365 * 24 * 3600 * 1000)
    .optional(),
  /** At most this many actions per call. */
  maxActions: z.number().int().min(1).max(MAX_PAGE_ENTRIES).default(1000),
});
export const GcAction = z.object({
  /**
   * removeLeakedImage and collectReservation (its image too, if made) append an event; purgeTrash
   * (an image this driver deleted, nothing needs it now) and removeTempImage (an interrupted
   * build's) are the pool's own housekeeping: no event.
   */
  type: z.enum(["removeLeakedImage", "collectReservation", "purgeTrash", "removeTempImage"]),
  pool: z.string(),
  imageName: z.string(),
  /** purgeTrash: the trash entry's id. */
  imageId: z.string().optional(),
  kind: Kind.optional(),
  uuid: Uuid.optional(),
  /** What happened: planned (dry run), done (its event is in the log), skipped (re-checked under the lock: not garbage). */
  outcome: z.enum(["planned", "done", "skipped"]),
  reason: z.string().optional(),
  /** The stream sequence of the action's event. */
  seq: z.number().int().optional(),
});
export type GcAction = z.infer<typeof GcAction>;
export const GcResult = z.object({ apply: z.boolean(), actions: z.array(GcAction), truncated: z.boolean() });

/** Most sequences one audit.purge call takes. */
export const MAX_PURGE_RECORDS = 1000;
/**
 * Remove foreign records from the event log (`csictl log purge-foreign`): each sequence is read
 * again and removed only if it is still a foreign record; a dry run unless `apply`.
 */
export const AuditPurge = z.object({
  ...RequestMeta,
  seqs: z
    .array(z.number().int().positive())
    .min(1)
    .max(MAX_PURGE_RECORDS)
    .refine((l) => new Set(l).size === l.length, { message: "must not repeat a sequence" }),
  apply: z.boolean().default(false),
});
export const PurgeAction = z.object({
  seq: z.number().int().positive(),
  subject: z.string().optional(),
  reason: ForeignReason.optional(),
  /** planned (dry run), done (removed from the stream), skipped (not a foreign record, or already gone: `why`). */
  outcome: z.enum(["planned", "done", "skipped"]),
  why: z.string().optional(),
});
export type PurgeAction = z.infer<typeof PurgeAction>;
/** `rebuilt`: records were removed, so the projection (which holds the subjects' last sequences) was rebuilt from the log. */
export const PurgeResult = z.object({ apply: z.boolean(), records: z.array(PurgeAction), rebuilt: z.boolean() });

/**
 * The images of the cluster's pools, as the journal lists them (a dry run of `csictl log restore`
 * compares them with the backup's records): pools by name, then images by name; the token is
 * `<pool>/<image>` of the last one given.
 */
export const AuditImages = z.object({
  maxEntries: z.number().int().min(0).max(MAX_PAGE_ENTRIES).default(0),
  startingToken: z.string().max(260).optional(),
});
export const PoolImage = z.object({
  pool: z.string(),
  name: z.string(),
  id: z.string(),
  sizeBytes: z.number().int().nonnegative(),
  readOnly: z.boolean(),
  owner: ImageOwnerView.optional(),
  createdAt: z.number().optional(),
});
export type PoolImage = z.infer<typeof PoolImage>;
export const ImagesResult = z.object({
  /** Every pool of the cluster: whether its images carry their owner, and the log it is bound to (where its images carry it). */
  pools: z.array(z.object({ name: z.string(), marksOwners: z.boolean(), boundLog: z.string().optional() })),
  entries: z.array(PoolImage),
  nextToken: z.string().optional(),
});

export const AuditRebuild = z.object({ requestId: RequestMeta.requestId.optional() });
/** `dropped`: the records (volumes, snapshots, group snapshots, tombstones) the projection held before the rebuild. */
export const RebuildResult = z.object({ dropped: z.number(), replayedTo: z.number(), ms: z.number() });

/** Every journal command: family + verb → request and result schemas. */
export const journalContract = {
  "volume.create": { request: VolumeCreate, result: VolumeView },
  "volume.adopt": { request: VolumeAdopt, result: VolumeView },
  "volume.delete": { request: VolumeDelete, result: Deleted },
  "volume.expand": { request: VolumeExpand, result: VolumeView },
  "volume.modify": { request: VolumeModify, result: ModifyResult },
  "volume.get": { request: VolumeGet, result: VolumeView },
  "volume.list": { request: VolumeList, result: page(VolumeView) },
  "volume.publish": { request: VolumePublish, result: PublishResult },
  "volume.unpublish": { request: VolumeUnpublish, result: UnpublishResult },
  "snapshot.create": { request: SnapshotCreate, result: SnapshotView },
  "snapshot.delete": { request: SnapshotDelete, result: Deleted },
  "snapshot.get": { request: SnapshotGet, result: SnapshotView },
  "snapshot.list": { request: SnapshotList, result: page(SnapshotView) },
  "groupsnapshot.create": { request: GroupSnapshotCreate, result: GroupSnapshotView },
  "groupsnapshot.delete": { request: GroupSnapshotDelete, result: Deleted },
  "groupsnapshot.get": { request: GroupSnapshotGet, result: GroupSnapshotView },
  "pool.stat": { request: PoolStat, result: PoolStatus },
  "volume.history": { request: VolumeHistory, result: HistoryResult },
  "audit.replay": { request: AuditReplay, result: ReplayResult },
  "audit.verify": { request: AuditVerify, result: VerifyResult },
  "audit.gc": { request: AuditGc, result: GcResult },
  "audit.images": { request: AuditImages, result: ImagesResult },
  "audit.rebuild": { request: AuditRebuild, result: RebuildResult },
  "audit.purge": { request: AuditPurge, result: PurgeResult },
} as const;

export type JournalCommand = keyof typeof journalContract;
export type CommandRequest<C extends JournalCommand> = z.input<(typeof journalContract)[C]["request"]>;
export type ParsedRequest<C extends JournalCommand> = z.output<(typeof journalContract)[C]["request"]>;
export type CommandResult<C extends JournalCommand> = z.infer<(typeof journalContract)[C]["result"]>;

/** The reply envelope: a result, or a stable error name the caller maps to a CSI code. */
export const replyEnvelope = <T extends z.ZodTypeAny>(result: T) =>
  z.discriminatedUnion("ok", [z.object({ ok: z.literal(true), result }), z.object({ ok: z.literal(false), error: WireError })]);
