/**
 * The Redis projection store (room door, `@csi/journal/redis`): the store (store.ts), its key
 * layout (layout.ts), hash encoding (hash.ts), planned writes (writes.ts), the Lua function
 * library an admin loads (functions.ts), the ACL (acl.ts) and the connection (link.ts). It passes
 * test/contracts/store.contract.ts (test/store.test.ts) like every JournalStore.
 */
export { redisAclFile } from "./acl.js";
export { ensureJournalFunctions, JOURNAL_FUNCTIONS, JOURNAL_LIBRARY, journalFunctionsLoaded, journalLibraries, loadJournalFunctions } from "./functions.js";
export { type Keys, keysFor } from "./layout.js";
export { journalRedisOptions, RedisLink } from "./link.js";
export { CallKeys, RedisStore } from "./store.js";
export { TOMBSTONE_TTL_MS } from "./writes.js";
