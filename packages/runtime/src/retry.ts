/**
 * Retry with exponential backoff and jitter: the one helper behind every "try again shortly"
 * (busy devices, a report that NATS did not take, a lock held by someone else).
 */
import { setTimeout as sleep } from "node:timers/promises";

export interface RetryOptions {
  /** Total attempts, the first included (default 3). */
  tries?: number;
  /** Stop trying once this epoch-ms deadline has passed (checked before each wait). */
  deadline?: number;
  /** Wait before the second attempt (default 100 ms); doubled after each attempt. */
  firstDelayMs?: number;
  maxDelayMs?: number;
  /** Add up to this fraction of the delay at random (default 0), so contenders spread out. */
  jitter?: number;
  /** Whether this failure is worth another attempt (default: every failure). */
  retryIf?: (err: unknown) => boolean;
  signal?: AbortSignal;
}

export async function retry<T>(attempt: (n: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const tries = opts.tries ?? 3;
  let delay = opts.firstDelayMs ?? 100;
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      const last = n >= tries || (opts.deadline !== undefined && Date.now() >= opts.deadline) || (opts.retryIf && !opts.retryIf(err));
      if (last || opts.signal?.aborted) throw err;
      await sleep(delay * (1 + Math.random() * (opts.jitter ?? 0)), undefined, opts.signal ? { signal: opts.signal } : {});
      delay = Math.min(delay * 2, opts.maxDelayMs ?? Number.POSITIVE_INFINITY);
    }
  }
}
