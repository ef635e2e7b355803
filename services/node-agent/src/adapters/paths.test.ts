import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ensureDir, ensureFile, removeFile, removeIfEmptyDir, safeJoin, validateCoPath } from "./paths.js";

const invalid = { name: "DriverError", code: "InvalidArgument" };

describe("safeJoin", () => {
  const root = "/var/lib/csi/node";
  for (const [parts, want] of [
    [["vol-1"], "/var/lib/csi/node/vol-1"],
    [["a", "b", "c"], "/var/lib/csi/node/a/b/c"],
    [["a/../b"], "/var/lib/csi/node/b"],
    [["a/./b/"], "/var/lib/csi/node/a/b"],
  ] as const) {
    it(`${parts.join(", ")} → ${want}`, () => assert.equal(safeJoin(root, ...parts), want));
  }

  for (const [name, parts] of [
    ["a parent", ["../x"]],
    ["a traversal through a sub-directory", ["a/../../x"]],
    ["a traversal spread over parts", ["a", "..", "..", "node-evil"]],
    ["a sibling with a common prefix", ["../node2/x"]],
    ["an absolute part", ["/etc/passwd"]],
    ["an absolute later part", ["a", "/etc"]],
    ["the root itself", ["."]],
    ["the root itself (empty)", [""]],
    ["nothing", []],
    ["a NUL byte", ["a\0b"]],
  ] as const) {
    it(`rejects ${name}`, () => assert.throws(() => safeJoin(root, ...parts), invalid));
  }

  it("works under /", () => assert.equal(safeJoin("/", "tmp"), "/tmp"));
  it("resolves a relative root", () => assert.equal(safeJoin("rel", "x"), path.resolve("rel", "x")));
});

describe("validateCoPath", () => {
  for (const [p, want] of [
    ["/var/lib/kubelet/pods/x/volumes/v/mount", "/var/lib/kubelet/pods/x/volumes/v/mount"],
    ["/with space/and-ünïcode", "/with space/and-ünïcode"],
    ["/trailing/", "/trailing"],
    ["/double//slash", "/double/slash"],
    ["/", "/"],
    ["/a..b/..c/d..", "/a..b/..c/d.."],
  ] as const) {
    it(`accepts ${JSON.stringify(p)} → ${want}`, () => assert.equal(validateCoPath(p), want));
  }
  for (const [name, p] of [
    ["relative", "var/lib/x"],
    ["dot-relative", "./x"],
    ["empty", ""],
    ["a .. segment", "/var/lib/../etc"],
    ["a trailing ..", "/var/.."],
    ["a . segment", "/var/./lib"],
    ["a NUL byte", "/var/lib\0/x"],
    ["too long", `/${"a".repeat(5000)}`],
  ] as const) {
    it(`rejects ${name}`, () => assert.throws(() => validateCoPath(p), invalid));
  }
});

describe("ensureDir / ensureFile / removeIfEmptyDir / removeFile", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "node-agent-paths-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("ensureDir creates nested directories and is idempotent", async () => {
    const p = path.join(dir, "a", "b", "c");
    await ensureDir(p);
    await ensureDir(p);
    assert.ok((await stat(p)).isDirectory());
  });

  it("ensureDir refuses a path that is a file", async () => {
    const f = path.join(dir, "file-not-dir");
    await writeFile(f, "x");
    await assert.rejects(ensureDir(f), { code: "FailedPrecondition" });
  });

  it("ensureFile creates an empty file (and its parent), keeps an existing one", async () => {
    const f = path.join(dir, "blk", "target");
    await ensureFile(f);
    assert.equal((await stat(f)).size, 0);
    await writeFile(f, "keep");
    await ensureFile(f);
    assert.equal((await stat(f)).size, 4);
  });

  it("ensureFile refuses a directory", async () => {
    await assert.rejects(ensureFile(path.join(dir, "a")), { code: "FailedPrecondition" });
  });

  it("removeIfEmptyDir removes an empty directory, keeps a non-empty one, accepts a missing one", async () => {
    const empty = path.join(dir, "empty");
    await mkdir(empty);
    assert.equal(await removeIfEmptyDir(empty), true);
    await assert.rejects(lstat(empty), { code: "ENOENT" });
    assert.equal(await removeIfEmptyDir(empty), true);

    const full = path.join(dir, "full");
    await mkdir(full);
    await writeFile(path.join(full, "data"), "precious");
    assert.equal(await removeIfEmptyDir(full), false);
    assert.deepEqual(await readdir(full), ["data"]);
  });

  it("removeIfEmptyDir refuses a file", async () => {
    const f = path.join(dir, "a-file");
    await writeFile(f, "x");
    await assert.rejects(removeIfEmptyDir(f), { code: "FailedPrecondition" });
  });

  it("removeFile removes a file, accepts a missing one, refuses a directory", async () => {
    const f = path.join(dir, "gone");
    await writeFile(f, "x");
    await removeFile(f);
    await assert.rejects(lstat(f), { code: "ENOENT" });
    await removeFile(f);
    await assert.rejects(removeFile(path.join(dir, "a")), { code: "FailedPrecondition" });
    assert.ok((await stat(path.join(dir, "a", "b", "c"))).isDirectory());
  });
});
