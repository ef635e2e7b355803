/**
 * A service's readiness: named checks (NATS connected, Redis answers PING, a journal replica
 * answers…), all of which must pass for /readyz to answer 200. A check returns true, or a short
 * reason why not; a check that throws or takes longer than CHECK_TIMEOUT_MS fails with that as
 * its reason. Before the service has started, and once it is stopping, it is not ready whatever
 * the checks say.
 *
 * /readyz may be asked often (every probe of every kubelet, a curl loop): callers at the same
 * time share one run of the checks, and a result is reused for REUSE_MS.
 */

export type ReadinessCheck = () => Promise<true | string> | true | string;

export interface ReadinessReport {
  ready: boolean;
  /** The first check that failed ("starting" / "stopping" outside the running phase). */
  failing?: string;
  reason?: string;
  /** Every check: "ok" or why not. */
  checks: Record<string, string>;
}

export const CHECK_TIMEOUT_MS = 2_000;
export const REUSE_MS = 250;
const REASON_MAX = 160;

/** A reason as it may be shown: printable ASCII, short. */
export function shortReason(why: unknown): string {
  const s = why instanceof Error ? why.message : String(why);
  const clean = s.replace(/[^\x20-\x7e]+/g, " ").trim();
  return clean.length > REASON_MAX ? `${clean.slice(0, REASON_MAX - 3)}...` : clean || "failed";
}

/** `p`'s outcome, or `late()` if `p` has not settled within `ms` (the timer is cleared either way). */
export async function within<T, L>(p: Promise<T>, ms: number, late: () => L): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<L>((resolve) => {
    timer = setTimeout(() => resolve(late()), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function run(check: ReadinessCheck, timeoutMs: number): Promise<string> {
  try {
    const got = await within(Promise.resolve().then(check), timeoutMs, () => `no answer within ${timeoutMs} ms`);
    return got === true ? "ok" : shortReason(got);
  } catch (err) {
    return shortReason(err);
  }
}

export class Readiness {
  readonly #checks = new Map<string, ReadinessCheck>();
  #phase: "starting" | "running" | "stopping" = "starting";
  #last?: { at: number; report: Promise<ReadinessReport> };

  constructor(private readonly opts: { timeoutMs?: number; reuseMs?: number; now?: () => number } = {}) {}

  /** Add a check (names are unique: the second of a name replaces the first). */
  add(name: string, check: ReadinessCheck): void {
    this.#checks.set(name, check);
    this.#last = undefined;
  }

  /** The service has started: the checks decide from now on. */
  started(): void {
    this.#phase = "running";
    this.#last = undefined;
  }

  /** The service is stopping: never ready again (a load balancer stops sending it work). */
  stopping(): void {
    this.#phase = "stopping";
    this.#last = undefined;
  }

  get phase() {
    return this.#phase;
  }

  report(): Promise<ReadinessReport> {
    const now = (this.opts.now ?? Date.now)();
    if (this.#last && now - this.#last.at < (this.opts.reuseMs ?? REUSE_MS)) return this.#last.report;
    const report = this.#evaluate();
    this.#last = { at: now, report };
    return report;
  }

  async #evaluate(): Promise<ReadinessReport> {
    if (this.#phase !== "running") return { ready: false, failing: this.#phase, reason: `the service is ${this.#phase}`, checks: {} };
    const names = [...this.#checks.keys()];
    const results = await Promise.all([...this.#checks.values()].map((c) => run(c, this.opts.timeoutMs ?? CHECK_TIMEOUT_MS)));
    const checks = Object.fromEntries(names.map((n, i) => [n, results[i] as string]));
    const i = results.findIndex((r) => r !== "ok");
    if (this.#phase !== "running") return { ready: false, failing: this.#phase, reason: `the service is ${this.#phase}`, checks };
    return i < 0 ? { ready: true, checks } : { ready: false, failing: names[i] as string, reason: results[i] as string, checks };
  }
}
