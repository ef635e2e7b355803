/**
 * What any EventLog does the same way, written once for the JetStream log (jetstream.ts) and the
 * in-memory one (memory.ts): an event stamped, the fence rule (past foreign records), a batch of
 * appends, a history read.
 */
import { DriverError, type EventBody, type JournalEvent, MAX_WRITTEN_EVENT_BYTES, type StoredEvent } from "@csi/contracts";
import type { LogRecord } from "../fold/log-record.js";
import { isForeign } from "../fold/log-record.js";
import { type Append, AppendError, type AppendMeta, AppendUncertain, type EventLog, SequenceConflict } from "./port.js";

/** How often one append looks past foreign records on its subject before it counts as fenced off. */
const FENCE_RECHECKS = 3;

export interface EventLogOptions {
  cluster: string;
  /** The instance whose request names this log's reader keeps: a name subject of another instance holds foreign records. Unset: any instance's. */
  instance?: string;
  replicas?: number;
  /** Reads through this JetStream API prefix (csictl in the account layout reads the log through the API it imports). */
  apiPrefix?: string;
}

/** An event as a journal writes it (`{ ...body, v: 1, ...meta }`) and its JSON; ResourceExhausted when larger than an event may be. */
export function stampEvent(body: EventBody, meta: AppendMeta): { event: JournalEvent; json: string } {
  const event = { ...body, v: 1, ...meta } as JournalEvent;
  const json = JSON.stringify(event);
  // A record past MAX_EVENT_BYTES is foreign to every reader of the log (log/records.ts), and the
  // publish's headers count against max_payload: never write more than MAX_WRITTEN_EVENT_BYTES.
  const bytes = Buffer.byteLength(json, "utf8");
  if (bytes > MAX_WRITTEN_EVENT_BYTES)
    throw new DriverError("ResourceExhausted", `a ${event.type} of ${bytes} bytes is larger than an event may be (${MAX_WRITTEN_EVENT_BYTES})`);
  return { event, json };
}

/**
 * Store one append with `put`, fenced on the subject's last sequence it is given (a failed fence
 * throws a SequenceConflict), and return its sequence. After a failed fence, the append goes on
 * past foreign or removed records (`fenceBeyondForeign`), fenced on the subject's last sequence
 * as the log sees it then, at most FENCE_RECHECKS times.
 */
export async function appendFenced(log: EventLog, a: Append, put: (expectedSeq: number | undefined) => Promise<number>): Promise<number> {
  let expected = a.expectedSeq;
  for (let recheck = 0; ; recheck++) {
    try {
      return await put(expected);
    } catch (err) {
      const beyond =
        err instanceof SequenceConflict && a.expectedSeq !== undefined && recheck < FENCE_RECHECKS
          ? await fenceBeyondForeign(log, a.subject, a.expectedSeq)
          : undefined;
      if (beyond === undefined) throw err;
      expected = beyond;
    }
  }
}

/**
 * After a fence conflict on `subject` (the writer decided on its records up to `seq`): the
 * subject's last sequence as the log sees it now, if no event of a journal is on the subject
 * after `seq` — only foreign records, or records removed (docs/journal.md, "Foreign records in
 * the log") — so the append may go on against it; undefined when an event is newer (a real
 * concurrent change: the caller is fenced off) or the log cannot be read. The log's view is
 * read first and the retry is fenced on it: anything appended after this look fails the retry.
 */
export async function fenceBeyondForeign(log: EventLog, subject: string, seq: number): Promise<number | undefined> {
  try {
    const last = await log.lastSeqOf(subject);
    let newerEvent = false;
    await log.read(
      seq + 1,
      async (batch) => {
        newerEvent = batch.some((r) => !isForeign(r));
        return !newerEvent;
      },
      { subject },
    );
    return newerEvent ? undefined : last;
  } catch {
    return undefined;
  }
}

/**
 * Every append of a batch tried (at once) with `append`, returned as stored in the order given;
 * if any failed, an AppendError says which landed, so the caller can undo them.
 */
export async function appendEach(list: Append[], append: (a: Append) => Promise<StoredEvent>): Promise<StoredEvent[]> {
  const results = await Promise.allSettled(list.map((a) => append(a)));
  const failed = results.find((r) => r.status === "rejected");
  const landed = results.map((r) => (r.status === "fulfilled" ? r.value : undefined));
  const uncertain = results.some((r) => r.status === "rejected" && r.reason instanceof AppendUncertain);
  if (failed) throw new AppendError(landed, failed.reason, uncertain);
  return landed as StoredEvent[];
}

/** Every record of these subjects, in log order: each subject read from its start. */
export async function historyOf(log: EventLog, subjectList: string[]): Promise<LogRecord[]> {
  const records: LogRecord[] = [];
  for (const subject of subjectList) await log.read(1, async (b) => void records.push(...b), { subject });
  return records.sort((a, b) => a.seq - b.seq);
}
