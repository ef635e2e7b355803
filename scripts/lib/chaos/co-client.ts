/**
 * A CSI client that retries as a container orchestrator does (kubelet, external-provisioner):
 * the same request again on UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED or a connection error,
 * with exponential backoff (about 100 ms doubling to a 2 s cap, with jitter), each attempt with
 * its own deadline (10 s). After a failed attempt of the transient kind it dials the socket
 * afresh, because the controller or node-agent it talked to may have been restarted (a unix
 * socket, re-created by the new process). An operation that is still failing after `budgetMs`
 * is given up (the CO would keep trying; the chaos driver tries it again in its settle phase).
 * Every attempt's outcome is counted in `CoStats`.
 */
import { GrpcCode } from "@csi/contracts";
import { type ClientRequestOf, type ClientResponseOf, csiClient, type Methods } from "@csi/runtime";
import type { Random } from "../random.js";

export const RETRYABLE: ReadonlySet<number> = new Set([GrpcCode.UNAVAILABLE, GrpcCode.ABORTED, GrpcCode.DEADLINE_EXCEEDED]);
const CODE_NAMES = new Map<number, string>(Object.entries(GrpcCode).map(([name, code]) => [code, name]));

/** The name of a gRPC code ("ABORTED"); errors without a code are connection errors. */
export const codeName = (code: number | undefined): string => (code === undefined ? "CONNECTION" : (CODE_NAMES.get(code) ?? `CODE_${code}`));

/** Whether a CO retries the same request after this error (codes without a number: the connection failed). */
export const isRetryable = (code: number | undefined): boolean => code === undefined || RETRYABLE.has(code);

export interface Backoff {
  baseMs: number;
  capMs: number;
}
export const CO_BACKOFF: Backoff = { baseMs: 100, capMs: 2000 };

/** Wait before retry number `attempt` (1 = the first retry): base·2^(attempt-1), capped, with ±50 % jitter. Pure. */
export function backoffMs(attempt: number, r: number, b: Backoff = CO_BACKOFF): number {
  const exp = Math.min(b.capMs, b.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(exp * (0.5 + r));
}

export class CoStats {
  attempts = 0;
  retries = 0;
  /** Every failed attempt by code: what the CO saw. */
  readonly attemptErrors = new Map<string, number>();
}

/** The final failure of a call: its gRPC code, how many attempts it took, and whether it was given up while still retryable. */
export class CallFailed extends Error {
  constructor(
    readonly code: number | undefined,
    readonly details: string,
    readonly attempts: number,
    readonly gaveUp: boolean,
  ) {
    super(`${codeName(code)}: ${details}${gaveUp ? ` (given up after ${attempts} attempts)` : ""}`);
  }
  get codeName(): string {
    return codeName(this.code);
  }
}

export interface CoClientOptions {
  controllerEndpoint: string;
  nodeEndpoint: string;
  random: Random;
  stats: CoStats;
  deadlineMs?: number;
  /** Give a call up after this long (attempts and backoff included). */
  budgetMs?: number;
  backoff?: Backoff;
  /** Stops retrying (the run is being aborted). */
  signal?: AbortSignal;
  /** Told of every attempt as it ends: when, whether it succeeded (failure windows are measured from these), and what it was. */
  onAttempt?: (at: number, ok: boolean, about: AttemptAbout) => void;
}

/** What an attempt was: its method, when it began, and for a failure its code and details (cut short). */
export interface AttemptAbout {
  method: string;
  startedAt: number;
  error?: string;
}

type Service = "Controller" | "Node";
type Untyped = { close(): void } & Record<string, (req: unknown, md?: undefined, opts?: { deadline: number }) => Promise<unknown>>;

export class CoClient {
  readonly #clients = new Map<Service, Untyped>();

  constructor(private readonly o: CoClientOptions) {}

  controller<M extends Methods<"Controller">>(method: M, req: ClientRequestOf<"Controller", M>): Promise<ClientResponseOf<"Controller", M>> {
    return this.#call("Controller", method, req) as Promise<ClientResponseOf<"Controller", M>>;
  }

  node<M extends Methods<"Node">>(method: M, req: ClientRequestOf<"Node", M>): Promise<ClientResponseOf<"Node", M>> {
    return this.#call("Node", method, req) as Promise<ClientResponseOf<"Node", M>>;
  }

  close(): void {
    for (const s of [...this.#clients.keys()]) this.#redial(s);
  }

  #client(s: Service): Untyped {
    let c = this.#clients.get(s);
    if (!c) {
      c = csiClient(s === "Controller" ? this.o.controllerEndpoint : this.o.nodeEndpoint, s) as unknown as Untyped;
      this.#clients.set(s, c);
    }
    return c;
  }

  #redial(s: Service): void {
    this.#clients.get(s)?.close();
    this.#clients.delete(s);
  }

  async #call(s: Service, method: string, req: unknown): Promise<unknown> {
    const { stats, random, signal } = this.o;
    const deadlineMs = this.o.deadlineMs ?? 10_000;
    const giveUpAt = Date.now() + (this.o.budgetMs ?? 120_000);
    for (let attempt = 1; ; attempt++) {
      stats.attempts++;
      const startedAt = Date.now();
      try {
        const fn = this.#client(s)[method];
        if (!fn) throw new Error(`no method ${s}.${method}`);
        const res = await fn(req, undefined, { deadline: Date.now() + deadlineMs });
        this.o.onAttempt?.(Date.now(), true, { method, startedAt });
        return res;
      } catch (err) {
        const e = err as { code?: number; details?: string; message?: string };
        const code = typeof e.code === "number" ? e.code : undefined;
        const details = e.details ?? e.message ?? String(err);
        this.o.onAttempt?.(Date.now(), false, { method, startedAt, error: `${codeName(code)}: ${details.slice(0, 200)}` });
        stats.attemptErrors.set(codeName(code), (stats.attemptErrors.get(codeName(code)) ?? 0) + 1);
        if (!isRetryable(code)) throw new CallFailed(code, details, attempt, false);
        // The server may be a new process on the same socket: dial afresh.
        this.#redial(s);
        const wait = backoffMs(attempt, random.next(), this.o.backoff);
        if (signal?.aborted || Date.now() + wait > giveUpAt) throw new CallFailed(code, details, attempt, true);
        stats.retries++;
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
}
