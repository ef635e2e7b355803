/**
 * What the fold reads: one record of an event stream, a valid event written by a journal or a
 * foreign record (anything else on the stream's subjects). The shape, and how reports show a
 * foreign record; how bytes become a LogRecord is the log's rule (log/records.ts, classifyRecord).
 */
import { type ForeignRecordView, type StoredEvent, sanitizeMessage } from "@csi/contracts";
import type { Address } from "./address.js";

/** A record of the log that is not a valid event written by a journal. */
export interface ForeignRecord {
  seq: number;
  subject: string;
  foreign: Omit<ForeignRecordView, "seq" | "subject">;
  /** The aggregate whose subject it is on, if it is on one: the fold moves that aggregate's sequence past it. */
  address?: Address;
}

/** One record of an event stream, as the log reads it. */
export type LogRecord = StoredEvent | ForeignRecord;

export function isForeign(r: LogRecord): r is ForeignRecord {
  return "foreign" in r;
}

/** The valid events of some records, in their order. */
export function eventsOf(records: Iterable<LogRecord>): StoredEvent[] {
  const out: StoredEvent[] = [];
  for (const r of records) if (!isForeign(r)) out.push(r);
  return out;
}

/** How much of a subject a report shows (a foreign record's subject is anyone's: bounded and sanitised). */
const SUBJECT_BYTES = 256;

/** A foreign record as verify and purge report it. */
export function foreignView(r: ForeignRecord): ForeignRecordView {
  return { seq: r.seq, subject: shownSubject(r.subject), ...r.foreign };
}

/** A subject as a report or a log line shows it: unsafe characters replaced, at most SUBJECT_BYTES. */
export function shownSubject(subject: string): string {
  return sanitizeMessage(subject, SUBJECT_BYTES);
}
