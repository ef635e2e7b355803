/**
 * Wiring of the node-agent: NATS and the CSI gRPC endpoint (Identity + Node).
 * The Node RPCs (stage/publish with loop devices and mounts), the NATS work queue, device
 * reports and the healer come with the node-agent issue; until then they answer UNIMPLEMENTED.
 */
import { csiIdentity, PLUGIN_NAME, startCsiServer, TOPOLOGY_KEY } from "@csi/contracts";
import { ensureNodesStream, startHeartbeat } from "./adapters/registration.js";
import { connect } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { NodeAgentConfig } from "./config.js";

export { nodeAgentConfig, NodeAgentConfig } from "./config.js";

export const NODE_AGENT_VERSION = "0.1.0";

export async function startNodeAgent(cfg: NodeAgentConfig, logger: Logger) {
  const log = logger.child({ nodeId: cfg.nodeId });
  const nc = await connect({ servers: cfg.natsUrl, name: `csi-node-${cfg.nodeId}`, maxReconnectAttempts: -1 });
  await ensureNodesStream(nc);
  const heartbeat = startHeartbeat(
    nc,
    () => ({
      nodeId: cfg.nodeId,
      maxVolumes: cfg.maxVolumes,
      topology: { [TOPOLOGY_KEY]: cfg.nodeId },
      capabilities: [],
      version: NODE_AGENT_VERSION,
      time: new Date().toISOString(),
      heartbeatMs: cfg.heartbeatMs,
    }),
    log,
  );
  await heartbeat.beat();
  const server = await startCsiServer({
    endpoint: cfg.endpoint,
    log,
    services: {
      Identity: csiIdentity({ name: PLUGIN_NAME, version: NODE_AGENT_VERSION, capabilities: [], ready: async () => !nc.isClosed() }),
      Node: {},
    },
  });
  return {
    address: server.address,
    stop: async () => {
      heartbeat.stop();
      await server.close();
      await nc.drain().catch(() => {});
    },
  };
}
