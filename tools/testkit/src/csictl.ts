/**
 * csictl run as a child process, as `npx csictl` runs it: its exit status and output. The test's
 * own server variables (NATS_URL, REDIS_URL, …) are left out; `env` names the servers to use.
 */
import { execFile, spawn } from "node:child_process";
import path from "node:path";
import type { JournalTestEnv } from "./journal-env.js";
import { withoutServerEnv } from "./npm-start.js";
import { ROOT } from "./processes.js";

/** csictl's bin (`npx csictl`): in a checkout it runs the sources through tsx. */
export const CSICTL_BIN = path.join(ROOT, "tools/csictl/bin/csictl.mjs");
/** csictl as `npm run build` makes it: what the image runs with plain node. */
export const CSICTL_DIST = path.join(ROOT, "tools/csictl/dist/main.js");

export interface CsictlRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * csictl with `args`, its output collected. `input`: what it reads on stdin (else none: stdin is
 * closed at once). `timeoutMs`: a csictl that has not exited by then is killed and reported as
 * code -1 (a hang is a failure, not a test that waits for ever).
 */
export function runCsictl(args: string[], env: NodeJS.ProcessEnv, opts: { input?: string | Buffer; timeoutMs?: number } = {}): Promise<CsictlRun> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CSICTL_BIN, ...args],
      {
        cwd: ROOT,
        env: { ...withoutServerEnv(process.env), ...env },
        encoding: "utf8",
        maxBuffer: 64 * 1024 * 1024,
        ...(opts.timeoutMs ? { timeout: opts.timeoutMs, killSignal: "SIGKILL" as const } : {}),
      },
      (err, stdout, stderr) => {
        const killed = !!(err as { killed?: boolean } | null)?.killed;
        resolve({ code: killed ? -1 : err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
      },
    );
    child.stdin?.end(opts.input ?? "");
  });
}

/** csictl against a journal test environment's servers and clusters file, for `cluster`. */
export function csictlOf(j: () => JournalTestEnv, cluster: string): (...args: string[]) => Promise<CsictlRun> {
  return (...args) =>
    runCsictl(["--cluster", cluster, ...args], {
      NATS_URL: j().servers.nats.url,
      REDIS_URL: j().servers.redis.url,
      CLUSTERS_FILE: j().clustersFile,
      RUN_DIR: j().servers.dir,
    });
}

/** csictl against the `npm start` stack of `runDir` (its stack.json); `json`: with --json, exit 0 asserted, the answer parsed. */
export function csictlAt(runDir: string) {
  const csictl = (...args: string[]) => runCsictl(args, { RUN_DIR: runDir }, { timeoutMs: 120_000 });
  const json = async <T>(...args: string[]): Promise<T> => {
    const r = await csictl("--json", ...args);
    if (r.code !== 0) throw new Error(`csictl ${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  return { csictl, json };
}

/**
 * A csictl that runs on (`history --follow`) against the stack of `runDir`: its output so far, and
 * `until`, which resolves once what it wrote makes `ok` true (waits on its output, not on time).
 */
export function spawnCsictl(args: string[], runDir: string) {
  const child = spawn(process.execPath, [CSICTL_BIN, ...args], {
    cwd: ROOT,
    env: { ...withoutServerEnv(process.env), RUN_DIR: runDir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const seen = { out: "", err: "" };
  const waiters = new Set<() => void>();
  const onData = (k: "out" | "err") => (b: Buffer) => {
    seen[k] += b.toString();
    for (const w of waiters) w();
  };
  child.stdout?.on("data", onData("out"));
  child.stderr?.on("data", onData("err"));
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const until = (ok: (s: { out: string; err: string }) => boolean) =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (!ok(seen)) return;
        waiters.delete(check);
        resolve();
      };
      waiters.add(check);
      check();
    });
  return { child, exited, seen, until };
}
