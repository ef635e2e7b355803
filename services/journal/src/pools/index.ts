/**
 * The pools (room door, `@csi/journal/pools`): the port (port.ts: images made, copied, resized,
 * stat'ed and removed, owners marked, capacity), the rules every pool shares (rules.ts), the file
 * pool (file.ts) and the RBD pool (rbd.ts with its helper, rbd/). Every PoolBackend passes
 * test/contracts/pool.contract.ts (test/pool.test.ts runs it on both).
 */
export { createDurableFile, createSizedFile, FilePool } from "./file.js";
export type { ImageInfo, ImageOwner, PoolBackend } from "./port.js";
export { META_PREFIX, OWNER_KEY, RbdPool, type RbdPoolOptions } from "./rbd.js";
