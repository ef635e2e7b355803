/** The last heartbeat of nodes (their registrations in CSI_NODES, kept one per node): what `verify` judges claims by. */
import { nodeRegistration } from "@csi/runtime";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Heartbeat } from "../domain/audit.js";

/** Unavailable when the stream cannot be read: a node is never judged silent because NATS was. */
export async function lastHeartbeats(nc: NatsConnection, nodeIds: string[]): Promise<Map<string, Heartbeat | undefined>> {
  const jsm = jetstreamManager(nc);
  const regs = await Promise.all(nodeIds.map((nodeId) => nodeRegistration(jsm, nodeId)));
  return new Map(nodeIds.map((nodeId, i) => [nodeId, regs[i] ? { time: regs[i].time, heartbeatMs: regs[i].heartbeatMs } : undefined]));
}
