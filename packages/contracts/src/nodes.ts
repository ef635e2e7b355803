/**
 * Node registration: each node-agent publishes its registration (and re-publishes it as a
 * heartbeat) on `csi.nodes.<nodeId>` into the CSI_NODES stream, which keeps the last message
 * per subject. The controller reads it to know which nodes exist and how healthy they are.
 */
import { z } from "zod";
import { Capability, Uuid } from "./common.js";
import { DeviceState, MappingKind, Via } from "./events.js";
import { PodInfo } from "./kubernetes.js";
import { MutableParameters } from "./mutable-parameters.js";
import { nameToken, subjects } from "./subjects.js";

/** A durable work queue on JetStream (stream + one durable consumer); the runtime consumes it. */
export interface QueueSpec {
  stream: string;
  subjects: string[];
  consumer: string;
  filterSubject: string;
  /** 1 = strictly one message in flight across every replica (keeps order). */
  maxAckPending?: number;
}

export const NodeRegistration = z.object({
  nodeId: z.string().min(1).max(128),
  maxVolumes: z.number().int().nonnegative(),
  topology: z.record(z.string(), z.string()),
  capabilities: z.array(z.string()),
  version: z.string(),
  /** When this registration/heartbeat was sent (ISO). */
  time: z.string(),
  heartbeatMs: z.number().int().positive(),
  /**
   * Every volume the node holds (staged, published or attached) by its own state, as of `time`,
   * each as `<clusterID>/<uuid>` (holdingKey); absent from older agents, or when it holds more than
   * MAX_HOLDING. It corrects the device reports a crash may have lost (docs/journal.md, "In use means in use").
   */
  holding: z.array(z.string().max(256)).max(1024).optional(),
});
/** The most volumes a registration lists as held (beyond: none listed, the reports alone count). */
export const MAX_HOLDING = 1024;
/** A volume in a registration's `holding`: its cluster and uuid. */
export const holdingKey = (clusterID: string, uuid: string) => `${clusterID}/${uuid}`;
export type NodeRegistration = z.infer<typeof NodeRegistration>;

export const NODES_STREAM = "CSI_NODES";
/** The topology segment key every node reports (one segment per node: its id). */
export const TOPOLOGY_KEY = "topology.nats.csi/node";
/**
 * The topology segment key by which a node whose clusters file has an RBD pool says how it maps
 * RBD images (`RbdMapping`, or "none"): a pool's `topology` may require it, so that the controller
 * publishes RBD volumes only to nodes that can map them. Nodes without RBD pools leave it out.
 */
export const RBD_MAPPING_KEY = "topology.nats.csi/rbd-mapping";
export const nodeSubjects = {
  /** Node ids are often host names with dots: base64url keeps them one token. */
  registration: (nodeId: string) => `csi.nodes.${nameToken(nodeId)}`,
  wildcard: "csi.nodes.*",
};

/**
 * Work a front-end sends a node without kubelet: stage/publish/unpublish/unstage a volume.
 * Delivered durably (a stream of the node's own, CSI_NODE_WORK_<node>: one subject, one durable
 * consumer), so work sent while the agent is down is done when it comes back; every step is
 * idempotent, and the message is acknowledged only once its step is done, so the effect is exactly
 * once. A node's credentials reach only its own stream: an ack or nak names a sequence of that
 * stream alone (docs/security.md, "Node work").
 */
export const NodeWork = z.object({
  /** Unique id of this piece of work (also the JetStream message id, for de-duplication). */
  id: z.string().min(1).max(128),
  /** The node it is for: an agent refuses work addressed to another (its subject or this). */
  nodeId: z.string().min(1).max(128),
  op: z.enum(["stage", "publish", "unpublish", "unstage"]),
  volumeId: z.string().min(1).max(128),
  stagingPath: z.string().min(1),
  targetPath: z.string().optional(),
  capability: Capability,
  readOnly: z.boolean().default(false),
  publishContext: z.record(z.string(), z.string()).default({}),
  /**
   * An unstage that follows a claim's release (ControllerUnpublishVolume's let-go): stale, and
   * refused, once the node holds a claim on the volume again (the CO published it there anew).
   */
  afterRelease: z.boolean().optional(),
});
export type NodeWork = z.input<typeof NodeWork>;

/**
 * A volume's I/O limits changed (ControllerModifyVolume): sent to every node holding a claim on
 * it. `seq` is the volume's log position of the change; a node applies only what is newer than
 * what it already has (the publish context carries the same pair), so order does not matter.
 */
export const NodeLimitsWork = z.object({
  id: z.string().min(1).max(128),
  nodeId: z.string().min(1).max(128),
  op: z.literal("limits"),
  volumeId: z.string().min(1).max(128),
  mutableParameters: MutableParameters,
  seq: z.number().int().nonnegative(),
});
export type NodeLimitsWork = z.input<typeof NodeLimitsWork>;

/**
 * A node-agent's question to a cluster's journal before it runs work that uses a volume (stage,
 * publish, limits): does this node hold a claim on it? The node is the one the subject names
 * (`subjects.claims`): a node's account can ask only as itself.
 */
export const ClaimCheck = z.object({ uuid: Uuid });
export const ClaimAnswer = z.union([
  z.object({ claimed: z.literal(true), accessMode: z.string().max(64), readOnly: z.boolean() }),
  z.object({ claimed: z.literal(false) }),
  z.object({ error: z.string().max(1024) }),
]);
export type ClaimAnswer = z.infer<typeof ClaimAnswer>;

/** Everything that travels on a node's work queue. */
export const NodeQueueMessage = z.discriminatedUnion("op", [NodeWork, NodeLimitsWork]);

/** A node's own work stream (base64url tokens are valid stream names). */
export const nodeWorkStream = (nodeId: string) => `CSI_NODE_WORK_${nameToken(nodeId)}`;
export const nodeWorkSubjects = {
  forNode: (nodeId: string) => `csi.work.${nameToken(nodeId)}`,
  wildcard: "csi.work.*",
  /** Durable consumer name of a node (consumer names may not contain '.'). */
  consumer: (nodeId: string) => `node-${nameToken(nodeId)}`,
};
/**
 * The one work stream of every node before (all nodes' work in one work queue: a node's ack subject
 * named any sequence of it). Drained into the nodes' own streams at the upgrade
 * (runtime's migrateLegacyNodeWork), then deleted.
 */
export const LEGACY_NODE_WORK_STREAM = "CSI_NODE_WORK";
export const legacyNodeWorkSubjects = { wildcard: "csi.nodework.*", prefix: "csi.nodework." };

/**
 * A node's device-state report: what a step did to a volume on the node. Node-agents publish
 * it into the cluster's report queue; the journal appends it to the volume's history.
 */
export const DeviceReport = z.object({
  /**
   * The request that asked for the step: the gRPC call's request id, the NATS work item's id,
   * or the healer run's id. Several reports share one (the node-agent's JetStream message id
   * adds a per-report part, for de-duplication).
   */
  requestId: z.string().min(1).max(128),
  uuid: Uuid,
  nodeId: z.string().min(1).max(128),
  state: DeviceState,
  device: z.string().max(4096).optional(),
  path: z.string().max(4096).optional(),
  reason: z.string().max(4096).optional(),
  /** How the image is mapped (in the "attached" report). */
  mapping: MappingKind.optional(),
  via: Via,
  at: z.string(),
  /** The pod a publish was for (NodePublishVolume's volume_context), or the one an unpublished target was published for. */
  pod: PodInfo.optional(),
});
export type DeviceReport = z.infer<typeof DeviceReport>;

export const nodeQueues = {
  /** Node work for one node: its own stream, one subject, one durable consumer. */
  work: (nodeId: string): QueueSpec => ({
    stream: nodeWorkStream(nodeId),
    subjects: [nodeWorkSubjects.forNode(nodeId)],
    consumer: nodeWorkSubjects.consumer(nodeId),
    filterSubject: nodeWorkSubjects.forNode(nodeId),
  }),
  /** A cluster's device reports: one consumer shared by the journal replicas, one in flight (order kept). */
  reports: (cluster: string): QueueSpec => ({
    stream: subjects.reportStreamName(cluster),
    subjects: [subjects.reportsWildcard(cluster)],
    consumer: "journal",
    filterSubject: subjects.reportsWildcard(cluster),
    maxAckPending: 1,
  }),
};
