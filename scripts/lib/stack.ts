/**
 * The whole CSI stack on this machine, as `npm start` runs it and as `npm run sanity` runs it in
 * a temporary directory: nats-server + redis-server (unless URLs are given), a journal, a
 * controller (<runDir>/csi-controller.sock) and a node-agent (<runDir>/csi-node.sock).
 *
 *   const stack = await startStack({ dataDir, runDir });   // rejects after stopping what it started
 *   …
 *   await stack.stop();                                     // services first, then our servers
 *
 * The data and run directories are locked for the life of the stack (stack-lock.ts): a second
 * stack on them is refused (StackInUse) before it starts or writes anything.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DEFAULT_CLUSTERS, TOPOLOGY_KEY } from "@csi/contracts";
import { type LocalServer, startServer } from "./local-servers.js";
import { type ServiceProcess, spawnService } from "./processes.js";
import { StackLock } from "./stack-lock.js";

export interface StackOptions {
  dataDir: string;
  runDir: string;
  /** Use these servers instead of starting our own (data under <dataDir>/nats, <dataDir>/redis). */
  natsUrl?: string | undefined;
  redisUrl?: string | undefined;
  /** CSI node id of the node-agent (default: hostname). */
  nodeId?: string | undefined;
  /** Extra environment for the services. */
  env?: Record<string, string>;
  /** Every log line of the services (pino JSON). */
  onLine?: (line: string) => void;
  /** The stack's own steps ("started embedded nats-server", { url }). */
  onStep?: (msg: string, extra: Record<string, unknown>) => void;
  /** Abort the start-up: what was started is stopped and startStack rejects. */
  signal?: AbortSignal;
}

export interface Stack {
  controllerEndpoint: string;
  nodeEndpoint: string;
  nodeId: string;
  natsUrl: string;
  redisUrl: string;
  /** The clusters file the services run with. */
  clustersFile: string;
  services: ServiceProcess[];
  /** Settles with the exit code of the first service that exits (for whatever reason). */
  exited: Promise<number | null>;
  /** Stops the services, then the servers we started. Idempotent. */
  stop(): Promise<void>;
}

export async function startStack(opts: StackOptions): Promise<Stack> {
  mkdirSync(opts.dataDir, { recursive: true });
  mkdirSync(opts.runDir, { recursive: true });
  const lock = await StackLock.take([opts.dataDir, opts.runDir]); // StackInUse: nothing started, nothing written
  const servers: LocalServer[] = [];
  const services: ServiceProcess[] = [];
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await Promise.all(services.map((p) => p.stop()));
      await Promise.all(servers.map((s) => s.stop()));
      await lock.release();
    })();
    return stopped;
  };
  const started = async (p: ServiceProcess, role: string) => {
    services.push(p);
    await lock.add(role, p.child.pid);
  };
  const step = opts.onStep ?? (() => {});
  const server = async (kind: "nats" | "redis") => {
    const s = await startServer(kind, path.join(opts.dataDir, kind));
    servers.push(s);
    await lock.add(`${kind}-server`, s.pid);
    step(`started embedded ${kind}-server`, { url: s.url });
    opts.signal?.throwIfAborted();
    return s.url;
  };
  try {
    const natsUrl = opts.natsUrl || (await server("nats"));
    const redisUrl = opts.redisUrl || (await server("redis"));
    const nodeId = opts.nodeId || os.hostname();
    const clustersFile = opts.env?.CLUSTERS_FILE ?? process.env.CLUSTERS_FILE ?? writeLocalClusters(opts.runDir, nodeId);
    const env = {
      NATS_URL: natsUrl,
      REDIS_URL: redisUrl,
      DATA_DIR: opts.dataDir,
      LOG_LEVEL: process.env.LOG_LEVEL ?? "info",
      CLUSTERS_FILE: clustersFile,
      ...opts.env,
    };
    const controllerEndpoint = `unix://${path.join(opts.runDir, "csi-controller.sock")}`;
    const nodeEndpoint = `unix://${path.join(opts.runDir, "csi-node.sock")}`;
    const onLine = opts.onLine;
    // The journal first: the controller's Probe wants a journal to answer.
    await started(await spawnService("journal", env, { onLine }), "journal");
    opts.signal?.throwIfAborted();
    const rest = await Promise.allSettled([
      spawnService("controller", env, { args: ["--endpoint", controllerEndpoint], onLine }),
      spawnService("node-agent", env, { args: ["--endpoint", nodeEndpoint, "--nodeid", nodeId], onLine }),
    ]);
    for (const [i, r] of rest.entries()) if (r.status === "fulfilled") await started(r.value, i === 0 ? "controller" : "node-agent");
    for (const r of rest) if (r.status === "rejected") throw r.reason;
    opts.signal?.throwIfAborted();
    const exited = Promise.race(services.map((p) => p.exited));
    return { controllerEndpoint, nodeEndpoint, nodeId, natsUrl, redisUrl, clustersFile: env.CLUSTERS_FILE, services, exited, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * The built-in single cluster and pool, with the pool's topology set to this machine's node
 * segment: the pool's files live on this machine, so only its node-agent can attach them.
 */
function writeLocalClusters(runDir: string, nodeId: string): string {
  const file = path.join(runDir, "clusters.json");
  const clusters = DEFAULT_CLUSTERS.clusters.map((c) => ({ ...c, pools: c.pools.map((p) => ({ ...p, topology: [{ [TOPOLOGY_KEY]: nodeId }] })) }));
  writeFileSync(file, `${JSON.stringify({ ...DEFAULT_CLUSTERS, clusters }, null, 2)}\n`);
  return file;
}
