/**
 * The streams every node shares: CSI_NODES (each node's last registration) and CSI_NODE_WORK (one
 * durable work queue per node). Journals make them at start; a node-agent makes them too where it
 * may (an open NATS), so either may start first. A locked-down node-agent may not (docs/security.md):
 * it finds them made by a journal.
 */
import { NODE_WORK_STREAM, NODES_STREAM, nodeSubjects, nodeWorkSubjects } from "@csi/contracts";
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { ensureQueueStream, ensureStream, type StreamOptions } from "./durable-queue.js";

export async function ensureNodeStreams(nc: NatsConnection, o: StreamOptions = {}): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await ensureStream(jsm, {
    name: NODES_STREAM,
    subjects: [nodeSubjects.wildcard],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    max_msgs_per_subject: 1,
    num_replicas: o.replicas ?? 1,
  });
  await ensureQueueStream(jsm, { stream: NODE_WORK_STREAM, subjects: [nodeWorkSubjects.wildcard] }, o);
}
