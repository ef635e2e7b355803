import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { hasControlCharacter, parseForbiddenRoots, validateCoPath } from "./paths.js";

const invalid = { name: "DriverError", code: "InvalidArgument" };

describe("validateCoPath", () => {
  for (const [p, want] of [
    ["/var/lib/kubelet/pods/x/volumes/v/mount", "/var/lib/kubelet/pods/x/volumes/v/mount"],
    ["/with space/and-ünïcode", "/with space/and-ünïcode"],
    ["/trailing/", "/trailing"],
    ["/double//slash", "/double/slash"],
    ["/a..b/..c/d..", "/a..b/..c/d.."],
    ["/procfs/x", "/procfs/x"],
    [`/${"a".repeat(255)}`, `/${"a".repeat(255)}`],
  ] as const) {
    it(`accepts ${JSON.stringify(p).slice(0, 60)} → ${want.slice(0, 50)}`, () => assert.equal(validateCoPath(p), want));
  }
  for (const [name, p] of [
    ["relative", "var/lib/x"],
    ["dot-relative", "./x"],
    ["empty", ""],
    ["the root", "/"],
    ["the root, written long", "//"],
    ["a .. segment", "/var/lib/../etc"],
    ["a trailing ..", "/var/.."],
    ["a . segment", "/var/./lib"],
    ["a NUL byte", "/var/lib\0/x"],
    ["a newline", "/var/lib\n/x"],
    ["an escape sequence", "/var/\u001b[31m"],
    ["DEL", "/var/\u007f"],
    ["more than 1024 bytes", `/${"a/".repeat(600)}`],
    ["more than 1024 bytes of multi-byte characters", `/${"é".repeat(600)}`],
    ["a component over 255 bytes", `/x/${"a".repeat(256)}`],
    ["/proc", "/proc"],
    ["under /proc", "/proc/self/cwd/x"],
    ["under /sys", "/sys/kernel"],
    ["under /dev", "/dev/shm/x"],
    ["under /dev, written unclean", "//dev//x/"],
  ] as const) {
    it(`rejects ${name}`, () => assert.throws(() => validateCoPath(p), invalid));
  }
  it("takes the forbidden roots it is given", () => {
    assert.equal(validateCoPath("/proc/x", "p", ["/srv"]), "/proc/x");
    assert.throws(() => validateCoPath("/srv/data/x", "p", ["/srv"]), invalid);
  });
  it("quotes a short, escaped prefix of what it refuses", () => {
    for (const p of [`/${"a".repeat(4095)}`, "/x\u0000\n\u001b[31m", `/${"é".repeat(900)}`]) {
      const msg = (() => {
        try {
          validateCoPath(p, "target_path");
        } catch (err) {
          return (err as Error).message;
        }
        return "";
      })();
      assert.ok(msg.length > 0 && msg.length < 200, `${msg.length}: ${msg}`);
      assert.ok(!hasControlCharacter(msg), "no control character echoed");
    }
  });
});

describe("parseForbiddenRoots", () => {
  it("defaults to /proc, /sys, /dev", () => assert.deepEqual(parseForbiddenRoots(undefined), ["/proc", "/sys", "/dev"]));
  it("reads a comma-separated list", () => assert.deepEqual(parseForbiddenRoots("/proc, /srv/x/ ,/etc"), ["/proc", "/srv/x", "/etc"]));
  it("refuses relative or unclean roots", () => {
    assert.throws(() => parseForbiddenRoots("proc"));
    assert.throws(() => parseForbiddenRoots("/a/../b"));
  });
});
