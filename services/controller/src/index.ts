/**
 * Wiring of the controller: NATS (to reach each cluster's journal) and the CSI gRPC endpoint
 * (Identity + Controller + GroupController). Stateless: any number of replicas can run; node
 * registrations are read from the CSI_NODES stream.
 */
import { inboxPrefix } from "@csi/contracts";
import {
  closeWithin,
  connectNats,
  csiIdentity,
  drainAll,
  fleetAccess,
  grpcServerMetrics,
  JournalClient,
  journalAnswers,
  loadClusters,
  natsConnectOptions,
  Ops,
  startCsiServer,
  watchNats,
  withCsiBounds,
} from "@csi/runtime";
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

/** `ops`: where the metrics and readiness checks go (runMain serves them; in-process callers may leave it out). */
export async function startController(cfg: ControllerConfig, logger: Logger, ops = new Ops("controller")): Promise<RunningController> {
  const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
  const nc = await connectNats(
    natsConnectOptions(cfg, { name: "csi-controller", inboxPrefix: inboxPrefix({ kind: "controller" }), maxReconnectAttempts: -1, noAsyncTraces: true }),
    (why) => logger.warn(why),
  );
  watchNats(nc, ops);
  // Ready (/readyz) when a journal replica of every cluster answers; the CSI Probe asks the default cluster only.
  ops.readiness.add("journals", async () => {
    const ids = clusters.clusters.map((c) => c.clusterID);
    const answers = await Promise.all(ids.map((id) => journalAnswers(nc, id)));
    const silent = ids.filter((_, i) => !answers[i]);
    return silent.length === 0 || `no journal replica answers for cluster ${silent.slice(0, 5).join(", ")}${silent.length > 5 ? ", ..." : ""}`;
  });
  const journal = new JournalClient(nc, cfg.journalTimeoutMs);
  const nodes = new NodeDirectory(nc, fleetAccess(cfg.natsAccounts));
  const times = { quietMs: cfg.journalQuietMs, fanOutMs: cfg.clusterFanOutTimeoutMs };

  /**
   * Probe answers "alive" (its NATS connection is not closed for good): the kubelet restarts the
   * controller when it fails (through the livenessprobe sidecar, docs/deploy.md "Probes"), which
   * would not bring a journal back. Journals that do not answer are /readyz's.
   */
  const ready = async () => !nc.isClosed();

  const server = await startCsiServer({
    endpoint: cfg.endpoint,
    log: logger,
    observe: grpcServerMetrics(ops.registry),
    services: {
      Identity: csiIdentity({ version: CONTROLLER_VERSION, ready }),
      // Every request is checked against CSI's size limits before its handler sees it.
      Controller: withCsiBounds(controllerHandlers({ clusters, journal, times, nodes, nodeWork: new NodeWorkSender(nc) })),
      GroupController: withCsiBounds(groupControllerHandlers({ clusters, journal, times })),
    },
  });
  return {
    address: server.address,
    /**
     * Graceful stop (docs/operations.md): refuse new gRPC calls (the CO retries UNAVAILABLE, on a
     * new process or another replica), let those in flight finish within the grace period (their
     * journal commands need NATS, so it is drained only after), cut the rest, remove the socket.
     */
    stop: async () => {
      await drainAll(logger, cfg.shutdownGraceMs, [server]);
      await closeWithin(
        () => nc.drain(),
        () => nc.close(),
      );
    },
  };
}
