/** Commands for the end-to-end run (scripts/e2e.ts): a child process with a deadline, its output kept and shown when it fails. */
import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";

/** Everything the run keeps across runs: ~/.cache/csi-event-driver/e2e (CSI_E2E_CACHE overrides). */
export const CACHE = process.env.CSI_E2E_CACHE || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "csi-event-driver", "e2e");

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Standard input to write (then closed). */
  input?: string | Buffer;
  timeoutMs?: number;
  /** Resolve with the result instead of throwing on a non-zero exit. */
  allowFail?: boolean;
  /** Also stream the child's output to ours (long steps: builds, apt-get). */
  echo?: boolean;
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cmd args`; throws (with the tail of its output) on a non-zero exit or past the deadline, unless `allowFail`. */
export function sh(cmd: string, args: readonly string[], o: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: o.env ?? process.env, cwd: o.cwd, stdio: [o.input === undefined ? "ignore" : "pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on("data", (b: Buffer) => {
      out.push(b);
      if (o.echo) process.stdout.write(b);
    });
    child.stderr?.on("data", (b: Buffer) => {
      err.push(b);
      if (o.echo) process.stderr.write(b);
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), o.timeoutMs ?? 300_000);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`${cmd}: ${e.message}`));
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const r = { code: code ?? 128, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
      if (r.code === 0 || o.allowFail) return resolve(r);
      const tail = `${r.stderr}${r.stdout}`.trim().split("\n").slice(-15).join("\n");
      reject(new Error(`${cmd} ${args.join(" ")}: ${signal ? `killed (${signal}, past ${o.timeoutMs ?? 300_000} ms)` : `exit ${r.code}`}\n${tail}`));
    });
    if (o.input !== undefined) {
      child.stdin?.on("error", () => {}); // a child that exits without reading it all
      child.stdin?.end(o.input);
    }
  });
}

/** True when `cmd` is on the PATH (or in /usr/sbin, /sbin). */
export async function have(cmd: string): Promise<boolean> {
  return (await sh("sh", ["-c", `command -v ${cmd} || test -x /usr/sbin/${cmd} || test -x /sbin/${cmd}`], { allowFail: true })).code === 0;
}

/** One line of progress, with the seconds since the run began. */
const started = Date.now();
export const say = (msg: string) => console.log(`e2e [${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s] ${msg}`);
