/**
 * The event log in memory: what JetStreamLog (event-log.ts) does, observably, without a server —
 * for fast tests of the runner and the deciders' wiring. It also states the log's semantics in
 * few lines (test/contracts/event-log.contract.ts holds both to them):
 *
 * - A record is a subject and raw bytes at a sequence; sequences start at 1 and grow across
 *   subjects, and a removed record's sequence is never given again.
 * - Every read classifies the bytes (`classifyRecord`): what is not a valid event of this log
 *   reads as a foreign record, however it got there (`putRaw`: how tests put it there).
 * - An append is fenced on its subject's last sequence (the last record there, whatever it is);
 *   after a failed fence it goes on past foreign or removed records only (`appendFenced`).
 * - `info().last` is the sequence of the last record there (a removed one at the end does not
 *   count); none there: the last sequence given, as JetStream reports it.
 */
import { randomUUID } from "node:crypto";
import type { StoredEvent } from "@csi/contracts";
import type { Append, AppendMeta, EventLog, LogInfo } from "./port.js";
import { SequenceConflict } from "./port.js";
import { classifyRecord, type LogOf, type LogRecord } from "./records.js";
import { appendEach, appendFenced, type EventLogOptions, historyOf, stampEvent } from "./rules.js";

interface RawRecord {
  seq: number;
  subject: string;
  data: Uint8Array;
}

export class MemoryLog implements EventLog {
  readonly #id = `memory-${randomUUID()}`;
  readonly #of: LogOf;
  /** The records there, by sequence (a Map keeps them in the order they were put: sequence order). */
  readonly #records = new Map<number, RawRecord>();
  /** The last sequence given. */
  #seq = 0;

  constructor(opts: Pick<EventLogOptions, "cluster" | "instance">) {
    this.#of = { cluster: opts.cluster, instance: opts.instance };
  }

  /** Store a raw message, as anyone publishing on the log's subjects could (tests: foreign records); its sequence. */
  putRaw(subject: string, data: Uint8Array | string): number {
    const seq = ++this.#seq;
    this.#records.set(seq, { seq, subject, data: typeof data === "string" ? Buffer.from(data, "utf8") : data });
    return seq;
  }

  /** Store `data` if the subject's last sequence is `expected` (when set): all in one step, like the server's check. */
  #putFenced(subject: string, data: string, expected: number | undefined): number {
    if (expected !== undefined && expected !== (this.#lastRaw(subject)?.seq ?? 0)) throw new SequenceConflict(subject);
    return this.putRaw(subject, data);
  }

  async append(a: Append, meta: AppendMeta): Promise<StoredEvent> {
    const { event, json } = stampEvent(a.body, meta);
    const seq = await appendFenced(this, a, async (expected) => this.#putFenced(a.subject, json, expected));
    return { seq, subject: a.subject, event };
  }

  appendAll(list: Append[], meta: AppendMeta): Promise<StoredEvent[]> {
    return appendEach(list, (a) => this.append(a, meta));
  }

  #lastRaw(subject?: string): RawRecord | undefined {
    const all = [...this.#records.values()];
    return subject === undefined ? all.at(-1) : all.findLast((r) => r.subject === subject);
  }

  #record(raw: RawRecord | undefined): LogRecord | undefined {
    return raw && classifyRecord(this.#of, raw);
  }

  async lastSeqOf(subject: string): Promise<number> {
    return this.#lastRaw(subject)?.seq ?? 0;
  }

  async lastOf(subject: string): Promise<LogRecord | undefined> {
    return this.#record(this.#lastRaw(subject));
  }

  async recordAt(seq: number): Promise<LogRecord | undefined> {
    return this.#record(this.#records.get(seq));
  }

  async deleteRecord(seq: number): Promise<boolean> {
    return this.#records.delete(seq);
  }

  async info(): Promise<LogInfo> {
    return { id: this.#id, last: this.#lastRaw()?.seq ?? this.#seq };
  }

  history(subjectList: string[]): Promise<LogRecord[]> {
    return historyOf(this, subjectList);
  }

  async read(fromSeq: number, onBatch: (batch: LogRecord[]) => Promise<unknown>, opts: Parameters<EventLog["read"]>[2] = {}): Promise<number> {
    const end = opts.subject === undefined ? (await this.info()).last : await this.lastSeqOf(opts.subject);
    const last = opts.to === undefined ? end : Math.min(end, opts.to);
    const records = [...this.#records.values()]
      .filter((r) => r.seq >= fromSeq && r.seq <= last && (opts.subject === undefined || r.subject === opts.subject))
      .map((r) => classifyRecord(this.#of, r));
    const size = opts.batch ?? 512;
    for (let i = 0; i < records.length; i += size) if ((await onBatch(records.slice(i, i + size))) === false) break;
    return last;
  }
}
