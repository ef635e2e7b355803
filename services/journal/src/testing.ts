/**
 * Entry `@csi/journal/testing`: for the tests (test/, tools/testkit), the benchmark (bench/) and
 * the chaos harness (scripts/lib/chaos) — the journal's parts they drive directly, beyond what
 * operator tools get from `@csi/journal/operator` (the event log, the Redis store, the projector,
 * the key layout). Nothing of the running service imports it. When a module moves inside the
 * journal, only this list changes.
 */

export { AppendError, AppendUncertain, isFenced, isUncertain, SequenceConflict } from "./adapters/event-log.js";
export { createDurableFile, createSizedFile, FilePool } from "./adapters/file-pool.js";
export { MemoryLog } from "./adapters/memory-log.js";
export { MemoryStore } from "./adapters/memory-store.js";
export { META_PREFIX, OWNER_KEY, RbdPool, type RbdPoolOptions } from "./adapters/rbd-pool.js";
export { Journal, type JournalDeps } from "./app/journal.js";
export { distrustAfterRedisDrops } from "./app/projector.js";
export { DEFAULT_LOCK_TTL_MS, JOURNAL_SETTINGS } from "./config.js";
export { emptyReplay, replayInto } from "./domain/audit.js";
export type { LockOn } from "./domain/decider.js";
export type { States } from "./domain/evolve.js";
export { type Address, type Aggregate, addressKey, addressOfState, Fold, foldInto, type Trail } from "./domain/evolve.js";
export { events, GRP, SNAP, T0, VOL, volumeReservedBody } from "./domain/fixtures.js";
export type { ImageKind } from "./domain/kinds.js";
export { BackupWriter } from "./domain/log-backup.js";
export type { LogRecord } from "./domain/log-records.js";
export type { ImageInfo, ImageOwner, PoolBackend } from "./domain/pool-backend.js";
export { type AppendMeta, type EventLog as EventLogPort, FOLD_BATCH } from "./ports/event-log.js";
export type { IndexOf, JournalStore, LockResult, StateMap } from "./ports/store.js";
export { CallKeys } from "./store/redis-store.js";
export { TOMBSTONE_TTL_MS } from "./store/writes.js";
