/**
 * An EventLog that tells `onLanded` of every event it appended (after it landed, before the
 * caller hears of it): the metrics count appends by type, and fault injection (tests) stops the
 * process right after a chosen event. A decorator, so neither reaches into the log it wraps.
 */
import type { StoredEvent } from "@csi/contracts";
import type { Append, AppendMeta, EventLog } from "./port.js";
import { AppendError } from "./port.js";

export function observedLog(inner: EventLog, onLanded: (e: StoredEvent) => Promise<void> | void): EventLog {
  const tell = async (events: (StoredEvent | undefined)[]) => {
    for (const e of events) if (e) await onLanded(e);
  };
  return {
    append: async (a: Append, meta: AppendMeta) => {
      const stored = await inner.append(a, meta);
      await tell([stored]);
      return stored;
    },
    appendAll: async (list: Append[], meta: AppendMeta) => {
      try {
        const stored = await inner.appendAll(list, meta);
        await tell(stored);
        return stored;
      } catch (err) {
        if (err instanceof AppendError) await tell(err.landed);
        throw err;
      }
    },
    lastSeqOf: (s) => inner.lastSeqOf(s),
    lastOf: (s) => inner.lastOf(s),
    recordAt: (seq) => inner.recordAt(seq),
    deleteRecord: (seq) => inner.deleteRecord(seq),
    info: () => inner.info(),
    history: (s) => inner.history(s),
    read: (from, onBatch, opts) => inner.read(from, onBatch, opts),
  };
}
