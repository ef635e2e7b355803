import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { JOURNAL_REDIS_COMMANDS, journalRedisRules, redisAclFile } from "./redis-acl.js";

const SHA = "a".repeat(64);

describe("the journal's Redis ACL", () => {
  test("its clusters' keys only, no channels, only its commands", () => {
    assert.deepEqual(journalRedisRules(["c1", "c2"]).slice(0, 4), ["~{c1}:*", "~{c2}:*", "resetchannels", "-@all"]);
    for (const c of ["evalsha", "eval", "hgetall", "scan", "unlink", "zrangebylex", "hello"]) assert.ok(JOURNAL_REDIS_COMMANDS.includes(c), c);
    for (const c of ["flushall", "flushdb", "config", "keys", "debug", "shutdown", "acl", "module", "script"])
      assert.ok(!JOURNAL_REDIS_COMMANDS.some((x) => x === c || x.startsWith(`${c}|`)), `${c} is not granted`);
  });
  test("the file: default user off, the journal's user with its password's SHA-256", () => {
    const file = redisAclFile("journal", SHA, ["local"]);
    const lines = file.trimEnd().split("\n");
    assert.equal(lines[0], "user default off resetkeys resetchannels -@all");
    assert.match(lines[1] ?? "", new RegExp(`^user journal on #${SHA} ~\\{local\\}:\\* resetchannels -@all \\+hello `));
  });
  test("refuses a plain password and a user name that would change the line", () => {
    assert.throws(() => redisAclFile("journal", "secret", ["c1"]), /SHA-256/);
    assert.throws(() => redisAclFile("journal on >x", SHA, ["c1"]), /invalid Redis user name/);
  });
});
