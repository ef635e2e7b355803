/**
 * The journal's side of the RBD helper (helper-source.ts): starts it on first use, sends each
 * call as a JSON line and matches the replies by id. Bounded: every call has a deadline (past it
 * the call fails Unavailable and the helper is killed — a librbd call cannot be cancelled — and
 * started again by the next call), a reply line longer than `maxReplyBytes` kills it too, at most
 * `maxInFlight` calls wait at once (more: ResourceExhausted), and its stderr is logged a line at a
 * time, cut short. The helper exits by itself when this process does (its stdin closes).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { DriverError } from "@csi/contracts";
import type { Logger } from "pino";
import { RBD_HELPER_SOURCE } from "./helper-source.js";

export interface HelperSettings {
  /** Ceph user without the `client.` prefix. */
  user: string;
  monHost: string;
  /** The file holding the user's key (librados reads it; it never passes through here). */
  keyFile: string;
  /** The Ceph pool. */
  pool: string;
  /** librados/librbd options (timeouts, clone format). */
  conf: Record<string, string>;
  /** Threads running calls at once. */
  workers: number;
  /** Only image metadata keys with this prefix are read back. */
  metaPrefix: string;
}

export interface HelperOptions {
  python: string;
  settings: HelperSettings;
  logger?: Logger;
  /** Largest reply line (a list of many images); bigger kills the helper. */
  maxReplyBytes?: number;
  maxInFlight?: number;
  /** How long the helper may take to say it is ready (Python start and `import rbd`). */
  startTimeoutMs?: number;
}

/** A call the helper answered with an error: librbd's errno (null when it gave none) and message. */
export class RbdCallError extends Error {
  override readonly name = "RbdCallError";
  constructor(
    readonly errno: number | null,
    message: string,
  ) {
    super(message);
  }
}

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** One helper process: its directory and child once spawned, and when it said it was ready. */
interface Running {
  child?: ChildProcess;
  dir?: string;
  ready: Promise<void>;
  /** Set when it is being killed or has exited: later calls start another. */
  dead?: Error;
}

const STDERR_LINE_MAX = 500;

export class RbdHelper {
  readonly #o: Required<Omit<HelperOptions, "logger">> & { logger?: Logger };
  #running: Running | undefined;
  /** Calls sent and not yet answered, per helper process. */
  readonly #pending = new Map<number, Pending & { running: Running }>();
  #nextId = 1;
  #closed = false;

  constructor(o: HelperOptions) {
    this.#o = { maxReplyBytes: 32 * 1024 * 1024, maxInFlight: 256, startTimeoutMs: 30_000, ...o };
  }

  /** Runs `op` in the helper; rejects with RbdCallError (librbd's answer) or DriverError (the helper itself failed). */
  async call<T>(op: string, args: Record<string, unknown>, timeoutMs: number): Promise<T> {
    if (this.#closed) throw new DriverError("Unavailable", "the RBD pool is closed");
    if (this.#pending.size >= this.#o.maxInFlight) throw new DriverError("ResourceExhausted", `more than ${this.#o.maxInFlight} RBD calls waiting; retry`);
    const running = this.#running ?? this.#start();
    await running.ready;
    if (running.dead) throw running.dead;
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#kill(running, new DriverError("Unavailable", `RBD ${op} got no answer from the cluster in ${timeoutMs} ms (helper restarted)`));
      }, timeoutMs);
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, running });
      running.child?.stdin?.write(`${JSON.stringify({ id, op, args })}\n`);
    });
  }

  /** Stops the helper; calls in flight fail Unavailable. */
  async close(): Promise<void> {
    this.#closed = true;
    const r = this.#running;
    if (r) this.#kill(r, new DriverError("Unavailable", "the RBD pool is closed"));
    await r?.ready.catch(() => {});
  }

  /** Whether a helper process runs now (tests). */
  get pid(): number | undefined {
    return this.#running?.child?.pid;
  }

  #start(): Running {
    const running: Running = { ready: Promise.resolve() };
    running.ready = this.#launch(running).catch((err: Error) => {
      this.#kill(running, err instanceof DriverError ? err : new DriverError("Unavailable", `the RBD helper did not start: ${err.message}`));
    });
    this.#running = running;
    return running;
  }

  /** Its program in a private directory (0700, removed once Python has read it), python on it, the settings line, then its ready line. */
  async #launch(r: Running): Promise<void> {
    r.dir = await mkdtemp(path.join(os.tmpdir(), "csi-rbd-"));
    const file = path.join(r.dir, "rbd_helper.py");
    await writeFile(file, RBD_HELPER_SOURCE, { mode: 0o600 });
    if (r.dead) return;
    const child = spawn(this.#o.python, [file], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
    });
    r.child = child;
    let stderr = "";
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new DriverError("Unavailable", `the RBD helper was not ready in ${this.#o.startTimeoutMs} ms`)),
        this.#o.startTimeoutMs,
      );
      const settle = (err?: Error) => {
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      };
      child.once("error", (err) => settle(new DriverError("Unavailable", `cannot run ${this.#o.python} for the RBD helper: ${err.message}`)));
      child.once("exit", (code, signal) => {
        const why = new DriverError("Unavailable", `the RBD helper exited (${code ?? signal})${stderr ? `: ${lastLine(stderr)}` : ""}`);
        settle(why);
        this.#kill(r, why);
      });
      this.#readLines(r, child, (line) => this.#onLine(line, settle));
    });
    child.stderr?.on("data", (b: Buffer) => {
      stderr = (stderr + b.toString()).slice(-4096);
      for (const line of b.toString().split("\n")) if (line.trim()) this.#o.logger?.warn({ helper: line.slice(0, STDERR_LINE_MAX) }, "rbd helper");
    });
    child.stdin?.on("error", () => {}); // an exited helper: its exit handler fails the calls
    child.stdin?.write(`${JSON.stringify(this.#o.settings)}\n`);
    await ready;
    // Python has read its program: nothing is left on disk, even if this process is SIGKILLed later.
    await this.#removeDir(r);
  }

  async #removeDir(r: Running): Promise<void> {
    const dir = r.dir;
    r.dir = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  }

  /** stdout a line at a time, each at most maxReplyBytes. */
  #readLines(r: Running, child: ChildProcess, onLine: (line: string) => void): void {
    let buf = "";
    child.stdout?.on("data", (b: Buffer) => {
      buf += b.toString();
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
      if (buf.length > this.#o.maxReplyBytes) this.#kill(r, new DriverError("Internal", `an RBD reply is larger than ${this.#o.maxReplyBytes} bytes`));
    });
  }

  #onLine(line: string, settleReady: (err?: Error) => void): void {
    let msg: { id?: number; ok?: boolean; result?: unknown; errno?: number | null; error?: string; ready?: boolean };
    try {
      msg = JSON.parse(line);
    } catch {
      this.#o.logger?.warn({ line: line.slice(0, STDERR_LINE_MAX) }, "rbd helper: a line that is not JSON");
      return;
    }
    if (msg.ready) {
      settleReady();
      return;
    }
    const p = msg.id === undefined ? undefined : this.#pending.get(msg.id);
    if (!p || msg.id === undefined) return; // answered after its deadline: dropped
    this.#pending.delete(msg.id);
    clearTimeout(p.timer);
    if (msg.ok) p.resolve(msg.result);
    else p.reject(new RbdCallError(typeof msg.errno === "number" ? msg.errno : null, String(msg.error ?? "unknown error").slice(0, 1000)));
  }

  /** Kills the helper `r` and fails its calls with `err`; the next call starts another. */
  #kill(r: Running, err: Error): void {
    if (this.#running === r) this.#running = undefined;
    r.dead ??= err;
    if (r.child && r.child.exitCode === null && r.child.signalCode === null) r.child.kill("SIGKILL");
    for (const [id, p] of this.#pending) {
      if (p.running !== r) continue;
      clearTimeout(p.timer);
      this.#pending.delete(id);
      p.reject(err);
    }
    void this.#removeDir(r);
  }
}

const lastLine = (s: string) => s.trim().split("\n").at(-1)?.slice(0, STDERR_LINE_MAX) ?? "";
