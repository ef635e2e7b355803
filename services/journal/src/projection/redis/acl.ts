/**
 * The Redis ACL file: the journal's user — exactly the commands the journal (and csictl's rebuild,
 * which runs the journal's own projector) sends — on the keys of its clusters only
 * (`{<cluster>}:*`, keysFor), no pub/sub; and the admin user that loads the journal's function
 * library and is the operator's (FUNCTION KILL, SCRIPT KILL). The journal's user runs code only
 * through the library's functions (FCALL): no EVAL, EVALSHA, SCRIPT, FUNCTION, and no SCAN, KEYS,
 * FLUSHALL, CONFIG, DEBUG, SHUTDOWN, MODULE, ACL … (docs/security.md).
 *
 * Pure: the passwords come in as their SHA-256 (hex), which is what an ACL file stores.
 */
import { keysFor } from "./layout.js";

/**
 * What ioredis sends on connect: HELLO (RESP3, with AUTH), the INFO of its ready check; PING is the
 * journal's Redis health check. Its CLIENT SETINFO is left out on purpose: ioredis ignores its
 * failure, and Redis before 7.2 does not know it (an ACL file naming it would not load).
 */
const CONNECTION = ["hello", "auth", "ping", "info"];
/** The function library (projection/redis/functions.ts): FCALL, and FCALL_RO of its version function. */
const FUNCTIONS = ["fcall", "fcall_ro"];
/**
 * What the functions run: Redis checks every redis.call inside a function against the caller's ACL
 * (there are no privileged functions), so these are granted too, on the same keys. The projection's
 * planned writes (HSET HDEL DEL ZADD ZREM SADD SREM PEXPIRE), the locks (SET NX PX, GET, DEL), the
 * reads, and the key index's upkeep (EXISTS, TIME for a tombstone's expiry, ZREMRANGEBYSCORE).
 */
const IN_FUNCTIONS = ["set", "get", "del", "hget", "hgetall", "hset", "hdel", "hexists", "scard", "pexpire", "zadd", "zrem", "sadd", "srem"];
const KEY_INDEX = ["exists", "time", "zremrangebyscore"];
/** Direct reads (redis/store.ts, csictl's counts), the rebuild lock (SET), and the projection's listing and wipe through the key index (ZSCAN, ZRANGE, UNLINK). */
const DIRECT = ["zscan", "unlink", "type", "zrange", "zrangebylex", "zcard", "smembers"];

export const JOURNAL_REDIS_COMMANDS: readonly string[] = [...new Set([...CONNECTION, ...FUNCTIONS, ...IN_FUNCTIONS, ...KEY_INDEX, ...DIRECT])];

/** The ACL rules of the journal's user (without user name and password): its clusters' keys, its commands. */
export function journalRedisRules(clusters: readonly string[]): string[] {
  return [...clusters.map((c) => `~${keysFor(c, "default").prefix}*`), "resetchannels", "-@all", ...JOURNAL_REDIS_COMMANDS.map((c) => `+${c}`)];
}

/** The admin's rules: every key, channel and command (it loads the function library; FUNCTION KILL, SCRIPT KILL). */
export const ADMIN_REDIS_RULES: readonly string[] = ["~*", "&*", "+@all"];

const checked = (user: string, passwordSha256: string) => {
  if (!/^[0-9a-f]{64}$/.test(passwordSha256)) throw new Error("the password must be given as its SHA-256, 64 hex digits");
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(user)) throw new Error(`invalid Redis user name ${JSON.stringify(user.slice(0, 64))}`);
  return `user ${user} on #${passwordSha256}`;
};

/**
 * An ACL file: the default user off (nobody without a password), the journal's user on with its
 * password's SHA-256, and the admin user if given.
 */
export function redisAclFile(user: string, passwordSha256: string, clusters: readonly string[], admin?: { user: string; passwordSha256: string }): string {
  const lines = ["user default off resetkeys resetchannels -@all", `${checked(user, passwordSha256)} ${journalRedisRules(clusters).join(" ")}`];
  if (admin) {
    if (admin.user === user || admin.user === "default") throw new Error(`the admin user must have a name of its own, not ${admin.user}`);
    lines.push(`${checked(admin.user, admin.passwordSha256)} ${ADMIN_REDIS_RULES.join(" ")}`);
  }
  return `${lines.join("\n")}\n`;
}
