/**
 * Run the real service processes (node with tsx and the "source" condition, the service's
 * main.ts: no build step) the way an operator would, with the environment a test gives them. A
 * service is ready when it has written its READY_FILE (runtime ops/listener.ts: after its start,
 * once its readiness checks pass) — not when it logs a line, so any LOG_LEVEL works. Each gets
 * METRICS_ADDR=127.0.0.1:0 (any free port: many processes on one machine) and its own READY_FILE
 * unless the environment names them. stop = SIGTERM, kill = SIGKILL.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";

export const ROOT = path.resolve(import.meta.dirname, "../../..");

/**
 * Node's options for running a checkout's TypeScript with no build step (docs/building.md): the
 * workspaces' "source" export condition (their src/*.ts instead of dist/*.js) and tsx's loader.
 * Every process the tests, npm start and the bench start from sources gets them.
 */
export const SOURCE_NODE_ARGS: readonly string[] = ["--conditions=source", "--import", "tsx"];

/**
 * Where the services the tests spawn run from: their sources through tsx (the default, so a test
 * file run on its own always runs what it sees), or the JavaScript `npm run build` made when the
 * environment says `CSI_RUN_BUILT=1`. `npm test` (scripts/test.mjs) builds first and sets it:
 * tsx's loader costs every spawned process ~0.4 s of CPU, and a run spawns hundreds
 * (docs/building.md, "Tests run built services").
 */
export const RUN_BUILT = process.env.CSI_RUN_BUILT === "1";

/** How node runs a service's main: `[...node options, file]`. */
export function serviceArgv(service: ServiceName): string[] {
  return RUN_BUILT ? [serviceMain(service, "dist")] : [...SOURCE_NODE_ARGS, serviceMain(service)];
}

/**
 * The variables a test gives to start a service with fault injection: it runs then from its
 * test-support/faults-main.ts (from the sources; never built into dist/), the one place that reads
 * them. A service's production configuration has no fault knob.
 */
export const FAULT_ENVS: Partial<Record<ServiceName, readonly string[]>> = {
  journal: ["JOURNAL_CRASH_AFTER", "JOURNAL_FREEZE_AFTER", "JOURNAL_TEST_HOLD_COPY_MS"],
  "node-agent": ["NODE_CRASH_AFTER", "NODE_STALL_BEFORE"],
};

/** The command line of a service's faults entry, when `env` asks for a fault; else undefined. */
function faultsArgv(service: ServiceName, env: Record<string, string>): string[] | undefined {
  if (!FAULT_ENVS[service]?.some((k) => env[k])) return undefined;
  return [...SOURCE_NODE_ARGS, path.join(ROOT, "services", service, "test-support", "faults-main.ts")];
}

export interface ServiceProcess {
  child: ChildProcess;
  /** Every log line so far (pino JSON). */
  logs: string[];
  /**
   * Resolves with the first log line, so far or to come, that `match` accepts; rejects once the
   * process has exited without one. A line can come after the reply it goes with, so
   * tests wait for it rather than look once.
   */
  untilLog(match: (line: string) => boolean, what: string): Promise<string>;
  /** Where the service writes its READY_FILE. */
  readyFile: string;
  /** Its ops listener (/metrics, /healthz, /readyz), from the READY_FILE: http://127.0.0.1:port; unset before ready or with METRICS_ADDR=off. */
  readonly metricsUrl: string | undefined;
  stop(): Promise<number | null>;
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

export type ServiceName = "journal" | "controller" | "node-agent";

/**
 * A service's main file: its source (run with SOURCE_NODE_ARGS), or the JavaScript `npm run build`
 * makes of it (run by plain node, as the image does). The one place outside the services that
 * names their mains.
 */
export function serviceMain(service: ServiceName, build: "source" | "dist" = "source"): string {
  return build === "source" ? path.join(ROOT, "services", service, "src", "main.ts") : path.join(ROOT, "services", service, "dist", "main.js");
}

/** What a READY_FILE says, if it is there, complete, and written by process `pid`. */
export function readReadyFile(file: string, pid: number | undefined): { service: string; pid: number; metrics?: string } | undefined {
  try {
    const r = JSON.parse(readFileSync(file, "utf8")) as { service?: unknown; pid?: unknown; metrics?: unknown };
    if (r.pid !== pid || typeof r.service !== "string") return undefined;
    return { service: r.service, pid: r.pid as number, ...(typeof r.metrics === "string" ? { metrics: r.metrics } : {}) };
  } catch {
    return undefined;
  }
}

/** How often a starting service's READY_FILE is looked for. */
const READY_POLL_MS = 25;

/** How spawnService runs a service. */
export interface SpawnOptions {
  args?: string[];
  /** Wait until the service is ready (default); false: return at once (`ready` still settles). */
  waitReady?: boolean;
  onLine?: (line: string) => void;
  /** Not ready in this long: SIGKILL it and reject (default: wait for ever). */
  readyTimeoutMs?: number;
  /** Options for node itself, before the loader (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /**
   * Run what `npm run build` made instead of the sources, as the image does: plain node (no tsx,
   * no conditions) on dist/main.js under this directory (this repository, or a replay of the
   * image's final stage), which is also its working directory.
   */
  built?: string;
  /** A command the service is started under that execs it, so its pid stays the service's (a host's network namespace: `nsenter --net=… --`). */
  wrap?: readonly string[];
}

export async function spawnService(
  service: ServiceName,
  env: Record<string, string>,
  opts: SpawnOptions = {},
): Promise<ServiceProcess & { ready: Promise<void> }> {
  const own = env.READY_FILE ? undefined : await mkdtemp(path.join(os.tmpdir(), `csi-${service}-`));
  const readyFile = env.READY_FILE ?? path.join(own as string, "ready.json");
  rmSync(readyFile, { force: true });
  // One process (node, with the tsx loader for sources), so SIGKILL hits the service itself.
  const main =
    opts.built === undefined ? (faultsArgv(service, env) ?? serviceArgv(service)) : [path.join(opts.built, path.relative(ROOT, serviceMain(service, "dist")))];
  const [cmd, ...pre] = [...(opts.wrap ?? []), process.execPath];
  const child = spawn(cmd as string, [...pre, ...(opts.nodeArgs ?? []), ...main, ...(opts.args ?? [])], {
    cwd: opts.built ?? ROOT,
    env: { ...process.env, LOG_LEVEL: "info", METRICS_ADDR: "127.0.0.1:0", ...env, READY_FILE: readyFile },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output = readOutput(child, opts.onLine);
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => {
      if (own) rmSync(own, { recursive: true, force: true });
      resolve(code);
    }),
  );
  let metricsUrl: string | undefined;
  const ready = untilReady(service, child, { readyFile, exited, logs: output.logs, timeoutMs: opts.readyTimeoutMs }).then((url) => {
    metricsUrl = url;
  });
  if (opts.waitReady !== false) await ready;
  else ready.catch(() => {});
  const signal = async (sig: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    return exited;
  };
  return {
    child,
    logs: output.logs,
    untilLog: output.untilLog(service),
    readyFile,
    get metricsUrl() {
      return metricsUrl;
    },
    ready,
    exited,
    stop: () => signal("SIGTERM"),
    kill: async () => void (await signal("SIGKILL")),
  };
}

/** A child's output as lines (stdout and stderr): kept, handed to `onLine`, and waited for by `untilLog`. */
function readOutput(child: ChildProcess, onLine: ((line: string) => void) | undefined) {
  const logs: string[] = [];
  const waiters = new Set<(line: string) => void>();
  let closed: number | null | undefined; // set once the process and its output have ended
  let buf = "";
  const onData = (b: Buffer) => {
    buf += b.toString();
    let i = buf.indexOf("\n");
    while (i >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      logs.push(line);
      onLine?.(line);
      for (const w of waiters) w(line);
      i = buf.indexOf("\n");
    }
  };
  child.once("close", (code) => {
    closed = code;
  });
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const untilLog = (service: string) => (match: (line: string) => boolean, what: string) =>
    new Promise<string>((resolve, reject) => {
      const seen = logs.find(match);
      if (seen !== undefined) return resolve(seen);
      if (closed !== undefined) return reject(new Error(`${service} exited (${closed}) without logging ${what}`));
      const w = (line: string) => {
        if (!match(line)) return;
        waiters.delete(w);
        resolve(line);
      };
      waiters.add(w);
      // "close": after the last of its output, which "exit" may precede.
      child.once("close", (code) => {
        if (!waiters.delete(w)) return;
        reject(new Error(`${service} exited (${code}) without logging ${what}`));
      });
    });
  return { logs, untilLog };
}

/** Resolves once the child wrote its READY_FILE (to the metrics URL it names); rejects if it exits first, or (SIGKILLed) past `timeoutMs`. */
function untilReady(
  service: string,
  child: ChildProcess,
  o: { readyFile: string; exited: Promise<number | null>; logs: string[]; timeoutMs: number | undefined },
): Promise<string | undefined> {
  return new Promise<string | undefined>((resolve, reject) => {
    let done = false;
    const finish = (err?: Error, metrics?: string) => {
      if (done) return;
      done = true;
      clearInterval(poll);
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(metrics);
    };
    const poll = setInterval(() => {
      const r = readReadyFile(o.readyFile, child.pid);
      if (r) finish(undefined, r.metrics);
    }, READY_POLL_MS);
    o.exited.then((code) => finish(new Error(`${service} exited (${code}) before ready:\n${o.logs.join("\n")}`)));
    const timer =
      o.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            finish(new Error(`${service} not ready in ${o.timeoutMs} ms:\n${o.logs.slice(-20).join("\n")}`));
            child.kill("SIGKILL");
          }, o.timeoutMs);
  });
}

/** A journal of one cluster as the tests run it: on the given servers, with periodic catch-up off (tests see every catch-up they cause). */
export function spawnJournal(
  at: { natsUrl: string; redisUrl: string; clustersFile: string; cluster: string },
  extra: Record<string, string> = {},
): Promise<ServiceProcess> {
  return spawnService("journal", {
    NATS_URL: at.natsUrl,
    REDIS_URL: at.redisUrl,
    CLUSTERS_FILE: at.clustersFile,
    CLUSTER_ID: at.cluster,
    CATCHUP_EVERY_MS: "0",
    ...extra,
  });
}

export const isRunning = (p: ServiceProcess) => p.child.exitCode === null && p.child.signalCode === null;

/** Ends a process whatever its state: wakes it if frozen, SIGTERM, then SIGKILL after `graceMs`. */
export async function endProcess(p: ServiceProcess, graceMs = 5000): Promise<void> {
  if (!isRunning(p)) return;
  p.child.kill("SIGCONT");
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), graceMs);
  });
  try {
    if ((await Promise.race([p.stop(), late])) === "late") await p.kill();
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A pool of a test clusters file: its name, or its name and the topology segments it is reachable
 * from (file pools, rooted under the file's directory), or an RBD pool (`rbdTestPool`).
 */
export type TestPool = string | { name: string; topology: Record<string, string>[] } | RbdTestPool;

export interface RbdTestPool {
  name: string;
  kind: "rbd";
  monitors: string[];
  cephPool: string;
  user: string;
  keyFile: string;
  maxCloneDepth?: number;
}

/** An RBD pool of a test cluster (startCeph's), as a clusters file names it. */
export function rbdTestPool(
  name: string,
  ceph: { monitors: string[]; pools: string[]; user: string; keyFile: string },
  more: Partial<RbdTestPool> = {},
): RbdTestPool {
  return { name, kind: "rbd", monitors: ceph.monitors, cephPool: ceph.pools[0] ?? "rbd", user: ceph.user, keyFile: ceph.keyFile, ...more };
}

/** A clusters file for tests: clusters with one or more pools rooted under `dir` (the first is the default). */
export async function writeClustersFile(dir: string, clusters: { clusterID: string; pools: TestPool[] }[]): Promise<string> {
  const file = path.join(dir, "clusters.json");
  const body = {
    defaultCluster: clusters[0]?.clusterID,
    clusters: clusters.map((c) => ({
      clusterID: c.clusterID,
      pools: c.pools.map((p, i) => {
        const { name, ...more } = typeof p === "string" ? { name: p } : p;
        return { name, id: i + 1, ...("kind" in more ? {} : { root: path.join(dir, "pools", c.clusterID, name) }), ...more };
      }),
    })),
  };
  await writeFile(file, JSON.stringify(body, null, 2));
  return file;
}
