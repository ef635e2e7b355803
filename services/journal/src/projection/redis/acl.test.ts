import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ADMIN_REDIS_RULES, JOURNAL_REDIS_COMMANDS, journalRedisRules, redisAclFile } from "./acl.js";

const SHA = "a".repeat(64);
const ADMIN_SHA = "b".repeat(64);

/** Exactly what the journal's user may run (docs/security.md lists the same): a change here is a change of its rights. */
const INTENDED = [
  // connection and health
  "hello",
  "auth",
  "ping",
  "info",
  // the function library: the only code it runs
  "fcall",
  "fcall_ro",
  // run by the functions (checked against the caller) and the direct reads/lock
  "set",
  "get",
  "del",
  "hget",
  "hgetall",
  "hset",
  "hdel",
  "hexists",
  "scard",
  "pexpire",
  "zadd",
  "zrem",
  "sadd",
  "srem",
  // the key index's upkeep inside the functions
  "exists",
  "time",
  "zremrangebyscore",
  // listing and wiping the projection through the key index; reads
  "zscan",
  "unlink",
  "type",
  "zrange",
  "zrangebylex",
  "zcard",
  "smembers",
];

/** The journal line's `+command`s, `~pattern`s and everything else, from a generated file. */
function journalLine(file: string) {
  const line = file.split("\n").find((l) => l.startsWith("user journal ")) ?? "";
  const words = line.split(" ").slice(4); // user journal on #sha
  return {
    commands: words.filter((w) => w.startsWith("+")).map((w) => w.slice(1)),
    keys: words.filter((w) => w.startsWith("~")),
    rest: words.filter((w) => !w.startsWith("+") && !w.startsWith("~")),
  };
}

describe("the journal's Redis ACL", () => {
  test("its clusters' keys only, no channels, only its commands", () => {
    assert.deepEqual(journalRedisRules(["c1", "c2"]).slice(0, 4), ["~{c1}:*", "~{c2}:*", "resetchannels", "-@all"]);
    for (const c of ["eval", "evalsha", "script", "function", "scan", "keys", "flushall", "flushdb", "config", "debug", "shutdown", "acl", "module"])
      assert.ok(!JOURNAL_REDIS_COMMANDS.some((x) => x === c || x.startsWith(`${c}|`)), `${c} is not granted`);
  });

  test("the generated users.acl grants the journal's user exactly the intended commands, no category, no subcommand wildcard", () => {
    const file = redisAclFile("journal", SHA, ["c1", "c2"], { user: "admin", passwordSha256: ADMIN_SHA });
    const j = journalLine(file);
    assert.deepEqual([...j.commands].sort(), [...INTENDED].sort());
    assert.equal(new Set(j.commands).size, j.commands.length, "each command once");
    assert.ok(!j.commands.some((c) => c.startsWith("@") || c.includes("|")), "no category, no subcommand");
    assert.deepEqual(j.keys, ["~{c1}:*", "~{c2}:*"]);
    assert.deepEqual(j.rest, ["resetchannels", "-@all"], "no channels; everything not listed is off");
  });

  test("the file: default user off, the journal's user with its password's SHA-256, the admin with everything", () => {
    const file = redisAclFile("journal", SHA, ["local"], { user: "admin", passwordSha256: ADMIN_SHA });
    const lines = file.trimEnd().split("\n");
    assert.equal(lines.length, 3);
    assert.equal(lines[0], "user default off resetkeys resetchannels -@all");
    assert.match(lines[1] ?? "", new RegExp(`^user journal on #${SHA} ~\\{local\\}:\\* resetchannels -@all \\+hello `));
    assert.equal(lines[2], `user admin on #${ADMIN_SHA} ${ADMIN_REDIS_RULES.join(" ")}`);
    assert.equal(redisAclFile("journal", SHA, ["local"]).trimEnd().split("\n").length, 2, "without an admin, two users");
  });

  test("refuses a plain password, a user name that would change the line, an admin named like another user", () => {
    assert.throws(() => redisAclFile("journal", "secret", ["c1"]), /SHA-256/);
    assert.throws(() => redisAclFile("journal on >x", SHA, ["c1"]), /invalid Redis user name/);
    assert.throws(() => redisAclFile("journal", SHA, ["c1"], { user: "admin", passwordSha256: "x" }), /SHA-256/);
    assert.throws(() => redisAclFile("journal", SHA, ["c1"], { user: "journal", passwordSha256: ADMIN_SHA }), /name of its own/);
    assert.throws(() => redisAclFile("journal", SHA, ["c1"], { user: "default", passwordSha256: ADMIN_SHA }), /name of its own/);
  });
});
