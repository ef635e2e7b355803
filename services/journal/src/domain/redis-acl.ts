/**
 * The journal's Redis ACL user: exactly the commands the journal (and csictl's rebuild, which runs
 * the journal's own projector) sends — redis-store.ts, its Lua scripts and the projection's
 * mutations (projection.ts) — on the keys of its clusters only (`{<cluster>}:*`, keysFor), and no
 * pub/sub. FLUSHALL, CONFIG, KEYS, DEBUG, SHUTDOWN, MODULE, ACL … are not in it (docs/security.md).
 *
 * Pure: the password comes in as its SHA-256 (hex), which is what an ACL file stores.
 */
import { keysFor } from "./kinds.js";

/**
 * What ioredis sends on connect: HELLO (RESP3, with AUTH), the INFO of its ready check. Its CLIENT
 * SETINFO is left out on purpose: ioredis ignores its failure, and Redis before 7.2 does not know it
 * (an ACL file naming it would not load).
 */
const CONNECTION = ["hello", "auth", "ping", "info"];
/** The Lua scripts (EVALSHA first, EVAL when the server does not have the script yet). */
const SCRIPTS = ["evalsha", "eval"];
/** Inside the scripts, and the projection's mutations they run (HSET/HDEL/DEL/ZADD/ZREM/SADD/SREM/PEXPIRE). */
const IN_SCRIPTS = ["set", "get", "del", "hget", "hgetall", "hset", "hdel", "hexists", "scard", "pexpire", "zadd", "zrem", "sadd", "srem"];
/** Direct reads and the rebuild's wipe (redis-store.ts), and csictl's counts. */
const DIRECT = ["scan", "unlink", "type", "zrange", "zrangebylex", "zcard", "smembers"];

export const JOURNAL_REDIS_COMMANDS: readonly string[] = [...new Set([...CONNECTION, ...SCRIPTS, ...IN_SCRIPTS, ...DIRECT])];

/** The ACL rules of the journal's user (without user name and password): its clusters' keys, its commands. */
export function journalRedisRules(clusters: readonly string[]): string[] {
  return [...clusters.map((c) => `~${keysFor(c, "default").prefix}*`), "resetchannels", "-@all", ...JOURNAL_REDIS_COMMANDS.map((c) => `+${c}`)];
}

/** An ACL file: the default user off (nobody without a password), the journal's user on with its password's SHA-256. */
export function redisAclFile(user: string, passwordSha256: string, clusters: readonly string[]): string {
  if (!/^[0-9a-f]{64}$/.test(passwordSha256)) throw new Error("the password must be given as its SHA-256, 64 hex digits");
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(user)) throw new Error(`invalid Redis user name ${JSON.stringify(user.slice(0, 64))}`);
  return `user default off resetkeys resetchannels -@all\nuser ${user} on #${passwordSha256} ${journalRedisRules(clusters).join(" ")}\n`;
}
