/** The last heartbeat of nodes (their registrations in CSI_NODES, kept one per node): what `verify` judges claims by. */
import { NODES_STREAM, NodeRegistration, nodeSubjects } from "@csi/contracts";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Heartbeat } from "../domain/audit.js";

export async function lastHeartbeats(nc: NatsConnection, nodeIds: string[]): Promise<Map<string, Heartbeat | undefined>> {
  const jsm = await jetstreamManager(nc);
  const out = new Map<string, Heartbeat | undefined>();
  await Promise.all(
    nodeIds.map(async (nodeId) => {
      const msg = await jsm.streams.getMessage(NODES_STREAM, { last_by_subj: nodeSubjects.registration(nodeId) }).catch(() => null);
      const reg = msg ? NodeRegistration.safeParse(msg.json()) : undefined;
      out.set(nodeId, reg?.success && reg.data.nodeId === nodeId ? { time: reg.data.time, heartbeatMs: reg.data.heartbeatMs } : undefined);
    }),
  );
  return out;
}
