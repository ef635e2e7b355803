/**
 * Deadlines of node operations. Every operation (stage, publish, ..., each heal action) runs
 * under a `Deadline`: when it passes, the operation's caller gets DEADLINE_EXCEEDED, the
 * command the operation is running is killed (`run` in exec.ts passes the deadline's signal to
 * the child process), no further command of it starts, and the volume's lock is released — at
 * the latest `GRACE_MS` after the deadline, even when a step cannot be interrupted (a system
 * call stuck in the kernel), so no later call on the volume waits for ever.
 *
 * The signal of the running operation travels in an AsyncLocalStorage, as a Go context would in
 * an argument: the adapters ask `checkDeadline()` before each change they make, and exec.ts
 * takes the signal for the commands it runs, without every adapter function taking a signal.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverError } from "@csi/contracts";

const current = new AsyncLocalStorage<AbortSignal | undefined>();

/** How long an expired operation may still take to wind down (its killed command, its clean-up) before its lock is released anyway. */
export const GRACE_MS = 2_000;

/** The abort signal of the operation this code runs in, if any. */
export const currentSignal = (): AbortSignal | undefined => current.getStore();

/** Throw the deadline's error when the operation this code runs in is past its deadline. */
export function checkDeadline(): void {
  current.getStore()?.throwIfAborted();
}

/** Run `fn` outside any operation's deadline: clean-up after a failure must run even when the deadline has passed. */
export const outsideDeadline = <T>(fn: () => Promise<T>): Promise<T> => current.run(undefined, fn);

export class Deadline {
  readonly #ac = new AbortController();
  readonly #expired: Promise<never>;
  #timer: NodeJS.Timeout | undefined;

  /** Starts now: the time an operation waits for its volume's lock counts. */
  constructor(
    readonly ms: number,
    what: string,
  ) {
    this.#expired = new Promise<never>((_, reject) => {
      this.#timer = setTimeout(() => {
        const err = new DriverError("DeadlineExceeded", `${what} did not finish within its deadline of ${ms} ms`);
        this.#ac.abort(err);
        reject(err);
      }, ms);
    });
    this.#expired.catch(() => {});
  }

  /**
   * Run `fn` with this deadline as the current one. It settles by the deadline; after an expiry
   * it waits up to GRACE_MS for `fn` to wind down (its commands are killed, its clean-up runs)
   * before it rejects, so whoever holds a lock around it releases it at the latest then.
   */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.#ac.signal.throwIfAborted();
    const work = current.run(this.#ac.signal, fn);
    try {
      return await Promise.race([work, this.#expired]);
    } catch (err) {
      if (this.#ac.signal.aborted) await Promise.race([work.catch(() => {}), sleep(GRACE_MS)]);
      throw err;
    }
  }

  /** `p`, or this deadline's error if it passes first; the deadline is done afterwards. */
  async bound<T>(p: Promise<T>): Promise<T> {
    try {
      return await Promise.race([p, this.#expired]);
    } finally {
      clearTimeout(this.#timer);
    }
  }
}

/** `fn` under a deadline of `ms` from now, `what` naming it in the error. */
export function withDeadline<T>(ms: number, what: string, fn: () => Promise<T>): Promise<T> {
  const d = new Deadline(ms, what);
  return d.bound(d.run(fn));
}
