/**
 * The event log: one JetStream stream per storage cluster (file storage, kept forever), one
 * subject per aggregate. Appends carry the expected last sequence of their subject, so a
 * writer that lost its lock cannot overwrite a newer state: the server refuses the append with
 * "wrong last sequence" and the writer gets a SequenceConflict — unless everything on the subject
 * after what the writer decided on is foreign (not a journal's event) or was removed: then the
 * append goes on against the subject's last sequence (`fenceBeyondForeign`).
 *
 * What any EventLog does the same way (stamping, the fence rule, a batch, a history) is written
 * once, in rules.ts; its errors are the port's (port.ts). The in-memory log (memory.ts) uses both.
 */

import { randomUUID } from "node:crypto";
import { DriverError, type StoredEvent, subjects } from "@csi/contracts";
import { AckedPublisher, ensureStream, lastMessageOf, PublishRefused, reachingNats, readStreamRange, retry } from "@csi/runtime";
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { type Append, type AppendMeta, AppendRefused, AppendUncertain, type EventLog, type LogInfo, SequenceConflict } from "./port.js";
import { classifyRecord, type ForeignRecord, isForeign, type LogOf, type LogRecord } from "./records.js";
import { appendEach, appendFenced, type EventLogOptions, historyOf, stampEvent } from "./rules.js";

/**
 * Messages one pull of a read asks for (the next pull runs while these are handed over). Small on
 * purpose: every message waiting in the reader is an object alive at the next young-generation GC,
 * which copies it (pulls of 4,096 cost a replay about 1.5 µs of GC per event; docs/journal.md,
 * "Replay speed").
 */
const PULL_MESSAGES = 512;

/** How long a journal's start waits for the event stream to have a leader in touch with a quorum (a cluster starting, an election): `answers`. */
const LOG_START_WAIT_MS = 300_000;

/** Reads of at most this many sequences (no subject filter) get each record by its sequence instead of through a consumer (`#readDirect`). */
const DIRECT_READ_MAX = 32;

/** JetStream's API error code for a failed expected-last-subject-sequence check. */
export const JS_WRONG_LAST_SEQUENCE = 10071;

/** How a stream of event records is made: file storage, kept forever (the log, and a restore's staging stream). */
export function logStreamConfig(
  name: string,
  wildcard: string,
  replicas: number,
  description: string,
  metadata?: Record<string, string>,
): Partial<StreamConfig> & { name: string } {
  return {
    name,
    subjects: [wildcard],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    num_replicas: replicas,
    description,
    ...(metadata ? { metadata } : {}),
  };
}

/**
 * Who a log is, beyond its stream (docs/operations.md, "A pool knows its log"): the identity its
 * pools are bound to. Kept in the stream's metadata: made when a journal creates the stream, carried
 * by a backup and put back by its restore (with the time of the restore), so that a log restored
 * is the same log and one made anew over lost data is another. A stream made before identities
 * (or by nats-server 2.9, which keeps no metadata) is known by its creation time.
 */
export interface LogIdentity {
  identity: string;
  /** When a restore replaced the log (ISO time): images made before it may be volumes the restored log does not know. */
  restoredAt?: string;
  /** Records in the stream (0: a log that never held anything). */
  records: number;
}
export const LOG_ID_KEY = "csi_log_id";
export const LOG_RESTORED_KEY = "csi_restored_at";

/** The identity of a stream, from its info. Pure. */
export function identityOf(info: Pick<StreamInfo, "config" | "created" | "state">): LogIdentity {
  const meta = info.config.metadata ?? {};
  const restoredAt = meta[LOG_RESTORED_KEY];
  return { identity: meta[LOG_ID_KEY] ?? `created:${info.created}`, ...(restoredAt ? { restoredAt } : {}), records: info.state.messages };
}

/** A replica the leader has not heard from in this long is out of touch (Raft heartbeats come every second). */
export const REPLICA_SILENT_NS = 3_000_000_000;

/**
 * Why a replicated stream cannot take an append although its leader answers, or undefined: a
 * leader that lost its quorum (two of three nats-servers gone) still answers reads for seconds
 * before it steps down, while every append waits for its timeout. The leader counts itself; each
 * replica counts while current, online and heard from within `silentNs` (REPLICA_SILENT_NS, or
 * less: see `probe`).
 */
export function noQuorum(info: Pick<StreamInfo, "config" | "cluster">, silentNs = REPLICA_SILENT_NS): string | undefined {
  const replicas = info.config.num_replicas ?? 1;
  if (replicas <= 1) return undefined;
  if (!info.cluster?.leader) return "the stream has no leader";
  const peers = info.cluster.replicas ?? [];
  const inTouch = 1 + peers.filter((p) => p.current && !p.offline && p.active < silentNs).length;
  const quorum = Math.floor(replicas / 2) + 1;
  if (inTouch >= quorum) return undefined;
  return `the stream's leader is in touch with ${inTouch} of its ${replicas} replicas, below a quorum of ${quorum}`;
}

/** A stream's info, or undefined when it does not exist. */
export function streamInfoOrNone(jsm: JetStreamManager, stream: string): Promise<StreamInfo | undefined> {
  return jsm.streams.info(stream).catch((err: unknown) => {
    if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return undefined;
    throw err;
  });
}

/** The event log on JetStream (the production EventLog). */
export class JetStreamLog implements EventLog {
  readonly stream: string;
  #jsm?: JetStreamManager;
  readonly #publisher: AckedPublisher;
  readonly #of: LogOf;
  /**
   * Told of every foreign record a read meets (each read that passes it: a record is met again by
   * every later read), before it is handed over; the journal logs and counts them (metrics.ts).
   */
  onForeign: (r: ForeignRecord) => void = () => {};
  #probeJsm?: Promise<JetStreamManager>;

  constructor(
    private readonly nc: NatsConnection,
    private readonly opts: EventLogOptions,
  ) {
    this.stream = subjects.streamName(opts.cluster);
    this.#publisher = new AckedPublisher(nc);
    this.#of = { cluster: opts.cluster, instance: opts.instance };
  }

  /** A raw message of this log as a record: an event, or a foreign record (told to `onForeign`). */
  #record(m: { seq: number; subject: string; data: Uint8Array }): LogRecord {
    const r = classifyRecord(this.#of, m);
    if (isForeign(r)) this.onForeign(r);
    return r;
  }

  /**
   * JetStream's API, without its account-info check (`checkAPI`): that check is a request the meta
   * leader answers, so a journal that first needed the log while the meta group had no leader (two
   * of three nodes gone) got a bare timeout instead of UNAVAILABLE (test/log-quorum.test.ts), and
   * every first call paid a round trip for it. A log without JetStream fails at its first call.
   */
  async #manager(): Promise<JetStreamManager> {
    this.#jsm ??= await jetstreamManager(this.nc, { checkAPI: false, ...(this.opts.apiPrefix ? { apiPrefix: this.opts.apiPrefix } : {}) });
    return this.#jsm;
  }

  /**
   * Create the stream if it does not exist (idempotent; safe from several replicas at once: the
   * first one's identity wins), with a new identity or the one given (a restore's).
   */
  async ensureStream(identity: { identity?: string; restoredAt?: string } = {}): Promise<void> {
    const jsm = await this.#manager();
    const { cluster, replicas } = this.opts;
    const metadata = { [LOG_ID_KEY]: identity.identity ?? randomUUID(), ...(identity.restoredAt ? { [LOG_RESTORED_KEY]: identity.restoredAt } : {}) };
    await ensureStream(
      jsm,
      logStreamConfig(this.stream, subjects.eventsWildcard(cluster), replicas ?? 1, `CSI journal events of cluster ${cluster}`, metadata),
    );
  }

  /** The log's identity (its stream's), or undefined when the stream does not exist. */
  async identity(): Promise<LogIdentity | undefined> {
    const info = await reachingNats("event log", async () => streamInfoOrNone(await this.#manager(), this.stream));
    return info && identityOf(info);
  }

  /** Last sequence of one subject (0 when it has none), whatever the record there is: the subject's fence. */
  async lastSeqOf(subject: string): Promise<number> {
    return (await lastMessageOf(this.#manager(), this.stream, subject))?.seq ?? 0;
  }

  /** The last record of one subject (an event or a foreign record), if it has any. */
  async lastOf(subject: string): Promise<LogRecord | undefined> {
    const msg = await lastMessageOf(this.#manager(), this.stream, subject);
    return msg ? this.#record(msg) : undefined;
  }

  /** The record at one stream sequence; undefined when there is none (never written, or removed). */
  async recordAt(seq: number): Promise<LogRecord | undefined> {
    const msg = await this.#rawAt(seq);
    return msg ? this.#record(msg) : undefined;
  }

  /**
   * Remove the record at `seq` from the stream (JetStream's STREAM.MSG.DELETE, its body erased).
   * Only `audit.purge` calls it, for a record it has just read again and found foreign. False: it
   * was not there (any more).
   */
  async deleteRecord(seq: number): Promise<boolean> {
    const jsm = await this.#manager();
    return reachingNats("event log", () =>
      jsm.streams.deleteMessage(this.stream, seq, true).catch(async (err: unknown) => {
        // nats-server answers a sequence without a record with one of several codes (10037, 10043,
        // 10057 on 2.9): whatever the code, a record that is not there was not removed.
        if (err instanceof JetStreamApiError && !(await this.#rawAt(seq))) return false;
        throw err;
      }),
    );
  }

  /**
   * Whether the stream could take an append now: its leader answers its info within `timeoutMs`
   * and hears from a quorum of its replicas (`noQuorum`). Resolves, or rejects with Unavailable
   * saying why. The journal's probe while the log is known down.
   *
   * `downSince` (epoch ms): when the journal found the log unreachable. A leader learns that its
   * replicas are gone only from their silence, a second or more later (Raft heartbeats come every
   * second), so a probe right after the incident would still find them "in touch": a replica then
   * counts only if the leader heard from it after `downSince` (its `active` is shorter than the
   * time since; both are durations, so the clocks of the two machines need not agree).
   */
  async probe(timeoutMs: number, downSince?: number): Promise<void> {
    this.#probeJsm ??= jetstreamManager(this.nc, { timeout: timeoutMs, checkAPI: false, ...(this.opts.apiPrefix ? { apiPrefix: this.opts.apiPrefix } : {}) });
    const jsm = await this.#probeJsm;
    const asked = Date.now();
    const info = await reachingNats("event log", () => jsm.streams.info(this.stream));
    const why = noQuorum(info, downSince === undefined ? REPLICA_SILENT_NS : Math.min(REPLICA_SILENT_NS, Math.max(0, asked - downSince) * 1e6));
    if (why) throw new DriverError("Unavailable", `event log: ${why}`);
  }

  async lastSeq(): Promise<number> {
    return (await this.info()).last;
  }

  /**
   * The log's identity (its stream's creation time: a recreated stream is another log) and last
   * sequence: of its last record that is there. JetStream keeps `last_seq` when the records at the
   * end are removed (`audit.purge` of foreign records): a read up to it would wait for a record
   * that never comes, and a watermark could never reach it.
   */
  async info(): Promise<LogInfo> {
    const jsm = await this.#manager();
    const info = await reachingNats("event log", () => jsm.streams.info(this.stream));
    // A leader cut off from its replicas (a partition: it has not noticed yet, or steps down only
    // later) still answers, with the stream as it was when it lost them, while the majority's new
    // leader goes on. A last sequence from it would bound a catch-up short of what was acknowledged,
    // and a projection ahead of it would be taken for damage and rebuilt from that stale view
    // (`chaos --ha --hosts`: an acknowledged volume NotFound after a split): not the log's end.
    const why = noQuorum(info);
    if (why) throw new DriverError("Unavailable", `event log: ${why}`);
    return this.#logInfo(info);
  }

  /**
   * Waits until the log tells its end (`info`: a stream leader in touch with a quorum): a stream
   * just made, or one electing a leader, answers Unavailable for a few seconds, and a journal's
   * start reads the log's end next (the pools' binding, the projection's check). `waiting` is told
   * each Unavailable's reason; gives up after `waitMs` (LOG_START_WAIT_MS) with the last one.
   */
  async answers(waiting: (why: string) => void = () => {}, waitMs = LOG_START_WAIT_MS): Promise<LogInfo> {
    return retry(() => this.info(), {
      tries: Number.POSITIVE_INFINITY,
      deadline: Date.now() + waitMs,
      firstDelayMs: 100,
      maxDelayMs: 1000,
      jitter: 0.2,
      retryIf: (err) => {
        const again = err instanceof DriverError && err.code === "Unavailable";
        if (again) waiting(err.message);
        return again;
      },
    });
  }

  async #logInfo(info: StreamInfo): Promise<LogInfo> {
    const { first_seq: first, last_seq: last, num_deleted: deleted } = info.state;
    return { id: info.created, last: deleted > 0 ? await this.#lastPresent(first, last, deleted) : last };
  }

  /**
   * Where a read of a subject whose last sequence reads as 0 ends: 0 (nothing to read) when the
   * stream does not exist or never had a record removed — the subject is empty —, else the log's
   * last sequence (nats-server 2.9 reports 0 for a subject whose newest record was removed).
   */
  async #endOfUnknownSubject(): Promise<number> {
    const jsm = await this.#manager();
    const info = await reachingNats("event log", () => streamInfoOrNone(jsm, this.stream));
    return info && info.state.num_deleted > 0 ? (await this.#logInfo(info)).last : 0;
  }

  /** The last sequence from `last` down that holds a record (at most `deleted` + 1 looks; each one round trip). */
  async #lastPresent(first: number, last: number, deleted: number): Promise<number> {
    for (let seq = last; seq >= first && seq >= last - deleted; seq--) if (await this.#rawAt(seq)) return seq;
    return Math.max(0, first - 1);
  }

  async #rawAt(seq: number): Promise<StoredMsg | undefined> {
    const jsm = await this.#manager();
    return reachingNats("event log", () =>
      jsm.streams.getMessage(this.stream, { seq }).then(
        (m) => m ?? undefined,
        (err: unknown) => {
          if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound) return undefined;
          throw err;
        },
      ),
    );
  }

  /**
   * Stamp and append one event; returns its stream sequence. The body is a typed EventBody built
   * by this process (the commands it came from were validated on arrival), so it is not parsed
   * again here; what is read back from the log is.
   */
  async append(a: Append, meta: AppendMeta): Promise<StoredEvent> {
    const { event, json } = stampEvent(a.body, meta);
    const seq = await appendFenced(this, a, (expected) => this.#publish(a.subject, json, expected));
    return { seq, subject: a.subject, event };
  }

  /** One publish, fenced on `expected` if set: a failed fence is a SequenceConflict, a refusal Unavailable, no answer an AppendUncertain. */
  async #publish(subject: string, json: string, expected: number | undefined): Promise<number> {
    try {
      return await this.#publisher.publish(subject, json, expected === undefined ? {} : { expectedLastSubjectSequence: expected });
    } catch (err) {
      if (err instanceof PublishRefused && err.errCode === JS_WRONG_LAST_SEQUENCE) throw new SequenceConflict(subject, { cause: err });
      if (err instanceof PublishRefused) throw new AppendRefused(err.message, { cause: err });
      throw new AppendUncertain({ cause: err });
    }
  }

  /**
   * Append several events to different subjects in one round trip (they are published
   * concurrently) and return them as stored, in the order given. Every append is tried; if any
   * failed, the AppendError says which landed, so the caller can undo them.
   */
  appendAll(list: Append[], meta: AppendMeta): Promise<StoredEvent[]> {
    return appendEach(list, (a) => this.append(a, meta));
  }

  /** Every record of these subjects, in log order (an aggregate's history; foreign records included, marked). */
  history(subjectList: string[]): Promise<LogRecord[]> {
    return historyOf(this, subjectList);
  }

  /**
   * Read records in order from `fromSeq` up to the stream's end as it is now, or up to `to` if
   * that comes first (optionally only one subject), handing them over in batches of `batch` —
   * events, and foreign records marked as such (log/records.ts), so a fold skips them;
   * `onBatch` returning false stops the read there. Returns the last sequence the read was
   * bounded by. Streaming with bounded memory (`readStreamRange`: pulls of PULL_MESSAGES, the
   * next on its way while batches are handed over).
   */
  async read(
    fromSeq: number,
    onBatch: (batch: LogRecord[]) => Promise<unknown>,
    opts: { subject?: string; batch?: number; to?: number } = {},
  ): Promise<number> {
    // A subject's last sequence reads as 0 once its newest record was removed (nats-server 2.9, until
    // the next append there): then the stream's end bounds the read (a read ends with its last pending record anyway).
    const end = opts.subject ? (await this.lastSeqOf(opts.subject)) || (await this.#endOfUnknownSubject()) : await this.lastSeq();
    const last = opts.to === undefined ? end : Math.min(end, opts.to);
    if (last < fromSeq) return last;
    const size = opts.batch ?? 512;
    if (!opts.subject && last - fromSeq < DIRECT_READ_MAX && (await this.#readDirect(fromSeq, last, size, onBatch))) return last;
    const jsm = await this.#manager();
    const range = readStreamRange(this.nc, jsm, this.stream, {
      from: fromSeq,
      to: last,
      pull: Math.max(size, PULL_MESSAGES),
      ...(opts.subject ? { subject: opts.subject } : {}),
    });
    let batch: LogRecord[] = [];
    await reachingNats("event log", async () => {
      for await (const chunk of range) {
        for (const m of chunk) {
          batch.push(this.#record(m));
          if (batch.length < size) continue;
          const full = batch;
          batch = [];
          if ((await onBatch(full)) === false) return;
        }
      }
      if (batch.length > 0) await onBatch(batch);
    });
    return last;
  }

  /**
   * A short stretch read by sequence (a message get each, asked at once): what a catch-up after an
   * append without an answer reads. The stream's leader answers a get alone, where a consumer (the
   * long reads above) must be made by the meta leader: after a node that led both was killed, the
   * catch-up then waited for a second election (4–9 s, drawn apart from the stream's).
   *
   * Only when every sequence answers with its record; false (nothing handed over) when one does
   * not, and the caller reads the stretch through a consumer. A sequence without a record may be
   * one audit.purge removed, but also one that a leader elected a moment ago has not stored yet,
   * or the unanswered append a lost leader held alone (the new leader writes another record at
   * that sequence): skipped here, the projection's watermark passed a record it never applied,
   * and a journal answered from it (an acknowledged volume NotFound, a delete of a live volume
   * answered as done; npm run chaos -- --ha --hosts, ha.test's rolling restart).
   */
  async #readDirect(fromSeq: number, last: number, size: number, onBatch: (batch: LogRecord[]) => Promise<unknown>): Promise<boolean> {
    const seqs = Array.from({ length: last - fromSeq + 1 }, (_, i) => fromSeq + i);
    const got = await Promise.all(seqs.map((seq) => this.#rawAt(seq)));
    if (got.some((m) => m === undefined)) return false;
    const records = got.map((m) => this.#record(m as StoredMsg));
    for (let i = 0; i < records.length; i += size) if ((await onBatch(records.slice(i, i + size))) === false) break;
    return true;
  }
}

/** The name tests and tools have used for it. */
export { JetStreamLog as EventLog };
