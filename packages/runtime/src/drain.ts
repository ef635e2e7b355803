/**
 * Graceful stop (docs/operations.md, "Graceful stop and rolling restarts"): on SIGTERM a service
 * stops taking new work, waits for the work it has in flight, and only then closes its
 * connections. Each source of work (the gRPC server, the journal's NATS endpoints, a durable
 * queue consumer) is a `Drainable`; `drainAll` drains them together within one bound
 * (SHUTDOWN_GRACE_MS) and cuts what is still running at the bound. It logs one line when it
 * starts (what is in flight) and one when it ends (what it waited for, how long, what was cut).
 */
import type { Logger } from "pino";

/** One source of work of a service. */
export interface Drainable {
  /** What it waits for, as the log says it ("gRPC calls", "journal commands", "node work"). */
  readonly what: string;
  /** How many are in flight now. */
  inFlight(): number;
  /** Take no new work (others get it), then resolve once the work in flight is done. */
  drain(): Promise<void>;
  /** The bound has passed: cut what is still running (a call gets an error the caller retries). */
  force?(): void;
}

/** Counts the tasks running now and tells when none is left. */
export class InFlight {
  #count = 0;
  #waiters: (() => void)[] = [];

  get size(): number {
    return this.#count;
  }

  /** Runs `fn`, counted until it settles. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    this.#count++;
    const done = () => {
      if (--this.#count > 0) return;
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const w of waiters) w();
    };
    let p: Promise<T>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    p.then(done, done);
    return p;
  }

  /** Resolves when nothing runs (at once if nothing does). */
  idle(): Promise<void> {
    if (this.#count === 0) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** Waits for `p` at most `ms`: true when it settled in time (a rejection counts as settled). */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export interface DrainReport {
  ms: number;
  /** What was in flight when the drain started, by `what`. */
  waitedFor: Record<string, number>;
  /** What was still running at the bound and was cut, by `what` (empty: everything finished). */
  cut: Record<string, number>;
}

/** Drains every part at once within `graceMs`; what has not finished by then is forced. */
export async function drainAll(log: Logger, graceMs: number, parts: Drainable[]): Promise<DrainReport> {
  const started = performance.now();
  const waitedFor = Object.fromEntries(parts.map((p) => [p.what, p.inFlight()]));
  log.info({ waitingFor: waitedFor, graceMs }, "draining: no new work taken, waiting for the work in flight");
  const cut: Record<string, number> = {};
  await Promise.all(
    parts.map(async (p) => {
      if (await settlesWithin(p.drain(), Math.max(0, graceMs - (performance.now() - started)))) return;
      cut[p.what] = p.inFlight();
      p.force?.();
    }),
  );
  const ms = Math.round(performance.now() - started);
  const report = { ms, waitedFor, cut };
  if (Object.keys(cut).length === 0) log.info(report, "drained: the work in flight finished");
  else log.warn(report, "drained: the grace period passed, the work still running was cut");
  return report;
}

/** How long a connection's own close (NATS drain, Redis quit) may take after the drain before it is dropped. */
export const CLOSE_BOUND_MS = 3_000;

/** Closes a connection gracefully (`close`) within CLOSE_BOUND_MS, else drops it (`drop`). */
export async function closeWithin(close: () => Promise<unknown>, drop: () => unknown, ms = CLOSE_BOUND_MS): Promise<void> {
  const closing = close();
  if (!(await settlesWithin(closing, ms))) await drop();
}
