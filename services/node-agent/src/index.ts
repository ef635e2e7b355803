/**
 * Wiring of the node-agent: NATS (registration + heartbeat, durable node work, device
 * reports to the journals), the state file, the healer (which runs before anything is
 * served), and the CSI gRPC endpoint (Identity + Node).
 */
import path from "node:path";
import { invalidArgument, NodeQueueMessage, nodeQueues, TOPOLOGY_KEY, unsupported } from "@csi/contracts";
import { consumeQueue, csiIdentity, loadClusters, startCsiServer } from "@csi/runtime";
import { validateCoPath } from "./adapters/paths.js";
import { connect } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { z } from "zod";
import { ensureNodesStream, startHeartbeat } from "./adapters/registration.js";
import { StateFile } from "./adapters/state-file.js";
import { IoLimiter } from "./app/io-limiter.js";
import { NodeService } from "./app/node-service.js";
import { Reporter } from "./app/reporter.js";
import type { NodeAgentConfig } from "./config.js";
import { LimitsState } from "./domain/io-limits.js";
import { NodeState } from "./domain/node-state.js";
import { NODE_CAPABILITIES, nodeHandlers } from "./rpc/node.js";

export { nodeAgentConfig, NodeAgentConfig } from "./config.js";

export const NODE_AGENT_VERSION = "0.1.0";

export async function startNodeAgent(cfg: NodeAgentConfig, logger: Logger) {
  const log = logger.child({ nodeId: cfg.nodeId });
  const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
  const nc = await connect({ servers: cfg.natsUrl, name: `csi-node-${cfg.nodeId}`, maxReconnectAttempts: -1 });
  const reporter = new Reporter(nc, cfg.nodeId, log);
  if (cfg.crashAfter) crashAfter(reporter, cfg.crashAfter, log);
  const stateDir = path.resolve(cfg.stateDir ?? path.join(cfg.dataDir, "node", encodeURIComponent(cfg.nodeId)));
  const ioLimits = new IoLimiter({ file: new StateFile(path.join(stateDir, "io-limits.json"), LimitsState), cgroup: cfg.ioLimitsCgroup, reporter, log });
  await ioLimits.load();
  const svc = new NodeService({ nodeId: cfg.nodeId, clusters, stateFile: new StateFile(path.join(stateDir, "state.json"), NodeState), reporter, log, ioLimits });
  await svc.load();
  const healed = await svc.heal(); // before serving: put back what should be there
  await ioLimits.reconcile(svc.volumes()); // devices may have new numbers after the heal
  log.info({ volumes: svc.volumes().length, healActions: healed.length }, "node state loaded");

  await ensureNodesStream(nc);
  const heartbeat = startHeartbeat(
    nc,
    () => ({
      nodeId: cfg.nodeId,
      maxVolumes: cfg.maxVolumes,
      topology: { [TOPOLOGY_KEY]: cfg.nodeId },
      capabilities: [...NODE_CAPABILITIES],
      version: NODE_AGENT_VERSION,
      time: new Date().toISOString(),
      heartbeatMs: cfg.heartbeatMs,
    }),
    log,
  );
  await heartbeat.beat();

  const work = await consumeQueue(nc, nodeQueues.work(cfg.nodeId), NodeQueueMessage, (w: Work) => runWork(svc, w), log);
  const server = await startCsiServer({
    endpoint: cfg.endpoint,
    log,
    services: {
      Identity: csiIdentity({ version: NODE_AGENT_VERSION, ready: async () => !nc.isClosed() }),
      Node: nodeHandlers(svc, { nodeId: cfg.nodeId, maxVolumes: cfg.maxVolumes }),
    },
  });
  return {
    address: server.address,
    service: svc,
    stop: async () => {
      heartbeat.stop();
      await work.stop();
      await server.close();
      await reporter.flush();
      reporter.stop();
      await nc.drain().catch(() => {});
    },
  };
}

type Work = z.output<typeof NodeQueueMessage>;

/** NATS work runs the same operations as kubelet's gRPC calls, with the same path checks. */
function runWork(svc: NodeService, raw: Work): Promise<void> {
  const via = "nats" as const;
  if (raw.op === "limits") return svc.limits({ volumeId: raw.volumeId, mutableParameters: raw.mutableParameters, seq: raw.seq, via });
  const why = unsupported(raw.capability);
  if (why) throw invalidArgument(why);
  const w = {
    ...raw,
    stagingPath: validateCoPath(raw.stagingPath, "stagingPath"),
    ...(raw.targetPath ? { targetPath: validateCoPath(raw.targetPath, "targetPath") } : {}),
  };
  if ((w.op === "publish" || w.op === "unpublish") && !w.targetPath) throw invalidArgument(`${w.op} needs targetPath`);
  switch (w.op) {
    case "stage":
      return svc.stage({ volumeId: w.volumeId, stagingPath: w.stagingPath, capability: w.capability, publishContext: w.publishContext, via });
    case "publish":
      return svc.publish({ volumeId: w.volumeId, stagingPath: w.stagingPath, targetPath: w.targetPath ?? "", readOnly: w.readOnly, via });
    case "unpublish":
      return svc.unpublish({ volumeId: w.volumeId, targetPath: w.targetPath ?? "", via });
    case "unstage":
      return svc.unstage({ volumeId: w.volumeId, stagingPath: w.stagingPath, via });
    default: {
      const never: never = w.op;
      throw new Error(`unknown node work ${never}`);
    }
  }
}

/** Fault injection (tests only): die by SIGKILL right after a step reports the given state. */
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
