/**
 * The event log as the journal's app code sees it (a port): append events fenced on their
 * subject's last sequence, read them back in order. Two implementations, proven equal by one
 * contract suite (test/contracts/event-log.contract.ts): the JetStream stream
 * (jetstream.ts, production) and an in-memory log (memory.ts, for fast tests of the runner and
 * the deciders' wiring). The port owns its words: its meta types and its errors (a fence, an
 * uncertain append, a refusal, a batch's partial landing), so no caller imports an adapter.
 */
import { type Actor, DriverError, type EventBody, type StoredEvent } from "@csi/contracts";
import type { LogRecord } from "../fold/log-record.js";

/**
 * Records per hand-over of a read that folds the log (a rebuild, the start-up check, replay,
 * verify): the records of a batch are alive until it is folded, so a smaller batch leaves the
 * young-generation GC less to copy (docs/journal.md, "Replay speed").
 */
export const FOLD_BATCH = 512;

export interface Append {
  subject: string;
  body: EventBody;
  /** Last sequence of the subject this writer saw (0: the subject must be empty); omitted: no fence (reports). */
  expectedSeq?: number;
}

export interface AppendMeta {
  requestId: string;
  actor: Actor;
  time: string;
}

/** The log's identity (a recreated log is another log) and the sequence of its last record. */
export interface LogInfo {
  id: string;
  last: number;
}

export interface EventLog {
  /**
   * Stamp and append one event; returns it as stored. A failed fence is a SequenceConflict
   * (unless everything on the subject after `expectedSeq` is foreign: then it is appended after
   * them); no answer is an AppendUncertain (it may have landed).
   */
  append(a: Append, meta: AppendMeta): Promise<StoredEvent>;
  /** Several appends at once, returned in the order given; if any failed, an AppendError says which landed. */
  appendAll(list: Append[], meta: AppendMeta): Promise<StoredEvent[]>;
  /** Last sequence of one subject (0 when it has none), whatever the record there is. */
  lastSeqOf(subject: string): Promise<number>;
  /** The last record of one subject, if any. */
  lastOf(subject: string): Promise<LogRecord | undefined>;
  /** The record at one stream sequence, if there is one. */
  recordAt(seq: number): Promise<LogRecord | undefined>;
  /** Remove the record at `seq` (audit.purge of foreign records only). False: it was not there. */
  deleteRecord(seq: number): Promise<boolean>;
  info(): Promise<LogInfo>;
  /** Every record of these subjects, in log order. */
  history(subjects: string[]): Promise<LogRecord[]>;
  /**
   * Read records in order from `fromSeq` to the log's end as it is now (or `to`), optionally of
   * one subject, in batches; `onBatch` returning false stops the read. Returns the last sequence
   * the read was bounded by.
   */
  read(fromSeq: number, onBatch: (batch: LogRecord[]) => Promise<unknown>, opts?: { subject?: string; batch?: number; to?: number }): Promise<number>;
}

// ------------------------------------------------------------------ the port's errors

export class SequenceConflict extends DriverError {
  constructor(subject: string, options?: { cause?: unknown }) {
    super("Aborted", `concurrent change on ${subject}: the operation was fenced off, retry`, options);
  }
}

/**
 * An append got no answer (no ack in time, the connection or the stream leader went away): it may
 * or may not have landed. Unavailable to the caller, like any unreachable log; the journal then
 * distrusts its projection (it cannot know whether its own event is in the log) and catches up
 * with the log before the next command reads it.
 */
export class AppendUncertain extends DriverError {
  constructor(options?: { cause?: unknown }) {
    super("Unavailable", "event log unavailable", options);
  }
}

/** JetStream answered an append with a refusal other than the fence (a limit, a sealed stream): the log is there, it said no. */
export class AppendRefused extends DriverError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("Unavailable", `event log refused the append: ${message}`, options);
  }
}

/**
 * Some appends of a batch failed. `landed[i]` is the i-th append as stored, or undefined if it
 * did not land; the code and message are those of the first failure (its cause).
 */
export class AppendError extends DriverError {
  constructor(
    readonly landed: (StoredEvent | undefined)[],
    cause: unknown,
    /** Some failed append got no answer: it may have landed after all. */
    readonly uncertain = cause instanceof AppendUncertain,
  ) {
    const first = cause instanceof DriverError ? cause : new DriverError("Internal", "append failed");
    super(first.code, first.message, { cause });
  }
}

/** Whether an append (or one of a batch) may have landed although it failed. */
export function isUncertain(err: unknown): boolean {
  return err instanceof AppendUncertain || (err instanceof AppendError && err.uncertain);
}

/**
 * Whether a failure of the log means it could not be reached (no answer in time, no stream
 * listening, no NATS connection, JetStream unavailable) — not a refusal or a fence, where the log
 * answered. The journal then fails fast until the log answers again (guarded.ts).
 */
export function isUnreachable(err: unknown): boolean {
  if (!(err instanceof DriverError) || err.code !== "Unavailable") return false;
  return !(err instanceof AppendRefused || (err instanceof AppendError && err.cause instanceof AppendRefused));
}

/** Whether an append failed on its sequence fence (another writer changed the subject first). */
export function isFenced(err: unknown): boolean {
  return err instanceof SequenceConflict || (err instanceof AppendError && err.cause instanceof SequenceConflict);
}
