/**
 * The event log (room door, `@csi/journal/log`): the port (port.ts: appends fenced on their
 * subject's last sequence, reads in order, and the port's own errors), what every log does the
 * same way (rules.ts), what a record of the stream is (records.ts), the JetStream log
 * (jetstream.ts, production), the in-memory log (memory.ts), the decorators the service wraps it
 * in (guarded.ts: fail fast while unreachable; observed.ts: metrics), the durability check and
 * the backup (backup/, its own door `@csi/journal/backup`). Every EventLog passes
 * test/contracts/event-log.contract.ts (test/event-log.test.ts runs it on both).
 */
export { LogReachability } from "./guarded.js";
export { JetStreamLog } from "./jetstream.js";
export { MemoryLog } from "./memory.js";
export {
  AppendError,
  type AppendMeta,
  AppendUncertain,
  type EventLog,
  FOLD_BATCH,
  isFenced,
  isUncertain,
  SequenceConflict,
} from "./port.js";
export { classifyRecord, eventsOf, isForeign, type LogRecord } from "./records.js";
