/**
 * What operator tools (csictl) use of the journal's own code, so that they read the log, the
 * Redis projection and rebuild it exactly as the journal does instead of reimplementing it:
 * the event log, the Redis store and its key layout, the projector, the subjects of a uuid, what
 * a record of the log is (an event or a foreign record), verify's rules (a restore's dry run); the
 * Redis function library (an admin loads it) and the ACL file.
 */
export { JetStreamLog as EventLog, JetStreamLog } from "./adapters/event-log.js";
export {
  backupFileLines,
  exportLogTo,
  exportLogToFile,
  foldBackup,
  type ImportPhase,
  importLog,
  newBackupFile,
  readBackupKey,
  restoreUnderWay,
} from "./adapters/log-backup.js";
export { Projector } from "./app/projector.js";
export { inspect } from "./domain/audit.js";
export { KINDS, uuidSubjects } from "./domain/kinds.js";
export { BackupError, BackupKey } from "./domain/log-backup.js";
export { classifyRecord, eventsOf, isForeign, type LogRecord } from "./domain/log-records.js";
export type { ImageInfo } from "./domain/pool-backend.js";
export { type Keys, keysFor } from "./store/layout.js";
export type { ProjectionMeta } from "./store/projection-state.js";
export { ADMIN_REDIS_RULES, JOURNAL_REDIS_COMMANDS, journalRedisRules, redisAclFile } from "./store/redis-acl.js";
export {
  ensureJournalFunctions,
  JOURNAL_FUNCTIONS,
  JOURNAL_FUNCTIONS_VERSION,
  JOURNAL_LIBRARY,
  journalFunctionsLoaded,
  journalLibraries,
  loadJournalFunctions,
} from "./store/redis-functions.js";
export { RedisStore } from "./store/redis-store.js";
