/**
 * The journal's metrics (docs/operations.md, "Metrics and health"), kept out of the domain and
 * the app: index.ts wires them at the edges — the NATS command face (serveJournal's observer),
 * the operation's lock wait (OperationEnv.observeLockWait), the event log (its append, wrapped),
 * the Redis connection, and the projection's watermark read at scrape time.
 *
 *   csi_journal_command_seconds{command,outcome}   histogram  request in → reply out
 *   csi_journal_commands_in_flight{command}        gauge      commands taken and not yet answered
 *   csi_journal_aborted_total{command}             counter    ABORTED answers (lock busy, fenced off)
 *   csi_journal_lock_wait_seconds{outcome}         histogram  wait for an operation's locks ("acquired" | "busy")
 *   csi_journal_events_appended_total{type}        counter    events that landed in the log, by type
 *   csi_journal_projection_lag_events{cluster}     gauge      log last sequence − projection watermark, in events
 *   csi_journal_foreign_records_total{reason}      counter    foreign records met in the event log (each sequence once)
 *   csi_journal_requests_refused_total{reason}     counter    requests dropped unanswered (a reply subject that is no inbox)
 *   csi_messages_dropped_total{source,reason}      counter    device reports and node registrations dropped (runtime)
 *   csi_redis_connected / csi_redis_reconnects_total           the Redis connection
 *
 * Readiness: "redis" (the connection is ready and answers PING) and "commands" (the command
 * endpoints are subscribed); "nats" comes from watchNats.
 */

import type { StoredEvent } from "@csi/contracts";
import {
  CALL_SECONDS,
  type Counter,
  counter,
  type DropSource,
  droppedMessages,
  Gauge,
  type Histogram,
  histogram,
  type Ops,
  WAIT_SECONDS,
  within,
} from "@csi/runtime";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { JetStreamLog } from "./log/jetstream.js";
import { shownSubject } from "./log/records.js";

/** Foreign records whose sequences a process remembers (so each is logged and counted once); past it, no more are. */
const FOREIGN_TRACKED = 100_000;

/** The longest a scrape waits for the projection's watermark and the log's last sequence. */
const LAG_READ_MS = 1_000;

export class JournalMetrics {
  readonly #commandSeconds: Histogram<"command" | "outcome">;
  readonly #inFlight: Gauge<"command">;
  readonly #aborted: Counter<"command">;
  readonly #lockWait: Histogram<"outcome">;
  readonly #appended: Counter<"type">;
  readonly #foreign: Counter<"reason">;
  readonly #refused: Counter<"reason">;
  /** A message a durable queue or the registrations' reader dropped. */
  readonly dropped: (source: DropSource, reason: string) => void;

  constructor(private readonly ops: Ops) {
    const r = ops.registry;
    this.#commandSeconds = histogram(r, "csi_journal_command_seconds", "Journal commands, request to reply", ["command", "outcome"], CALL_SECONDS);
    this.#inFlight = new Gauge({
      name: "csi_journal_commands_in_flight",
      help: "Journal commands taken and not yet answered",
      labelNames: ["command"],
      registers: [r],
    });
    this.#aborted = counter(r, "csi_journal_aborted_total", "Journal commands answered ABORTED", ["command"]);
    this.#lockWait = histogram(r, "csi_journal_lock_wait_seconds", "Waits for an operation's locks (acquired, or busy: ABORTED)", ["outcome"], WAIT_SECONDS);
    this.#appended = counter(r, "csi_journal_events_appended_total", "Events appended to the event log", ["type"]);
    this.#foreign = counter(
      r,
      "csi_journal_foreign_records_total",
      "Records of the event log that are no valid event of a journal (skipped), each sequence once",
      ["reason"],
    );
    this.#refused = counter(r, "csi_journal_requests_refused_total", "Requests dropped unanswered: their reply subject is no inbox", ["reason"]);
    this.dropped = droppedMessages(r);
  }

  /** serveJournal's onRefused: a request dropped unanswered. */
  readonly refused = (reason: string): void => {
    this.#refused.inc({ reason });
  };

  /**
   * Log and count every foreign record the log's reads meet, each stream sequence once per
   * process (every read passes it again: the start-up check, catch-ups, verify, history). The
   * line names the sequence, the subject (sanitised) and why, with a short sanitised preview of
   * the body at most.
   */
  watchForeign(events: JetStreamLog, log: Logger): void {
    const seen = new Set<number>();
    let full = false;
    events.onForeign = (r) => {
      if (seen.has(r.seq) || full) return;
      if (seen.size >= FOREIGN_TRACKED) {
        full = true;
        log.warn({ tracked: FOREIGN_TRACKED }, "too many foreign records in the event log to log each: csictl verify lists them");
        return;
      }
      seen.add(r.seq);
      this.#foreign.inc({ reason: r.foreign.reason });
      log.warn(
        { seq: r.seq, subject: shownSubject(r.subject), ...r.foreign },
        "foreign record in the event log skipped (not a journal's event): csictl verify lists it, csictl log purge-foreign removes it",
      );
    };
  }

  /** serveJournal's observer: one finished command. */
  readonly command = (command: string, outcome: string, seconds: number): void => {
    this.#commandSeconds.observe({ command, outcome }, seconds);
    if (outcome === "Aborted") this.#aborted.inc({ command });
  };

  /** serveJournal's inFlight: a command started (+1) or settled (−1). */
  readonly inFlight = (command: string, delta: 1 | -1): void => {
    this.#inFlight.inc({ command }, delta);
  };

  /** OperationEnv.observeLockWait: one operation's wait for its locks. */
  readonly lockWait = (seconds: number, outcome: "acquired" | "busy"): void => {
    this.#lockWait.observe({ outcome }, seconds);
  };

  /** Count one event that landed (the event log's observer: log/observed.ts). */
  readonly appended = (e: StoredEvent): void => {
    this.#appended.inc({ type: e.event.type });
  };

  /** csi_journal_projection_lag_events{cluster}: read at scrape time; absent when it cannot be read within LAG_READ_MS. */
  projectionLag(cluster: string, read: () => Promise<{ last: number; applied: number }>): void {
    new Gauge({
      name: "csi_journal_projection_lag_events",
      help: "Events in the log past the projection's watermark (log last sequence - applied sequence); the watermark moves at each catch-up",
      labelNames: ["cluster"],
      registers: [this.ops.registry],
      async collect() {
        this.reset();
        const got = await within(
          read().catch(() => undefined),
          LAG_READ_MS,
          () => undefined,
        );
        if (got) this.set({ cluster }, Math.max(0, got.last - got.applied));
      },
    });
  }

  /** csi_redis_connected, csi_redis_reconnects_total and the "redis" readiness check. */
  watchRedis(redis: Redis): void {
    new Gauge({
      name: "csi_redis_connected",
      help: "1 while the journal's Redis connection is ready, else 0",
      registers: [this.ops.registry],
      collect() {
        this.set(redis.status === "ready" ? 1 : 0);
      },
    });
    const reconnects = counter(this.ops.registry, "csi_redis_reconnects_total", "Times the Redis connection became ready again after it was lost");
    let readyBefore = redis.status === "ready";
    redis.on("ready", () => {
      if (readyBefore) reconnects.inc();
      readyBefore = true;
    });
    this.ops.readiness.add("redis", async () => {
      if (redis.status !== "ready") return `Redis connection is ${redis.status}`;
      return (await redis.ping()) === "PONG" ? true : "Redis did not answer PING with PONG";
    });
  }
}
