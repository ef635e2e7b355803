import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { JOURNAL_FUNCTIONS, JOURNAL_FUNCTIONS_VERSION, JOURNAL_LIBRARY, JOURNAL_LIBRARY_CODE, journalLibrarySha256 } from "./functions.js";

/**
 * The code of each version, pinned: a library of one name must never be loaded with two codes
 * (FUNCTION LOAD REPLACE would change the functions under journals of that version). Changed the
 * Lua? Bump JOURNAL_FUNCTIONS_VERSION and add its SHA-256 here; keep the old entries.
 */
const PINNED: Record<number, string> = {
  1: "87146843f6252e7eba6521f229e4a1198300141639b2bb01e172a2ebf680dbfc",
  2: "838d410f26ab19bf3bb1d07cf82fac50a84525f2bb2a3f099b6920be179fcc23",
  3: "3c297782a8922dccb42ad97fdefb9c9f01212618347ed59b38e47ce1d36efcd9",
  4: "ef9a0ec546ea0e2506f47ed3ef4960ef5a664310fbe0d3bba3b5e7f13a1c143e",
  5: "9c20d2329479d6415affce1c79f79afb94d08a0d79d902c9a3d2a5edc5fa0060",
};

describe("the journal's Redis function library", () => {
  test("its code is the one pinned for its version", () => {
    assert.equal(
      journalLibrarySha256(),
      PINNED[JOURNAL_FUNCTIONS_VERSION],
      `the Lua of ${JOURNAL_LIBRARY} changed: bump JOURNAL_FUNCTIONS_VERSION and pin the new SHA-256`,
    );
  });

  test("one library named with its version; every function carries the library's name", () => {
    assert.equal(JOURNAL_LIBRARY, `csi_journal_v${JOURNAL_FUNCTIONS_VERSION}`);
    assert.ok(JOURNAL_LIBRARY_CODE.startsWith(`#!lua name=${JOURNAL_LIBRARY}\n`));
    const registered = [...JOURNAL_LIBRARY_CODE.matchAll(/register_function(?:\{function_name = |\()'([a-z0-9_]+)'/g)].map((m) => m[1]);
    assert.deepEqual(registered.sort(), Object.values(JOURNAL_FUNCTIONS).sort());
    for (const name of registered) assert.match(name ?? "", new RegExp(`^${JOURNAL_LIBRARY}_[a-z_]+$`));
  });

  test("the caller's writes are limited to the projection planner's commands", () => {
    const writes = /local WRITES = \{([^}]*)\}/.exec(JOURNAL_LIBRARY_CODE)?.[1] ?? "";
    assert.deepEqual([...writes.matchAll(/([A-Z]+) = true/g)].map((m) => m[1]).sort(), ["DEL", "HDEL", "HSET", "PEXPIRE", "SADD", "SREM", "ZADD", "ZREM"]);
  });
});
