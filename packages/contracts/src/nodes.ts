/**
 * Node registration: each node-agent publishes its registration (and re-publishes it as a
 * heartbeat) on `csi.nodes.<nodeId>` into the CSI_NODES stream, which keeps the last message
 * per subject. The controller reads it to know which nodes exist and how healthy they are.
 */
import { z } from "zod";
import { Capability } from "./common.js";
import { nameToken } from "./subjects.js";

export const NodeRegistration = z.object({
  nodeId: z.string().min(1).max(128),
  maxVolumes: z.number().int().nonnegative(),
  topology: z.record(z.string(), z.string()),
  capabilities: z.array(z.string()),
  version: z.string(),
  /** When this registration/heartbeat was sent (ISO). */
  time: z.string(),
  heartbeatMs: z.number().int().positive(),
});
export type NodeRegistration = z.infer<typeof NodeRegistration>;

export const NODES_STREAM = "CSI_NODES";
/** The topology segment key every node reports (one segment per node: its id). */
export const TOPOLOGY_KEY = "topology.nats.csi/node";
export const nodeSubjects = {
  /** Node ids are often host names with dots: base64url keeps them one token. */
  registration: (nodeId: string) => `csi.nodes.${nameToken(nodeId)}`,
  wildcard: "csi.nodes.*",
};

/** A node is healthy while its last heartbeat is younger than three intervals. */
export function nodeHealthy(r: NodeRegistration, now: Date): boolean {
  return now.getTime() - Date.parse(r.time) < 3 * r.heartbeatMs;
}

/**
 * Work a front-end sends a node without kubelet: stage/publish/unpublish/unstage a volume.
 * Delivered durably (stream CSI_NODE_WORK, one subject and one durable consumer per node),
 * so work sent while the agent is down is done when it comes back; every step is idempotent,
 * and the message is acknowledged only once its step is done, so the effect is exactly once.
 */
export const NodeWork = z.object({
  /** Unique id of this piece of work (also the JetStream message id, for de-duplication). */
  id: z.string().min(1).max(128),
  op: z.enum(["stage", "publish", "unpublish", "unstage"]),
  volumeId: z.string().min(1).max(128),
  stagingPath: z.string().min(1),
  targetPath: z.string().optional(),
  capability: Capability,
  readOnly: z.boolean().default(false),
  publishContext: z.record(z.string(), z.string()).default({}),
});
export type NodeWork = z.input<typeof NodeWork>;

export const NODE_WORK_STREAM = "CSI_NODE_WORK";
export const nodeWorkSubjects = {
  forNode: (nodeId: string) => `csi.nodework.${nameToken(nodeId)}`,
  wildcard: "csi.nodework.*",
  /** Durable consumer name of a node (consumer names may not contain '.'). */
  consumer: (nodeId: string) => `node-${nameToken(nodeId)}`,
};
