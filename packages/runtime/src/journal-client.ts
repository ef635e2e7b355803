/**
 * The typed client of the journal's NATS commands (used by the controller, tests and the
 * benchmark). Requests are validated before they leave; replies are validated when they come
 * back; an error reply becomes the DriverError it names.
 *
 * Fast failover (docs/journal.md, "Failover"): a replica that takes a command and works on it
 * for longer than a moment sends "working" beats to the reply inbox (an empty message) until
 * its reply. A command whose replica goes silent for `silenceMs` — no beat, no reply: it was
 * killed — is sent again, with the same request id and marked a resend, to the queue group, so
 * another replica finishes it (every command is idempotent by name or uuid; a resend of one already
 * answered is refused Aborted, so that it never runs again after the caller acted on the answer). This goes on until the caller's
 * deadline; when no other replica is there, the call is Unavailable at once. With `quietMs`, a
 * call that has had no sign of life at all (no beat, no reply from any replica: the cluster's
 * journals are frozen or cut off) is Unavailable after that long instead of at the deadline.
 *
 * A replica that is alive but cannot serve (its Redis or its event log down) answers Unavailable
 * at once (docs/operations.md, "When Redis or the event log is down"), and any reply ends the
 * exchange: the client never resends to it, nor waits on its beats for the deadline.
 */

import {
  type CommandRequest,
  type CommandResult,
  DriverError,
  describeZodError,
  fromWireError,
  type JournalCommand,
  journalContract,
  replyEnvelope,
  subjects,
} from "@csi/contracts";
import { createInbox, type Msg, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import { inboxPrefixOf } from "./access.js";

const envelopes = Object.fromEntries(Object.entries(journalContract).map(([k, v]) => [k, replyEnvelope(v.result)]));

/** A journal replica's "still working" beat: an empty message to the reply inbox (a reply is never empty). */
export const WORKING_BEAT = new Uint8Array(0);

/**
 * Whether a journal replica of `cluster` answers a service ping ($SRV.PING of its micro-service)
 * within `timeoutMs`: the controller's Probe and its readiness check.
 */
export async function journalAnswers(nc: NatsConnection, cluster: string, timeoutMs = 1000): Promise<boolean> {
  if (nc.isClosed()) return false;
  try {
    await nc.request(`$SRV.PING.${subjects.journalServiceName(cluster)}`, "", { timeout: timeoutMs });
    return true;
  } catch {
    return false;
  }
}

/** Default silence after which a replica is presumed dead: three missed beats of the journal's default 250 ms. */
export const DEFAULT_SILENCE_MS = 750;

export interface JournalClientOptions {
  /**
   * A replica that stays silent this long (no beat, no reply) after it was sent a command is
   * presumed dead, and the command is sent again. 0: never resend (one plain request).
   */
  silenceMs?: number;
}

type Outcome = { ok: true; value: unknown } | { ok: false; err: DriverError };

export class JournalClient {
  readonly #inbox: Inbox;
  readonly #silenceMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = 30_000,
    opts: JournalClientOptions = {},
  ) {
    this.#inbox = new Inbox(nc);
    this.#silenceMs = opts.silenceMs ?? DEFAULT_SILENCE_MS;
    void this.#watch();
  }

  /**
   * After a reconnect (the server died, or closed this connection in lame-duck mode) every command
   * in flight is sent again at once: a reply or beat sent while the connection was down is lost,
   * and waiting for the attempt's silence would hold the command `silenceMs` longer.
   */
  async #watch(): Promise<void> {
    try {
      for await (const s of this.nc.status()) if (s.type === "reconnect") this.#inbox.reconnected();
    } catch {
      // the connection closed: its iterator ends
    }
  }

  /**
   * Send one command; `timeoutMs` bounds the wait, `signal` ends it early (the caller went away),
   * `quietMs` bounds the wait for a first sign of life (a beat or a reply) from any replica.
   */
  async call<C extends JournalCommand>(
    cluster: string,
    command: C,
    request: CommandRequest<C>,
    opts: { timeoutMs?: number; signal?: AbortSignal; quietMs?: number } = {},
  ): Promise<CommandResult<C>> {
    // The request is typed (CommandRequest<C>) and the journal validates every command on arrival,
    // so it is not parsed here as well; the reply, from another process, is.
    opts.signal?.throwIfAborted();
    const envelope = envelopes[command] as ReturnType<typeof replyEnvelope>;
    const outcome = await new Exchange(this.nc, this.#inbox, cluster, this.#silenceMs, (data) => {
      const env = envelope.safeParse(JSON.parse(Buffer.from(data).toString("utf8")));
      if (!env.success) return { ok: false, err: new DriverError("Internal", `malformed journal reply: ${describeZodError(env.error)}`) };
      return env.data.ok ? { ok: true, value: env.data.result } : { ok: false, err: fromWireError(env.data.error) };
    }).run(
      subjects.command(cluster, command),
      { first: JSON.stringify(request), again: () => JSON.stringify({ ...request, resend: true }) },
      opts.timeoutMs ?? this.timeoutMs,
      opts.signal,
      opts.quietMs,
    );
    if (!outcome.ok) throw outcome.err;
    return outcome.value as CommandResult<C>;
  }
}

/**
 * One command's exchange with the queue group: every send ("attempt") gets its own reply
 * subject under one inbox, and each attempt is watched for silence on its own.
 *
 *  - a beat or a reply from an attempt shows its replica is alive (also one presumed dead);
 *  - an attempt silent for `silenceMs` is presumed dead; when no attempt is left alive, the
 *    command is sent again;
 *  - a reply ends the exchange — except an Aborted while an earlier attempt is still alive
 *    (the resend found the name locked by that very attempt): that one's reply is awaited;
 *  - no responders: Unavailable at once; no message at all within `quietMs` (if given): Unavailable;
 *  - the deadline: DeadlineExceeded (or the Aborted held back, if any).
 */
class Exchange {
  readonly #live = new Map<number, NodeJS.Timeout | undefined>();
  #attempts = 0;
  #held?: Outcome;
  #quiet?: NodeJS.Timeout;
  #settle?: (o: Outcome) => void;
  #sendAgain: () => void = () => {};

  constructor(
    private readonly nc: NatsConnection,
    private readonly inbox: Inbox,
    private readonly cluster: string,
    private readonly silenceMs: number,
    private readonly parse: (data: Uint8Array) => Outcome,
  ) {}

  /** `payload.again`: what every send after the first carries (made once, at the first resend) (the request marked as a resend: the journal runs it only if no run of it was answered). */
  run(subject: string, payload: { first: string; again: () => string }, timeoutMs: number, signal?: AbortSignal, quietMs?: number): Promise<Outcome> {
    let again: string | undefined; // made at the first resend only: most commands are sent once
    return new Promise<Outcome>((resolve) => {
      let id: number;
      try {
        // After a reconnect, one more attempt beside those alive (a lost reply is not waited for; one that comes wins).
        id = this.inbox.open(
          (msg, attempt) => this.#onMessage(msg, attempt),
          () => {
            if (this.silenceMs > 0) this.#sendAgain();
          },
        );
      } catch (err) {
        return resolve(this.#unavailable(err));
      }
      const deadline = setTimeout(
        () => this.#end(this.#held ?? this.#fail("DeadlineExceeded", `journal of cluster ${this.cluster} did not answer in time`)),
        timeoutMs,
      );
      this.#quiet =
        quietMs === undefined || quietMs >= timeoutMs
          ? undefined
          : setTimeout(() => this.#end(this.#fail("Unavailable", `no journal replica of cluster ${this.cluster} answered within ${quietMs} ms`)), quietMs);
      const onAbort = () =>
        this.#end({ ok: false, err: signal?.reason instanceof DriverError ? signal.reason : new DriverError("DeadlineExceeded", "the caller cancelled") });
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#settle = (o) => {
        this.#settle = undefined;
        clearTimeout(deadline);
        clearTimeout(this.#quiet);
        signal?.removeEventListener("abort", onAbort);
        for (const t of this.#live.values()) clearTimeout(t);
        this.#live.clear();
        this.inbox.close(id);
        resolve(o);
      };
      this.#sendAgain = () => {
        const attempt = this.#attempts++;
        this.#watch(attempt);
        if (attempt > 0 && again === undefined) again = payload.again();
        try {
          this.nc.publish(subject, attempt === 0 ? payload.first : again, { reply: this.inbox.replyTo(id, attempt) });
        } catch (err) {
          this.#end(this.#unavailable(err));
        }
      };
      this.#sendAgain();
    });
  }

  #fail(code: "Unavailable" | "DeadlineExceeded", message: string, cause?: unknown): Outcome {
    return { ok: false, err: new DriverError(code, message, cause === undefined ? undefined : { cause }) };
  }

  #unavailable(err: unknown): Outcome {
    return this.#fail("Unavailable", `journal request failed: ${String((err as Error)?.message ?? err)}`, err);
  }

  #end(o: Outcome): void {
    this.#settle?.(o);
  }

  /** (Re)arm the silence watchdog of an attempt: it is alive now. */
  #watch(attempt: number): void {
    clearTimeout(this.#live.get(attempt));
    this.#live.set(attempt, this.silenceMs > 0 ? setTimeout(() => this.#gone(attempt, "silent"), this.silenceMs) : undefined);
  }

  /** An attempt is over (its replica went silent, or nobody took it): send again if none is left alive. */
  #gone(attempt: number, why: "silent" | "no responders"): void {
    clearTimeout(this.#live.get(attempt));
    this.#live.delete(attempt);
    if (this.#live.size > 0) return;
    if (why === "silent") {
      this.#sendAgain();
      return;
    }
    const message =
      attempt === 0
        ? `no journal answers for cluster ${this.cluster}`
        : `the journal replica of cluster ${this.cluster} stopped answering and no other replica answers`;
    this.#end(this.#fail("Unavailable", message));
  }

  #onMessage(msg: Msg, attempt: number): void {
    clearTimeout(this.#quiet); // a sign of life (or a no-responders status, which ends the call anyway)
    if (msg.data.length === 0) {
      if (msg.headers?.code === 503) this.#gone(attempt, "no responders");
      else this.#watch(attempt); // a working beat
      return;
    }
    let outcome: Outcome;
    try {
      outcome = this.parse(msg.data);
    } catch {
      outcome = { ok: false, err: new DriverError("Internal", "malformed journal reply: not JSON") };
    }
    clearTimeout(this.#live.get(attempt));
    this.#live.delete(attempt);
    if (!outcome.ok && outcome.err.code === "Aborted" && this.#live.size > 0) {
      this.#held = outcome; // a resend found the name locked by an attempt that is still alive: wait for that one
      return;
    }
    this.#end(outcome);
  }
}

/**
 * One wildcard subscription per client for the replies of every call: `<inbox>.<call>.<attempt>`
 * (what nats.js's request mux does, with room for several attempts and several messages each).
 */
class Inbox {
  readonly #routes = new Map<number, (msg: Msg, attempt: number) => void>();
  readonly #onReconnect = new Map<number, () => void>();
  #prefix = "";
  #sub?: Subscription;
  #next = 0;

  constructor(private readonly nc: NatsConnection) {}

  open(route: (msg: Msg, attempt: number) => void, onReconnect?: () => void): number {
    if (!this.#sub || this.#sub.isClosed()) {
      this.#prefix = createInbox(inboxPrefixOf(this.nc)); // the role's inbox: its permissions allow no other
      this.#sub = this.nc.subscribe(`${this.#prefix}.>`, {
        callback: (_err, msg) => {
          const [call, attempt] = msg.subject.slice(this.#prefix.length + 1).split(".");
          this.#routes.get(Number(call))?.(msg, Number(attempt));
        },
      });
    }
    const id = this.#next++;
    this.#routes.set(id, route);
    if (onReconnect) this.#onReconnect.set(id, onReconnect);
    return id;
  }

  replyTo(id: number, attempt: number): string {
    return `${this.#prefix}.${id}.${attempt}`;
  }

  close(id: number): void {
    this.#routes.delete(id);
    this.#onReconnect.delete(id);
  }

  /** The connection is back: every open call's reconnect hook. */
  reconnected(): void {
    for (const f of [...this.#onReconnect.values()]) f();
  }
}
