/**
 * The event log as the journal's app code sees it (a port): append events fenced on their
 * subject's last sequence, read them back in order. Two implementations, proven equal by one
 * contract suite (test/contracts/event-log.contract.ts): the JetStream stream
 * (adapters/event-log.ts, production) and an in-memory log (adapters/memory-log.ts, for fast
 * tests of the runner and the deciders' wiring).
 */
import type { Actor, EventBody, StoredEvent } from "@csi/contracts";
import type { LogRecord } from "../domain/log-records.js";

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
