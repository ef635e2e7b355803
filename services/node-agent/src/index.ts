/**
 * Wiring of the node-agent: NATS (registration + heartbeat, durable node work, device
 * reports to the journals), the state file, the healer (which runs before anything is
 * served), and the CSI gRPC endpoint (Identity + Node).
 */
import path from "node:path";
import { type Clusters, holdingKey, inboxPrefix, MAX_HOLDING, NodeQueueMessage, nodeQueues } from "@csi/contracts";
import {
  closeWithin,
  connectNats,
  consumeQueue,
  csiIdentity,
  drainAll,
  ensureFleetStreams,
  type FleetAccess,
  fleetAccess,
  grpcServerMetrics,
  loadClusters,
  natsConnectOptions,
  Ops,
  packageVersion,
  startCsiServer,
  watchNats,
} from "@csi/runtime";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { claimChecker } from "./adapters/claims.js";
import { stallOnceBefore } from "./adapters/exec.js";
import { readMappingFacts } from "./adapters/rbd-mapping.js";
import { startHeartbeat } from "./adapters/registration.js";
import { StateFile } from "./adapters/state-file.js";
import { IoLimiter } from "./app/io-limiter.js";
import { NodeService } from "./app/node-service.js";
import { Reporter } from "./app/reporter.js";
import type { NodeAgentConfig } from "./config.js";
import { LimitsState } from "./domain/io-limits.js";
import { NodeState } from "./domain/node-state.js";
import { chooseMapping, type MappingChoice, nodeTopology } from "./domain/rbd-mapping.js";
import { NodeMetrics } from "./metrics.js";
import { NODE_CAPABILITIES, nodeHandlers, runWork, type Work } from "./rpc/node.js";

export { NodeAgentConfig, nodeAgentConfig } from "./config.js";

/** This package's version (its package.json): the NATS service's, the CSI plugin info's, csi_build_info's. */
export const NODE_AGENT_VERSION = packageVersion(new URL("../package.json", import.meta.url));

/**
 * Fault injection, for tests only: never in the configuration. Only the test harness's entry
 * (test-support/faults-main.ts, run by tools/testkit when a test asks for a fault) passes it.
 */
export interface NodeFaults {
  /** SIGKILL this process right after a step reports this device state. */
  crashAfter?: string | undefined;
  /** The first time this command is to run, a blocking `sleep` runs first, until the step's deadline kills it. */
  stallBefore?: string | undefined;
}

/** `ops`: where the metrics and readiness checks go (runMain serves them; in-process callers may leave it out). `faults`: tests only. */
export async function startNodeAgent(cfg: NodeAgentConfig, logger: Logger, ops = new Ops("node-agent"), faults: NodeFaults = {}) {
  const log = logger.child({ nodeId: cfg.nodeId });
  const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
  const role = { kind: "node" as const, nodeId: cfg.nodeId };
  const nc = await connectNats(
    natsConnectOptions(cfg, { name: `csi-node-${cfg.nodeId}`, inboxPrefix: inboxPrefix(role), maxReconnectAttempts: -1, noAsyncTraces: true }),
    (why) => log.warn(why),
  );
  watchNats(nc, ops);
  const metrics = new NodeMetrics(ops);
  const reporter = new Reporter(nc, cfg.nodeId, log);
  metrics.countSteps(reporter);
  if (faults.crashAfter) crashAfter(reporter, faults.crashAfter, log);
  if (faults.stallBefore) stallOnceBefore(faults.stallBefore);
  const rbdMapping = await detectRbdMapping(clusters, log);
  const topology = nodeTopology(cfg.nodeId, rbdMapping);
  // The registration is made after the service (it lists what the service holds): bound to it below.
  const registration = { announce: async () => {} };
  const svc = await openNodeService(cfg, clusters, reporter, metrics, log, { rbdMapping, announce: () => registration.announce() });
  const mappingWatch = svc.healer.watchMappings(MAPPING_CHECK_MS, (results) => metrics.healed(results));

  const streams = { replicas: cfg.streamReplicas };
  const fleet = fleetAccess(cfg.natsAccounts);
  await ensureFleetStreams(nc, fleet, streams);
  const heartbeat = register(nc, fleet, cfg, topology, log, () => svc.volumes().map((v) => holdingKey(v.clusterID, v.uuid)));
  await heartbeat.beat();
  registration.announce = () => heartbeat.announce(ANNOUNCE_TIMEOUT_MS);

  const work = await consumeWork(nc, svc, { nodeId: cfg.nodeId, log, fleet, metrics, streams });
  const server = await startCsiServer({
    endpoint: cfg.endpoint,
    log,
    observe: grpcServerMetrics(ops.registry),
    services: {
      // Probe answers "alive": the kubelet restarts the agent when it fails (through the livenessprobe
      // sidecar, docs/deploy.md "Probes"), which would not bring a registration back and would stop
      // the Node RPCs until NATS answers again. An unreadable registration is /readyz's (and logged).
      Identity: csiIdentity({ version: NODE_AGENT_VERSION, ready: async () => !nc.isClosed() }),
      Node: nodeHandlers(svc, { nodeId: cfg.nodeId, maxVolumes: cfg.maxVolumes, topology }),
    },
  });
  metrics.ready({ registered: heartbeat.registered, listening: () => server.listening });
  return {
    address: server.address,
    service: svc,
    /**
     * Graceful stop (docs/operations.md): stop pulling node work (what is not acknowledged is
     * delivered again to the next agent of this node) and refuse new gRPC calls; the node steps
     * in flight finish within the grace period (each has its own deadline too), the rest is cut
     * (the healer of the next start puts the node right); then the reports are flushed.
     */
    stop: async () => {
      heartbeat.stop();
      mappingWatch.stop();
      await drainAll(log, cfg.shutdownGraceMs, [work, server]);
      await closeWithin(
        () => reporter.flush(),
        () => {},
      );
      reporter.stop();
      await closeWithin(
        () => nc.drain(),
        () => nc.close(),
      );
    },
  };
}

/**
 * This node's work queue, each item run by runWork (its node, its subject and its volume's claim
 * checked first). The queue is made by the node itself where it may, else by a journal once it sees
 * the registration, or by `csictl fleet init` in the account layout (docs/security.md).
 */
function consumeWork(
  nc: NatsConnection,
  svc: NodeService,
  o: { nodeId: string; log: Logger; fleet: FleetAccess; metrics: NodeMetrics; streams: { replicas: number } },
) {
  const claimed = claimChecker(nc, o.nodeId);
  return consumeQueue(
    nc,
    nodeQueues.work(o.nodeId),
    NodeQueueMessage,
    (w: Work, from) => runWork(svc, w, { nodeId: o.nodeId, subject: from.subject, claimed }),
    o.log,
    {
      what: "node work",
      waitForQueue: true,
      at: o.fleet,
      onDropped: o.metrics.workDropped,
      ...o.streams,
    },
  );
}

/** The most a node step waits for its registration to be re-sent (NodeServiceDeps.announce); past it the next heartbeat sends it. */
const ANNOUNCE_TIMEOUT_MS = 2_000;

/** How often the running agent looks for dead rbd-fuse mounts of its volumes (one `stat` for all of them) and heals them. */
const MAPPING_CHECK_MS = 5_000;

/**
 * How this node maps RBD images, when its clusters file has an RBD pool (else undefined: it says
 * nothing about RBD). Detected once, at start; logged with what the machine offers.
 */
async function detectRbdMapping(clusters: Clusters, log: Logger): Promise<MappingChoice | undefined> {
  if (!clusters.clusters.some((c) => c.pools.some((p) => p.kind === "rbd"))) return undefined;
  const choice = chooseMapping(await readMappingFacts());
  if (choice.kind) log.info({ rbdMapping: choice.kind, available: choice.available }, choice.why);
  else log.warn({ available: choice.available }, `this node ${choice.why}: RBD volumes cannot be staged here`);
  return choice;
}

/** The node's service with its state loaded, healed (before serving: put back what should be there) and its I/O limits in force. */
async function openNodeService(
  cfg: NodeAgentConfig,
  clusters: Clusters,
  reporter: Reporter,
  metrics: NodeMetrics,
  log: Logger,
  more: { rbdMapping: MappingChoice | undefined; announce: () => Promise<void> },
): Promise<NodeService> {
  const { rbdMapping, announce } = more;
  const stateDir = path.resolve(cfg.stateDir ?? path.join(cfg.dataDir, "node", encodeURIComponent(cfg.nodeId)));
  const ioLimits = new IoLimiter({ file: new StateFile(path.join(stateDir, "io-limits.json"), LimitsState), cgroup: cfg.ioLimitsCgroup, reporter, log });
  await ioLimits.load();
  const svc = new NodeService({
    nodeId: cfg.nodeId,
    clusters,
    stateFile: new StateFile(path.join(stateDir, "state.json"), NodeState),
    reporter,
    log,
    ioLimits,
    forbiddenRoots: cfg.forbiddenRoots,
    opTimeoutMs: cfg.opTimeoutMs,
    announce,
    ...(rbdMapping ? { rbdMapping } : {}),
  });
  metrics.countOperations(svc);
  await svc.load();
  const healed = await svc.healer.heal(); // before serving: put back what should be there
  metrics.healed(healed);
  await ioLimits.reconcile(svc.volumes()); // devices may have new numbers after the heal
  log.info({ volumes: svc.volumes().length, healActions: healed.length }, "node state loaded");

  return svc;
}

/** The node's registration in the fleet, renewed by its heartbeat. */
function register(nc: NatsConnection, fleet: FleetAccess, cfg: NodeAgentConfig, topology: Record<string, string>, log: Logger, holding: () => string[]) {
  return startHeartbeat(
    nc,
    fleet,
    () => {
      const held = [...new Set(holding())];
      return {
        nodeId: cfg.nodeId,
        maxVolumes: cfg.maxVolumes,
        topology,
        capabilities: [...NODE_CAPABILITIES],
        version: NODE_AGENT_VERSION,
        time: new Date().toISOString(),
        heartbeatMs: cfg.heartbeatMs,
        // What this node holds by its own state: the journal trusts it over reports older than it.
        ...(held.length <= MAX_HOLDING ? { holding: held } : {}),
      };
    },
    log,
  );
}

/** Fault injection (NodeFaults.crashAfter, tests only): die by SIGKILL right after a step reports the given state. */
function crashAfter(reporter: Reporter, state: string, log: Logger): void {
  const report = reporter.report.bind(reporter);
  reporter.report = (r) => {
    report(r);
    if (r.state === state) {
      log.warn({ state }, "fault injection: crashing now");
      process.kill(process.pid, "SIGKILL");
    }
  };
}
