/**
 * Wiring of the controller: NATS (to reach each cluster's journal) and the CSI gRPC endpoint
 * (Identity + Controller + GroupController). Stateless: any number of replicas can run; node
 * registrations are read from the CSI_NODES stream.
 */
import { inboxPrefix, subjects } from "@csi/contracts";
import { csiIdentity, JournalClient, loadClusters, natsConnectOptions, startCsiServer, withCsiBounds } from "@csi/runtime";
import { connect } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { NodeWorkSender } from "./adapters/node-work.js";
import { NodeDirectory } from "./adapters/nodes.js";
import type { ControllerConfig } from "./config.js";
import { controllerHandlers } from "./rpc/controller.js";
import { groupControllerHandlers } from "./rpc/group-controller.js";

export { ControllerConfig, controllerConfig } from "./config.js";

export const CONTROLLER_VERSION = "0.1.0";

export interface RunningController {
  address: string;
  stop(): Promise<void>;
}

export async function startController(cfg: ControllerConfig, logger: Logger): Promise<RunningController> {
  const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
  const nc = await connect(natsConnectOptions(cfg, { name: "csi-controller", inboxPrefix: inboxPrefix({ kind: "controller" }), maxReconnectAttempts: -1 }));
  const journal = new JournalClient(nc, cfg.journalTimeoutMs);
  const nodes = new NodeDirectory(nc);
  const times = { quietMs: cfg.journalQuietMs, fanOutMs: cfg.clusterFanOutTimeoutMs };

  /** Ready when NATS is up and a journal replica of the default cluster answers a service ping. */
  const ready = async () => {
    if (nc.isClosed()) return false;
    try {
      await nc.request(`$SRV.PING.${subjects.journalServiceName(clusters.defaultCluster)}`, "", { timeout: 1000 });
      return true;
    } catch {
      return false;
    }
  };

  const server = await startCsiServer({
    endpoint: cfg.endpoint,
    log: logger,
    services: {
      Identity: csiIdentity({ version: CONTROLLER_VERSION, ready }),
      // Every request is checked against CSI's size limits before its handler sees it.
      Controller: withCsiBounds(controllerHandlers({ clusters, journal, times, nodes, nodeWork: new NodeWorkSender(nc) })),
      GroupController: withCsiBounds(groupControllerHandlers({ clusters, journal, times })),
    },
  });
  return {
    address: server.address,
    stop: async () => {
      await server.close();
      await nc.drain().catch(() => {});
    },
  };
}
