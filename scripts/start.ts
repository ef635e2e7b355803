/**
 * `npm start`: the whole system on this machine (scripts/lib/stack.ts).
 *
 *  - NATS_URL / REDIS_URL unset → start our own nats-server (JetStream) and redis-server on free
 *    ports with data under ./.data/ (stopped on exit); set → use those servers.
 *  - Starts a journal per cluster (one; CLUSTERS=2 for two; or those of CLUSTERS_FILE), the
 *    controller (unix://$PWD/run/csi-controller.sock) and one node-agent
 *    (unix://$PWD/run/csi-node.sock, node id = hostname), logs on stdout: pino JSON, or with
 *    LOG_FORMAT=pretty one line a person reads — the services' and npm start's own alike.
 *  - A service counts as started once it has written its READY_FILE (<runDir>/<name>.ready.json:
 *    its readiness checks passed), so the stack comes up at any LOG_LEVEL. Each service's
 *    /metrics, /healthz and /readyz listen on 127.0.0.1 at a free port.
 *  - Once ready, writes the endpoints and each service's metrics URL to <runDir>/stack.json, where
 *    csictl finds the local stack (tools/csictl/src/stack-file.ts); the file is removed on stop.
 *  - SECURE=1: locked down (docs/security.md): credentials for every role generated into
 *    <runDir>/auth (0600), our nats-server and redis-server started with them, each service with
 *    its own; csictl finds them through stack.json (its authDir), which holds no secret.
 *  - `npm start -- --ha` (or HA=1): replicated servers instead (lib/ha-servers.ts): a 3-node NATS
 *    cluster with JetStream on every node, a Redis primary + replica behind 3 Sentinels, streams with
 *    3 replicas, 2 journal replicas; their data under <dataDir>/ha (docs/operations.md, "Beyond one
 *    machine").
 *  - `npm start -- --ceph` (or CEPH=1): a local single-node Ceph (one monitor, manager and OSD,
 *    testkit's startCeph) with its data under <dataDir>/ceph, started again over that data by the
 *    next start; the cluster's default pool is an RBD pool on it (`ceph`; the file pool `default`
 *    beside it). Needs Ceph's Debian packages (docs/backends.md); not tried with --ha or SECURE=1.
 *  - Ctrl-C / SIGTERM stops everything cleanly; the sockets are removed.
 *  - The data and run directories are locked while the stack runs (lib/stack-lock.ts): a second
 *    `npm start` on them exits with status 1 and a message naming the holder, touching nothing.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { removeStackFile, writeStackFile } from "@csi/cli/stack-file";
import { createLogger, LOG_FORMATS, type LogFormat, redactUrl } from "@csi/runtime";
import { ROOT } from "@csi/testkit";
import { startStack } from "./lib/stack.js";
import { StackInUse } from "./lib/stack-lock.js";

// npm start's own lines (its steps, the stack's, `csi stack ready`) in the services' LOG_FORMAT; at info
// whatever LOG_LEVEL says (they are npm start's output: LOG_LEVEL=warn quiets the services, not the
// line that says the stack is ready), or more with a more verbose LOG_LEVEL (debug, trace).
const format = process.env.LOG_FORMAT;
const log = createLogger(
  "start",
  ["debug", "trace"].includes(process.env.LOG_LEVEL ?? "") ? (process.env.LOG_LEVEL as string) : "info",
  1,
  (LOG_FORMATS as readonly string[]).includes(format ?? "") ? (format as LogFormat) : "json",
);
const say = (msg: string, extra: Record<string, unknown> = {}) => log.info(extra, msg);

const dataDir = path.resolve(process.env.DATA_DIR ?? path.join(ROOT, ".data"));
const runDir = path.resolve(process.env.RUN_DIR ?? path.join(ROOT, "run"));
let ha: boolean;
let ceph: boolean;
try {
  const { values } = parseArgs({ options: { ha: { type: "boolean" }, ceph: { type: "boolean" } }, strict: true });
  ha = values.ha === true || process.env.HA === "1";
  ceph = values.ceph === true || process.env.CEPH === "1";
} catch (err) {
  process.stderr.write(`npm start: ${(err as Error).message}\nusage: npm start [-- --ha] [-- --ceph]\n`);
  process.exit(2);
}
const abort = new AbortController();
const starting = startStack({
  dataDir,
  runDir,
  natsUrl: process.env.NATS_URL,
  redisUrl: process.env.REDIS_URL,
  nodeId: process.env.NODE_ID,
  clusters: process.env.CLUSTERS,
  secure: process.env.SECURE === "1",
  ha,
  ceph,
  onLine: (line) => process.stdout.write(`${line}\n`),
  onStep: say,
  signal: abort.signal,
});
let stopping = false;

async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    say("stopping the stack");
    removeStackFile(runDir);
    abort.abort();
    await (await starting.catch(() => undefined))?.stop();
    say("stopped");
  }
  process.exit(code);
}
process.once("SIGINT", () => void stopAll(0));
process.once("SIGTERM", () => void stopAll(0));

try {
  const stack = await starting;
  stack.exited.then((code) => {
    if (stopping) return;
    log.warn({ code }, "a service exited; stopping");
    void stopAll(1);
  });
  const { controllerEndpoint: controller, nodeEndpoint: node, natsUrl: nats, redisUrl: redis, nodeId, clustersFile, clusters, authDir, redisSentinels } = stack;
  const sentinels = redisSentinels ? { redisSentinels, redisMasterName: stack.redisMasterName } : {};
  const metrics = stack.metricsUrls();
  const stackFile = writeStackFile(runDir, {
    pid: process.pid,
    startedAt: new Date().toISOString(),
    controllerEndpoint: controller,
    nodeEndpoint: node,
    nodeId,
    natsUrl: nats,
    redisUrl: redis,
    ...sentinels,
    clustersFile,
    dataDir,
    metrics,
    ...(authDir ? { authDir } : {}),
  });
  // A URL given with user:password in it is never printed as it is.
  say("csi stack ready", {
    controller,
    node,
    nats: redactUrl(nats),
    redis: redactUrl(redis),
    ...sentinels,
    nodeId,
    clusters,
    metrics,
    stackFile,
    secure: !!authDir,
    ha,
    ...(stack.servers.ceph
      ? { ceph: { dir: stack.servers.ceph.dir, monitors: stack.servers.ceph.monitors, conf: stack.servers.ceph.conf, pids: stack.servers.ceph.pids() } }
      : {}),
  });
} catch (err) {
  if (err instanceof StackInUse) {
    log.error({ dir: err.dir }, "data directory in use");
    process.stderr.write(`npm start: ${err.message}\n`);
    process.exit(1);
  }
  if (!stopping) {
    log.error({ err: String((err as Error)?.stack ?? err) }, "could not start the stack");
    await stopAll(1);
  }
}
