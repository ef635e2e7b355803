/**
 * Run the real service processes (tsx + the service's main.ts) the way an operator would, with
 * the environment a test gives them. Waits for the service's "ready" log line; stop = SIGTERM,
 * kill = SIGKILL.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import path from "node:path";

export const ROOT = path.resolve(import.meta.dirname, "../..");

export interface ServiceProcess {
  child: ChildProcess;
  /** Every log line so far (pino JSON). */
  logs: string[];
  stop(): Promise<number | null>;
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

export function serviceMain(service: "journal" | "controller" | "node-agent"): string {
  return path.join(ROOT, "services", service, "src", "main.ts");
}

export async function spawnService(
  service: "journal" | "controller" | "node-agent",
  env: Record<string, string>,
  opts: {
    args?: string[];
    readyLine?: RegExp;
    waitReady?: boolean;
    onLine?: (line: string) => void;
    /** Not ready in this long: SIGKILL it and reject (default: wait for ever). */
    readyTimeoutMs?: number;
    /** Options for node itself, before the loader (e.g. --cpu-prof). */
    nodeArgs?: string[];
  } = {},
): Promise<ServiceProcess> {
  // One process (node with the tsx loader), so SIGKILL hits the service itself.
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), "--import", "tsx", serviceMain(service), ...(opts.args ?? [])], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logs: string[] = [];
  let buf = "";
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const ready = opts.readyLine ?? /serving|listening/;
  let readied: () => void = () => {};
  const readyOrExit = Promise.race([exited, new Promise<void>((r) => (readied = r))]);
  const readyP = new Promise<void>((resolve, reject) => {
    const onData = (b: Buffer) => {
      buf += b.toString();
      let i = buf.indexOf("\n");
      while (i >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        logs.push(line);
        opts.onLine?.(line);
        if (ready.test(line)) {
          resolve();
          readied();
        }
        i = buf.indexOf("\n");
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    exited.then((code) => reject(new Error(`${service} exited (${code}) before ready:\n${logs.join("\n")}`)));
    if (opts.readyTimeoutMs !== undefined) {
      const timer = setTimeout(() => {
        reject(new Error(`${service} not ready in ${opts.readyTimeoutMs} ms:\n${logs.slice(-20).join("\n")}`));
        child.kill("SIGKILL");
      }, opts.readyTimeoutMs);
      readyOrExit.finally(() => clearTimeout(timer));
    }
  });
  if (opts.waitReady !== false) await readyP;
  else readyP.catch(() => {});
  const signal = async (sig: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    return exited;
  };
  return { child, logs, exited, stop: () => signal("SIGTERM"), kill: async () => void (await signal("SIGKILL")) };
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

/** A pool of a test clusters file: its name, or its name and the topology segments it is reachable from. */
export type TestPool = string | { name: string; topology: Record<string, string>[] };

/** A clusters file for tests: clusters with one or more pools rooted under `dir` (the first is the default). */
export async function writeClustersFile(dir: string, clusters: { clusterID: string; pools: TestPool[] }[]): Promise<string> {
  const file = path.join(dir, "clusters.json");
  const body = {
    defaultCluster: clusters[0]?.clusterID,
    clusters: clusters.map((c) => ({
      clusterID: c.clusterID,
      pools: c.pools.map((p, i) => {
        const { name, ...more } = typeof p === "string" ? { name: p } : p;
        return { name, id: i + 1, root: path.join(dir, "pools", c.clusterID, name), ...more };
      }),
    })),
  };
  await writeFile(file, JSON.stringify(body, null, 2));
  return file;
}
