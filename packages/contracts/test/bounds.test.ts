import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { checkCsiBounds, quote, sanitizeMessage, takeWithin, validateMountFlags } from "../src/bounds.js";
import { DriverError } from "../src/errors.js";

const refused = (f: () => void) => assert.throws(f, (e: unknown) => e instanceof DriverError && e.code === "InvalidArgument");

describe("quote", () => {
  test("short text is JSON-quoted as it is", () => assert.equal(quote('a"b'), '"a\\"b"'));
  test("control characters, NUL, C1 and bidi marks become ?", () => assert.equal(quote("a\0b\u0085c\u202ed\n"), '"a?b?c?d?"'));
  test("long text: a 64-character prefix, marked, with its size", () => {
    const q = quote("x".repeat(1_000_000));
    assert.equal(q, `"${"x".repeat(64)}"… (1000000 bytes)`);
  });
  test("never splits a surrogate pair", () => assert.equal(quote("😀".repeat(70), 2), '"😀😀"… (280 bytes)'));
});

describe("sanitizeMessage", () => {
  test("cuts to the byte bound and strips NUL", () => {
    const m = sanitizeMessage(`bad \0 ${"é".repeat(5000)}`);
    assert.ok(Buffer.byteLength(m) <= 1024);
    assert.ok(m.endsWith("…") && !m.includes("\0"));
  });
  test("a DriverError's message is sanitised whatever the thrower wrote", () => {
    const e = new DriverError("NotFound", `x\0${"y".repeat(10_000)}`);
    assert.ok(Buffer.byteLength(e.message) <= 1024 && !e.message.includes("\0"));
  });
});

describe("validateMountFlags (the one rule: controller and node-agent)", () => {
  for (const flag of ["--bind", "ro,remount", "a b", "", "x\0", "a\u0085", "z".repeat(257)])
    test(`refuses ${JSON.stringify(flag.slice(0, 20))}`, () => refused(() => validateMountFlags([flag])));
  test("refuses 65 flags and 4 KiB + 1 in all", () => {
    refused(() => validateMountFlags(Array.from({ length: 65 }, () => "noatime")));
    refused(() => validateMountFlags(Array.from({ length: 17 }, () => "a".repeat(241))));
  });
  test("accepts ordinary flags", () => validateMountFlags(["noatime", "discard", "errors=remount-ro", "context=system_u:object_r:x"]));
  test("never echoes a flag (they may be sensitive)", () =>
    assert.throws(
      () => validateMountFlags(["secret-flag,x"]),
      (e: Error) => !e.message.includes("secret-flag"),
    ));
});

describe("checkCsiBounds", () => {
  const ok = { name: "n".repeat(128), parameters: { k: "v".repeat(4000) }, volume_capabilities: [{ mount: { mount_flags: ["noatime"] } }] };
  test("a request within CSI's limits passes", () => checkCsiBounds(ok));
  test("a string past 128 bytes, anywhere", () => {
    refused(() => checkCsiBounds({ ...ok, name: "é".repeat(65) }));
    refused(() => checkCsiBounds({ volume_content_source: { volume: { volume_id: "i".repeat(129) } } }));
  });
  test("a longer limit for a named field", () => checkCsiBounds({ target_path: "p".repeat(4000) }, { target_path: 4096 }));
  test("a map past 4 KiB, without echoing it", () =>
    assert.throws(
      () => checkCsiBounds({ secrets: { password: `hunter2${"x".repeat(5000)}` } }),
      (e: Error) => e instanceof DriverError && !e.message.includes("hunter2"),
    ));
  test("topology segments are maps", () =>
    refused(() => checkCsiBounds({ accessibility_requirements: { requisite: [{ segments: { k: "v".repeat(5000) } }] } })));
  test("a list past 128 items", () => refused(() => checkCsiBounds({ source_volume_ids: Array.from({ length: 129 }, () => "x") })));
  test("mount flags by their rule", () => refused(() => checkCsiBounds({ volume_capability: { mount: { mount_flags: ["--bind"] } } })));
});

describe("takeWithin", () => {
  const size = (n: number) => n;
  test("the longest prefix within the budget", () => assert.deepEqual(takeWithin([3, 3, 3], size, 7), { taken: [3, 3], cut: true }));
  test("at least one item, so a page advances", () => assert.deepEqual(takeWithin([10, 1], size, 5), { taken: [10], cut: true }));
  test("none when asked not to force one", () => assert.deepEqual(takeWithin([10], size, 5, false), { taken: [], cut: true }));
  test("everything when it fits", () => assert.deepEqual(takeWithin([1, 2], size, 5), { taken: [1, 2], cut: false }));
});
