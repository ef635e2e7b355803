/**
 * The projection (room door, `@csi/journal/projection`): the port in domain words (port.ts:
 * locks, read plans, states by address; meta.ts: the projection's meta and whether it may be
 * served), the projector that keeps it the log folded (catch-up, rebuild, the start-up
 * comparison), and two stores: Redis (redis/, its own door `@csi/journal/redis`) and in memory
 * (memory.ts). Every JournalStore passes test/contracts/store.contract.ts (test/store.test.ts
 * runs it on both).
 */
export { MemoryStore } from "./memory.js";
export type { ProjectionMeta } from "./meta.js";
export { type Difference, differenceName, type IndexOf, type JournalStore, type LockOn, type LockResult, type StateMap } from "./port.js";
export { catchUpWhenLogAnswers, distrustAfterRedisDrops, Projector } from "./projector.js";
