/**
 * The lock that keeps two stacks off one data directory (and one run directory): a second
 * `npm start` in the same checkout would start a second nats-server and redis-server on the same
 * stores — JetStream does not survive that — and take over the CSI sockets.
 *
 * `<dir>/stack.lock` is a small JSON file naming every process of the stack that holds it (the
 * `npm start` process, the servers it started, the services), each with its start time from
 * /proc, so that a reused pid is not taken for the holder. It is created atomically (written
 * aside, then link(2), which fails if the lock exists) and rewritten (rename) as the stack
 * starts processes.
 *
 * The lock is held while ANY of those processes runs: a `npm start` that was SIGKILLed leaves
 * its servers running on the stores, and they still hold it. A lock none of whose processes
 * runs is stale (an unclean stop) and is taken over: re-read right before it is removed, so two
 * starters racing over one stale lock can only collide within those two system calls.
 */
import { readFileSync } from "node:fs";
import { link, readFile, rename, unlink, writeFile } from "node:fs/promises";
import path from "node:path";

export const LOCK_FILE = "stack.lock";

export interface LockedProcess {
  role: string;
  pid: number;
  /** Start time (clock ticks after boot, /proc/<pid>/stat field 22); absent where /proc is not there. */
  start?: string;
}

export interface LockContent {
  since: string;
  procs: LockedProcess[];
}

/** A directory that a running stack holds. */
export class StackInUse extends Error {
  constructor(
    readonly dir: string,
    readonly holders: LockedProcess[],
  ) {
    const who = holders.map((p) => `${p.role} (pid ${p.pid})`).join(", ");
    super(
      `${dir} is in use by another stack: ${who} still run${holders.length === 1 ? "s" : ""} on it. ` +
        `Stop that stack first (Ctrl-C in its terminal, or kill ${holders.map((p) => p.pid).join(" ")}), or set DATA_DIR and RUN_DIR to other directories.`,
    );
    this.name = "StackInUse";
  }
}

/** The start time of a process, or undefined if it does not exist (or /proc cannot tell). */
export function processStart(pid: number): string | undefined {
  try {
    // Field 22 of /proc/<pid>/stat; the command name (field 2) may hold spaces: count from ") ".
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[19];
  } catch {
    return undefined;
  }
}

/** Whether a recorded process still runs: same pid and, where /proc tells, same start time. */
export function isRunning(p: LockedProcess, start: (pid: number) => string | undefined = processStart): boolean {
  const now = start(p.pid);
  if (now !== undefined) return p.start === undefined || p.start === now;
  if (p.start !== undefined) return false; // recorded with /proc, gone from it
  try {
    process.kill(p.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The processes of a lock that still run (none: the lock is stale). Unreadable content holds nothing. */
export function holdersOf(content: string, running: (p: LockedProcess) => boolean = isRunning): LockedProcess[] {
  let parsed: LockContent;
  try {
    parsed = JSON.parse(content) as LockContent;
  } catch {
    return [];
  }
  return Array.isArray(parsed?.procs) ? parsed.procs.filter((p) => Number.isInteger(p?.pid) && p.pid > 0 && running(p)) : [];
}

export const describeProcess = (role: string, pid: number): LockedProcess => {
  const start = processStart(pid);
  return { role, pid, ...(start !== undefined ? { start } : {}) };
};

/** The locks of one stack, held on one or more directories. */
export class StackLock {
  readonly #files: string[] = [];
  #writing: Promise<void> = Promise.resolve();
  readonly #content: LockContent = { since: new Date().toISOString(), procs: [describeProcess("npm start", process.pid)] };

  /** Takes the lock of every directory (all or none); StackInUse if a running stack holds one. */
  static async take(dirs: string[]): Promise<StackLock> {
    const lock = new StackLock();
    try {
      for (const dir of new Set(dirs.map((d) => path.resolve(d)))) await lock.#take(dir);
    } catch (err) {
      await lock.release();
      throw err;
    }
    return lock;
  }

  /**
   * Records another process of the stack (the lock is held while it runs) and forgets those that
   * stopped (a restarted service). Calls are serialised: services start concurrently.
   */
  add(role: string, pid: number | undefined): Promise<void> {
    if (pid === undefined) return this.#writing;
    this.#writing = this.#writing
      .catch(() => {})
      .then(async () => {
        this.#content.procs = [...this.#content.procs.filter((p) => p.pid === process.pid || isRunning(p)), describeProcess(role, pid)];
        for (const file of this.#files) {
          const aside = `${file}.${process.pid}.tmp`;
          await writeFile(aside, this.#json());
          await rename(aside, file);
        }
      });
    return this.#writing;
  }

  /** Removes the lock files that are still ours. */
  async release(): Promise<void> {
    await this.#writing.catch(() => {});
    const mine = this.#json();
    for (const file of this.#files.splice(0)) {
      if ((await readFile(file, "utf8").catch(() => "")) === mine) await unlink(file).catch(() => {});
    }
  }

  #json(): string {
    return `${JSON.stringify(this.#content)}\n`;
  }

  async #take(dir: string): Promise<void> {
    const file = path.join(dir, LOCK_FILE);
    const aside = `${file}.${process.pid}.tmp`;
    await writeFile(aside, this.#json());
    try {
      for (let attempt = 0; attempt < 5; attempt++) {
        try {
          await link(aside, file);
          this.#files.push(file);
          return;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        }
        const seen = await readFile(file, "utf8").catch(() => undefined);
        if (seen === undefined) continue; // released meanwhile
        const holders = holdersOf(seen);
        if (holders.length > 0) throw new StackInUse(dir, holders);
        // Stale: its stack is gone. Remove it unless it changed since we read it.
        if ((await readFile(file, "utf8").catch(() => undefined)) === seen) await unlink(file).catch(() => {});
      }
      throw new StackInUse(dir, []);
    } finally {
      await unlink(aside).catch(() => {});
    }
  }
}
