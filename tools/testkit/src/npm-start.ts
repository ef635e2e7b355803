/**
 * `npm start` (scripts/start.ts) as a child process with its data and run directories in a
 * temporary directory: started, waited for ("csi stack ready"), stopped with SIGTERM (SIGKILL
 * only if it does not stop) and its directory removed when the test ends.
 */
import { spawn } from "node:child_process";
import { rm } from "node:fs/promises";
import path from "node:path";
import type { TestContext } from "node:test";
import { ROOT, SOURCE_NODE_ARGS } from "./processes.js";
import { tempDir } from "./servers.js";

/** What the test must undo when it ends, pass or fail: last registered, first undone. */
export function cleanupsOf(t: TestContext): (() => Promise<void>)[] {
  const cleanups: (() => Promise<void>)[] = [];
  t.after(async () => {
    for (const c of cleanups.reverse()) await c();
  });
  return cleanups;
}

/** The environment without the variables that would point csictl or npm start at other servers. */
export function withoutServerEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const k of ["NATS_URL", "REDIS_URL", "CLUSTERS_FILE", "CSI_ENDPOINT", "CSI_NODE_ENDPOINT"]) delete out[k];
  return out;
}

/** `npm start` with data and run directories under `dir`. */
export function spawnStart(dir: string, extraEnv: Record<string, string>) {
  const runDir = path.join(dir, "run");
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: path.join(dir, "data"), RUN_DIR: runDir, ...extraEnv };
  for (const k of ["NATS_URL", "REDIS_URL"]) if (!extraEnv[k]) delete env[k];
  const child = spawn(process.execPath, [...SOURCE_NODE_ARGS, path.join(ROOT, "scripts/start.ts")], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
  return { child, exited, runDir };
}

/** `npm start` until its stack is ready; `readyMs`: a liveness bound (a busy machine took over 60 s to start one), never a speed check. */
export async function runStack(cleanups: (() => Promise<void>)[], extraEnv: Record<string, string>, readyMs = 240_000) {
  const dir = await tempDir("csi-stack-");
  const { child, exited, runDir } = spawnStart(dir, extraEnv);
  let out = "";
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      // SIGTERM first: the stack stops its services and embedded servers (a SIGKILL would orphan them).
      child.kill("SIGTERM");
      const late = await Promise.race([exited.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), 15_000).unref())]);
      if (late) child.kill("SIGKILL");
    }
    await rm(dir, { recursive: true, force: true });
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`stack not ready in ${readyMs / 1000}s:\n${out}`)), readyMs);
    const onData = (b: Buffer) => {
      out += b.toString();
      if (out.includes('"msg":"csi stack ready"')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exited.then((c) => reject(new Error(`stack exited ${c}:\n${out}`)));
  });
  return { child, exited, dir, runDir, output: () => out };
}
