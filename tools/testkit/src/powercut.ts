/**
 * The power-cut harness: a FUSE passthrough filesystem (powercut/powercut.py, Python 3 with Debian's
 * python3-pyfuse3) that keeps, beside the live view of its backing directory, what a disk would
 * hold if the power went now — only what fsync/fdatasync made durable, and only the names a
 * directory commit made durable, under one of two rules:
 *
 * - `ext4` (what ext4/xfs do): fsync/fdatasync of a file makes its data durable and commits every
 *   pending name change of the whole filesystem (a journal commit); fsync of a directory commits
 *   every name too.
 * - `strict` (POSIX): fsync of a file makes its data and size durable, nothing else; a name is
 *   durable once the directory holding it was fsynced (a rename: both directories).
 *
 * A file whose name is durable but whose data never was comes back with what it held at its last
 * fsync (empty if none); what was there at mount time is durable as it is. `cut()` freezes the
 * durable state (every operation on the mount fails with EIO from then on), `reconstruct(dir)`
 * writes it out as a fresh tree a test can start programs on again.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, realpathSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import { readMounts } from "@csi/node-agent/testing";

export type PowercutRule = "ext4" | "strict";

/** What a cut drops: bytes written and not fsynced, the files they are in, name changes not committed. */
export interface PowercutLosses {
  droppedBytes: number;
  droppedFiles: number;
  droppedNames: number;
}

export interface PowercutStats {
  rule: PowercutRule;
  frozen: boolean;
  writes: number;
  bytesWritten: number;
  fsyncs: number;
  fdatasyncs: number;
  fsyncdirs: number;
  /** Bytes copied into the durable store by fsyncs. */
  bytesSynced: number;
  /** Commit points (an ext4 journal commit, a strict directory fsync). */
  commits: number;
  namesCommitted: number;
  /** Files present at mount time copied (holes skipped) before their first change. */
  copies: number;
  bytesCopied: number;
  nodes: number;
  /** What a cut would drop now. */
  now: PowercutLosses;
  /** What the cut dropped, once cut. */
  atCut: PowercutLosses | null;
}

/** What `reconstruct` wrote. */
export interface PowercutTree {
  files: number;
  dirs: number;
  symlinks: number;
  hardlinks: number;
  /** Fifos, sockets, devices (not rebuilt), and directories reachable twice. */
  skipped: number;
  bytes: number;
}

export interface PowercutMount {
  readonly backing: string;
  readonly mountpoint: string;
  readonly rule: PowercutRule;
  readonly pid: number | undefined;
  /** Freeze the durable state; resolves once frozen, with what the cut dropped. */
  cut(): Promise<PowercutLosses>;
  /** Write the durable tree into `outDir` (new or empty). */
  reconstruct(outDir: string): Promise<PowercutTree>;
  stats(): Promise<PowercutStats>;
  /**
   * Stop the daemon and unmount (lazily: a process still holding files does not keep the mount).
   * After a cut, kill the processes that use the mount first.
   */
  unmount(): Promise<void>;
}

const PYTHON = "/usr/bin/python3";
const PACKAGE = "python3-pyfuse3";
const READY_TIMEOUT_MS = 15_000;
const EXIT_TIMEOUT_MS = 10_000;

/** The daemon's source: beside this file, or in src/ when this is the built dist/ copy. */
function daemonScript(): string {
  const here = path.join(import.meta.dirname, "powercut", "powercut.py");
  return existsSync(here) ? here : path.join(import.meta.dirname, "..", "src", "powercut", "powercut.py");
}

const hasPyfuse3 = (): boolean => {
  try {
    execFileSync(PYTHON, ["-c", "import pyfuse3"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

function aptInstall(pkg: string): void {
  const opts = { stdio: "ignore" as const, env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } };
  try {
    execFileSync("apt-get", ["install", "-y", "-q", pkg], opts);
  } catch {
    execFileSync("apt-get", ["update", "-q"], opts);
    execFileSync("apt-get", ["install", "-y", "-q", pkg], opts);
  }
}

function canOpenFuse(): boolean {
  try {
    closeSync(openSync("/dev/fuse", "r+"));
    return true;
  } catch {
    return false;
  }
}

/**
 * Why the harness cannot run here, or undefined when it can: it needs root (it mounts), a usable
 * /dev/fuse and /usr/bin/python3 with pyfuse3 — installed from Debian (python3-pyfuse3, with
 * apt-get update if the first try fails) when missing, as root, unless CSI_NO_APT=1.
 */
export function ensurePowercut(): string | undefined {
  if (process.platform !== "linux") return "needs Linux (FUSE)";
  if (process.getuid?.() !== 0) return "needs root (FUSE mounts)";
  if (!canOpenFuse()) return "needs a usable /dev/fuse";
  if (!existsSync(PYTHON)) return `needs ${PYTHON}`;
  if (hasPyfuse3()) return undefined;
  if (process.env.CSI_NO_APT === "1") return `needs ${PACKAGE} (apt-get install ${PACKAGE}; CSI_NO_APT=1 forbids installing it here)`;
  try {
    aptInstall(PACKAGE);
  } catch (err) {
    return `cannot install ${PACKAGE}: ${(err as Error).message.split("\n")[0]}`;
  }
  return hasPyfuse3() ? undefined : `${PACKAGE} installed, yet ${PYTHON} cannot import pyfuse3`;
}

/** Whether something is mounted at `p` (compared as given: a dead FUSE mount cannot be resolved). */
async function mountedAt(p: string): Promise<boolean> {
  return (await readMounts()).some((e) => e.mountPoint === p);
}

/** The daemon's reply lines, in order, one per command. */
class Replies {
  #waiting: { resolve: (line: string) => void; reject: (err: Error) => void }[] = [];
  #gone: Error | undefined;

  next(): Promise<string> {
    if (this.#gone) return Promise.reject(this.#gone);
    return new Promise((resolve, reject) => this.#waiting.push({ resolve, reject }));
  }

  line(line: string): void {
    this.#waiting.shift()?.resolve(line);
  }

  end(err: Error): void {
    this.#gone = err;
    for (const w of this.#waiting.splice(0)) w.reject(err);
  }
}

interface Daemon {
  child: ChildProcess;
  replies: Replies;
  exited: Promise<void>;
}

/** Start the daemon; resolves once it says "ready" (mounted), rejects if it exits first. */
async function startDaemon(args: string[]): Promise<Daemon> {
  const child = spawn(PYTHON, [daemonScript(), ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
  });
  let stderr = "";
  child.stderr?.on("data", (b: Buffer) => {
    stderr = (stderr + b.toString()).slice(-8192);
  });
  child.stdin?.on("error", () => {}); // a dead daemon: its exit rejects what waits
  const replies = new Replies();
  const exited = new Promise<void>((resolve) => {
    const gone = (why: string) => {
      replies.end(new Error(`the powercut daemon ${why}${stderr ? `: ${stderr.trim()}` : ""}`));
      resolve();
    };
    child.once("exit", (code, signal) => gone(`exited (${code ?? signal})`));
    child.once("error", (err) => gone(`could not run: ${err.message}`));
  });
  const lines = createInterface({ input: child.stdout! });
  const ready = replies.next();
  lines.on("line", (line) => replies.line(line));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the powercut daemon was not ready in ${READY_TIMEOUT_MS} ms: ${stderr}`)), READY_TIMEOUT_MS);
  });
  try {
    const first = await Promise.race([ready, timeout]);
    if (first !== "ready") throw new Error(`the powercut daemon said ${JSON.stringify(first)} instead of ready: ${stderr}`);
  } catch (err) {
    child.kill("SIGKILL");
    await exited;
    throw err;
  } finally {
    clearTimeout(timer);
  }
  return { child, replies, exited };
}

/** One command, its reply's JSON. */
async function command<T>(d: Daemon, line: string): Promise<T> {
  const reply = d.replies.next();
  d.child.stdin?.write(`${line}\n`);
  const got = await reply;
  if (!got.startsWith("ok")) throw new Error(`powercut ${line.split(" ")[0]}: ${got.replace(/^error /, "")}`);
  const json = got.slice(2).trim();
  return (json ? JSON.parse(json) : undefined) as T;
}

/** Ends the daemon (stdin's end; SIGKILL if it does not go), then makes sure nothing is left mounted. */
async function stopDaemon(d: Daemon, mountpoint: string, store: string): Promise<void> {
  if (d.child.exitCode === null && d.child.signalCode === null) {
    d.child.stdin?.end();
    const timer = setTimeout(() => d.child.kill("SIGKILL"), EXIT_TIMEOUT_MS);
    await d.exited;
    clearTimeout(timer);
  }
  if (await mountedAt(mountpoint)) execFileSync("umount", ["-l", mountpoint], { stdio: "ignore" });
  await rm(store, { recursive: true, force: true });
}

/**
 * Mount the harness at `mountpoint` (an existing directory) over `backing` (an existing directory,
 * whose content is durable as it is). The durable store goes beside the backing directory
 * (`<backing>.powercut-store`, removed at unmount).
 */
export async function mountPowercut(opts: { backing: string; mountpoint: string; rule: PowercutRule }): Promise<PowercutMount> {
  const why = ensurePowercut();
  if (why) throw new Error(`the powercut harness cannot run here: ${why}`);
  const backing = realpathSync(opts.backing);
  const mountpoint = realpathSync(opts.mountpoint);
  const store = `${backing}.powercut-store`;
  await rm(store, { recursive: true, force: true }); // a daemon killed earlier left it
  const d = await startDaemon(["--rule", opts.rule, "--store", store, backing, mountpoint]);
  let unmounted: Promise<void> | undefined;
  return {
    backing,
    mountpoint,
    rule: opts.rule,
    get pid() {
      return d.child.exitCode === null && d.child.signalCode === null ? d.child.pid : undefined;
    },
    cut: () => command<PowercutLosses>(d, "cut"),
    reconstruct: (outDir) => command<PowercutTree>(d, `reconstruct ${path.resolve(outDir)}`),
    stats: () => command<PowercutStats>(d, "stats"),
    unmount: () => {
      unmounted ??= stopDaemon(d, mountpoint, store);
      return unmounted;
    },
  };
}
