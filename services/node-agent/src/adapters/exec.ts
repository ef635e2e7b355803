/**
 * Running the node's storage tools (losetup, mount, mkfs, blkid, ...).
 *
 * Commands run through `execFile` with an argument array, never through a shell, so no argument
 * is ever interpreted. The locale is forced to C so that the stderr texts we match on
 * ("target is busy", "No such device or address") are the English ones.
 *
 * A command run inside a node operation is killed when the operation's deadline passes, and
 * none starts after it (adapters/deadline.ts): that failure is DeadlineExceeded.
 *
 * A failure becomes a `CommandError` (a `DriverError`) whose message names the command, its
 * exit status and its stderr. Only device paths, mount paths and tool flags pass through here —
 * never secrets — so the message is safe to log and to return to the CO.
 */
import { execFile } from "node:child_process";
import { DriverError, type ErrorName } from "@csi/contracts";
import { retry } from "@csi/runtime";
import { currentSignal } from "./deadline.js";

export interface RunOptions {
  /** Kill the command (SIGKILL) after this long. Default 60 s. */
  timeoutMs?: number;
  /** Exit codes that are not failures (0 always is); the caller inspects `code` itself. */
  okCodes?: readonly number[];
}

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_STDERR_IN_MESSAGE = 2_000;

/** stderr texts (and errno names) of failures that go away by themselves when tried again. */
const TRANSIENT = /\bEBUSY\b|\bEAGAIN\b|device or resource busy|resource temporarily unavailable|target is busy/i;

/** A command that could not run, timed out, or exited with a code the caller did not expect. */
export class CommandError extends DriverError {
  constructor(
    code: ErrorName,
    message: string,
    readonly command: readonly string[],
    /** The exit code, or undefined when the command did not exit by itself (not found, killed). */
    readonly exitCode: number | undefined,
    readonly stderr: string,
    options?: { cause?: unknown },
  ) {
    super(code, message, options);
  }
}

let stallBefore: string | undefined;
/**
 * Fault injection (tests only, NODE_STALL_BEFORE): the next time `cmd` is to run, a real
 * `sleep 3600` runs first, as a step that blocks would, until the operation's deadline kills it.
 */
export function stallOnceBefore(cmd: string): void {
  stallBefore = cmd;
}

/** Run `cmd args...` and return its output; throw a `CommandError` on any failure. */
export async function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  if (stallBefore !== undefined && stallBefore === cmd) {
    stallBefore = undefined;
    await run("sleep", ["3600"], { timeoutMs: 3_600_000 });
  }
  return runOnce(cmd, args, opts);
}

function runOnce(cmd: string, args: readonly string[], opts: RunOptions): Promise<RunResult> {
  const argv = [cmd, ...args];
  const shown = argv.join(" ");
  const signal = currentSignal();
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      {
        encoding: "utf8",
        timeout: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        killSignal: "SIGKILL",
        ...(signal ? { signal } : {}),
        maxBuffer: 16 * 1024 * 1024,
        env: { ...process.env, LC_ALL: "C" },
      },
      (err, stdout, stderr) => {
        if (!err) return resolve({ stdout, stderr, code: 0 });
        const e = err as NodeJS.ErrnoException & { code?: string | number; killed?: boolean; signal?: string | null };
        if (typeof e.code === "number") {
          if (opts.okCodes?.includes(e.code)) return resolve({ stdout, stderr, code: e.code });
          const detail = stderr.trim().slice(0, MAX_STDERR_IN_MESSAGE) || "(no stderr)";
          const name: ErrorName = TRANSIENT.test(stderr) ? "Unavailable" : "Internal";
          return reject(new CommandError(name, `${shown} failed (exit ${e.code}): ${detail}`, argv, e.code, stderr, { cause: err }));
        }
        if (e.name === "AbortError" && signal?.aborted) {
          const why = signal.reason instanceof Error ? signal.reason.message : "the operation was aborted";
          return reject(new CommandError("DeadlineExceeded", `${shown} was killed: ${why}`, argv, undefined, stderr, { cause: err }));
        }
        if (e.code === "ENOENT") {
          return reject(
            new CommandError("FailedPrecondition", `${shown} failed: ${cmd} is not installed on this node`, argv, undefined, stderr, { cause: err }),
          );
        }
        if (e.killed || e.signal) {
          const why = e.killed ? `timed out after ${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms` : `killed by ${e.signal}`;
          return reject(new CommandError("DeadlineExceeded", `${shown} ${why}`, argv, undefined, stderr, { cause: err }));
        }
        const what = typeof e.code === "string" ? e.code : e.message;
        return reject(new CommandError("Internal", `${shown} failed: ${what}`, argv, undefined, stderr, { cause: err }));
      },
    );
  });
}

/**
 * Whether a failure may go away when tried again: a device or mount that is busy for a moment
 * (udev probing a new loop device, a process leaving a directory) or a resource that is
 * temporarily unavailable. Everything else is permanent.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof CommandError) return TRANSIENT.test(err.stderr);
  const e = err as { code?: unknown; message?: unknown } | undefined;
  if (e?.code === "EBUSY" || e?.code === "EAGAIN") return true;
  return typeof e?.message === "string" && TRANSIENT.test(e.message);
}

/**
 * `run`, retrying only transient failures (see `isTransient`): 3 attempts, 100 ms then 200 ms
 * apart (Nomad's policy), with the runtime's `retry`. The last failure is thrown as it is.
 */
export function runRetrying(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return retry(() => run(cmd, args, opts), { tries: 3, firstDelayMs: 100, retryIf: isTransient });
}
