/**
 * csictl run as a child process, as `npx csictl` runs it: its exit status and output. The test's
 * own server variables (NATS_URL, REDIS_URL, …) are left out; `env` names the servers to use.
 */
import { execFile } from "node:child_process";
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

export function runCsictl(args: string[], env: NodeJS.ProcessEnv): Promise<CsictlRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CSICTL_BIN, ...args],
      { cwd: ROOT, env: { ...withoutServerEnv(process.env), ...env }, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
    );
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
