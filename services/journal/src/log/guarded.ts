/**
 * The event log as the journal uses it: failing fast while the log is known to be unreachable
 * (docs/operations.md, "When Redis or the event log is down").
 *
 * Without this, every command waited for its own JetStream timeout (5 s per request; an append
 * that got no answer made the next command's catch-up wait again) while the stream had no leader
 * — a NATS cluster that lost its quorum — or the journal had no NATS connection. Now the first
 * call that gets no answer (`isUnreachable`: no ack, no responders, a JetStream API timeout) marks
 * the log down; from then on every call fails at once with UNAVAILABLE, naming why, and a probe
 * (`LogReachability`: the stream's info with a short timeout, again and again) marks it up as soon
 * as the stream answers. A lost NATS connection marks it down at once.
 *
 * Why not a circuit-breaker library (opossum): a breaker opens on a failure ratio and lets a real
 * call through as its trial; here one failure for want of an answer is enough to know, and the
 * trial is a read (stream info), never a command's append. The state is one string and a loop.
 */
import { DriverError } from "@csi/contracts";
import { shortReason } from "@csi/runtime";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { type EventLog, isUnreachable } from "./port.js";

/** How long one probe of the log waits for the stream's answer. */
export const LOG_PROBE_TIMEOUT_MS = 1_000;
/**
 * While the log is down a probe starts this often, without waiting for the one before: a stream
 * info asked while the stream elects a leader gets no answer until its timeout (nats-server
 * answers nothing in between), so probes one after another would find the new leader up to a
 * whole timeout late (issue 39: 0–1 s after the election, measured 912 ms). Overlapping, the log is
 * up at most this long after the leader answers.
 */
export const PROBE_EVERY_MS = 100;
/**
 * A read unanswered this long, the log not known down, has the log probed (`suspect`): a read asked
 * of a stream whose leader just died is never answered (nats-server says nothing until the
 * client's 5 s timeout), and a journal whose connection was not on the dead node learnt of the
 * death only from that timeout — its command's first success came 1.3–1.5 s after the new
 * leader's election (2 of 10 leader kills, `scripts/loop-leader-kill.ts`). JetStream answers a
 * read in milliseconds; under two CPU hogs in tens.
 */
export const READ_SUSPECT_MS = 500;
/** Probes waiting for an answer at most (a timeout's worth at PROBE_EVERY_MS). */
const PROBES_IN_FLIGHT = Math.ceil(LOG_PROBE_TIMEOUT_MS / PROBE_EVERY_MS);

export class LogReachability {
  #down?: string;
  /** When the log was last found unreachable (epoch ms): the probe wants signs of life since. */
  #downSince?: number;
  #probing = false;
  #suspecting = false;
  #inFlight = 0;
  #stopped = false;
  #pause?: { timer: NodeJS.Timeout; done: () => void };
  /** Told when the log answers again after being down. */
  readonly #onUp = new Set<() => void>();

  constructor(
    /** Resolves while the log answers; `downSince`: when it was found unreachable, if it is down. */
    private readonly probe: (downSince?: number) => Promise<unknown>,
    private readonly logger: Logger,
  ) {}

  /** Why the log is known to be unreachable now, or undefined. */
  down(): string | undefined {
    return this.#down;
  }

  /** `f` is called each time the log answers again after being down, until the returned function is called. */
  onUp(f: () => void): () => void {
    this.#onUp.add(f);
    return () => this.#onUp.delete(f);
  }

  /** A call found the log unreachable: down (logged once) until a probe answers. */
  failed(why: string): void {
    if (this.#down === undefined) this.logger.warn({ why }, "event log unreachable: commands that need it answer UNAVAILABLE until it answers again");
    this.#down = shortReason(why);
    this.#downSince = Date.now();
    void this.#probeUntilUp();
  }

  /**
   * A read has had no answer for READ_SUSPECT_MS while the log was not known down: one probe. No
   * answer either: the log is down (`failed`, so the probe loop runs and the reads are asked again
   * when it answers). An answer: the reads waiting are asked again now (one asked while the stream
   * had no leader is never answered; one merely slow is asked once more, and the new ask answers).
   */
  suspect(): void {
    if (this.#down !== undefined || this.#suspecting || this.#stopped) return;
    this.#suspecting = true;
    this.probe()
      .then(
        () => {
          if (this.#down === undefined && !this.#stopped) for (const f of [...this.#onUp]) f();
        },
        (err: unknown) => this.failed(reasonOf(err)),
      )
      .finally(() => {
        this.#suspecting = false;
      });
  }

  /** Readiness: the reason while down; else one probe (a failure marks it down). */
  async check(): Promise<true | string> {
    if (this.#down) return `event log unreachable: ${this.#down}`;
    try {
      await this.probe();
      return true;
    } catch (err) {
      this.failed(reasonOf(err));
      return `event log unreachable: ${reasonOf(err)}`;
    }
  }

  /** Down while the NATS connection is: a disconnect marks the log down (the probe brings it back after the reconnect). */
  watch(nc: NatsConnection): void {
    void (async () => {
      for await (const s of nc.status()) if (s.type === "disconnect") this.failed("not connected to NATS");
    })().catch(() => {});
  }

  /** No more probes (the journal stops). */
  stop(): void {
    this.#stopped = true;
    if (this.#pause) clearTimeout(this.#pause.timer);
    this.#pause?.done();
  }

  #pauseFor(ms: number): Promise<void> {
    return new Promise<void>((done) => {
      this.#pause = { timer: setTimeout(done, ms), done };
    }).finally(() => {
      this.#pause = undefined;
    });
  }

  async #probeUntilUp(): Promise<void> {
    if (this.#probing) return;
    this.#probing = true;
    const since = Date.now();
    try {
      while (this.#down !== undefined && !this.#stopped) {
        if (this.#inFlight < PROBES_IN_FLIGHT) this.#probeOnce(since);
        await this.#pauseFor(PROBE_EVERY_MS);
      }
    } finally {
      this.#probing = false;
    }
  }

  /** One probe: an answer marks the log up (and ends the pause of the loop above); a failure only says why it is still down. */
  #probeOnce(since: number): void {
    this.#inFlight++;
    this.probe(this.#downSince)
      .then(
        () => {
          if (this.#down === undefined || this.#stopped) return;
          this.#down = undefined;
          this.logger.info({ downMs: Date.now() - since }, "event log answers again");
          this.#pause?.done();
          for (const f of [...this.#onUp]) f();
        },
        (err: unknown) => {
          if (this.#down !== undefined) this.#down = reasonOf(err);
        },
      )
      .finally(() => this.#inFlight--);
  }
}

/** Why a call failed, with its cause: printable, at most 160 characters (it travels in replies and log lines). */
function reasonOf(err: unknown): string {
  const cause = (err as { cause?: { message?: string } })?.cause?.message;
  const msg = err instanceof Error ? err.message : String(err);
  return shortReason(cause ? `${msg}: ${cause}` : msg);
}

/** What a command is told while the log is down: its reason, said once ("event log unavailable: timeout", never twice). */
export const logUnavailable = (down: string) => (down.startsWith("event log unavailable") ? down : `event log unavailable: ${down}`);

/** `inner`, failing fast with Unavailable while `reach` knows the log is down, and telling it of every failure for want of an answer. */
export function guardedLog(inner: EventLog, reach: LogReachability): EventLog {
  const guard = async <T>(f: () => Promise<T>, callers = new Set<unknown>()): Promise<T> => {
    const down = reach.down();
    if (down) throw new DriverError("Unavailable", logUnavailable(down));
    try {
      return await f();
    } catch (err) {
      const fromCaller = callers.has(err) || callers.has((err as { cause?: unknown }).cause);
      if (isUnreachable(err) && !fromCaller) reach.failed(reasonOf(err));
      throw err;
    }
  };
  /**
   * A read asked again as soon as the log answers again: one asked of a stream whose leader died
   * with it (no answer until its timeout, 5 s) would otherwise hold its command past the new
   * leader's election. One unanswered for READ_SUSPECT_MS has the log probed (`suspect`), so a
   * journal that had not noticed the death finds out without waiting for that timeout. Reads
   * only: an append asked twice could land twice.
   */
  const reread = <T>(f: () => Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      let latest = 0;
      const ask = () => {
        const mine = ++latest;
        const off = reach.onUp(() => {
          if (mine === latest) ask();
        });
        const suspicion = setTimeout(() => mine === latest && reach.suspect(), READ_SUSPECT_MS);
        const settled = () => {
          off();
          clearTimeout(suspicion);
        };
        // Only the latest ask settles the read: an abandoned one's late answer (or timeout) is dropped.
        f().then(
          (v) => {
            settled();
            if (mine === latest) resolve(v);
          },
          (err: unknown) => {
            settled();
            if (mine === latest) reject(err);
          },
        );
      };
      ask();
    });
  return {
    append: (a, meta) => guard(() => inner.append(a, meta)),
    appendAll: (list, meta) => guard(() => inner.appendAll(list, meta)),
    lastSeqOf: (s) => guard(() => reread(() => inner.lastSeqOf(s))),
    lastOf: (s) => guard(() => reread(() => inner.lastOf(s))),
    recordAt: (seq) => guard(() => reread(() => inner.recordAt(seq))),
    deleteRecord: (seq) => guard(() => inner.deleteRecord(seq)),
    info: () => guard(() => reread(() => inner.info())),
    history: (s) => guard(() => reread(() => inner.history(s))),
    read: (from, onBatch, opts) => {
      // What the caller's own onBatch throws (a Redis failure while replaying, say) says nothing of the log.
      const callers = new Set<unknown>();
      const batch = (b: Parameters<typeof onBatch>[0]) =>
        onBatch(b).catch((err: unknown) => {
          callers.add(err);
          throw err;
        });
      return guard(() => inner.read(from, batch, opts), callers);
    },
  };
}
