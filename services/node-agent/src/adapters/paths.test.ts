import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readdir, realpath, rm, stat, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { createLast, lookAt, removeFile, removeIfEmptyDir, requireNoSymlinks, safeJoin } from "./paths.js";

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

describe("createLast / requireNoSymlinks / lookAt / removeIfEmptyDir / removeFile", () => {
  let dir: string;
  before(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "node-agent-paths-")));
    await mkdir(path.join(dir, "a", "b", "c"), { recursive: true });
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("createLast makes the last component only, and says whether it made it", async () => {
    const p = path.join(dir, "made");
    assert.equal(await createLast(p, "dir"), true);
    assert.equal(await createLast(p, "dir"), false);
    assert.ok((await stat(p)).isDirectory());
    const f = path.join(dir, "made-file");
    assert.equal(await createLast(f, "file"), true);
    assert.equal((await stat(f)).size, 0);
  });

  it("createLast never makes a parent (the CO does)", async () => {
    await assert.rejects(createLast(path.join(dir, "no", "such", "parent"), "dir"), { code: "FailedPrecondition" });
    await assert.rejects(lstat(path.join(dir, "no")), { code: "ENOENT" });
  });

  it("requireNoSymlinks accepts real directories and missing tails, refuses a symlink anywhere and a file in the middle", async () => {
    await requireNoSymlinks(path.join(dir, "a", "b", "c"));
    await requireNoSymlinks(path.join(dir, "a", "not", "there", "yet"));
    await symlink(path.join(dir, "a"), path.join(dir, "link"));
    await assert.rejects(requireNoSymlinks(path.join(dir, "link")), invalid);
    await assert.rejects(requireNoSymlinks(path.join(dir, "link", "b")), invalid);
    await writeFile(path.join(dir, "plain"), "x");
    await assert.rejects(requireNoSymlinks(path.join(dir, "plain", "x")), invalid);
  });

  it("lookAt tells absent, empty and full directories, files, and whether the parent exists", async () => {
    const seen = async (p: string) => {
      const s = await lookAt(p, []);
      return `${s.kind}${s.empty ? "/empty" : ""}${s.parentIsDir ? "" : "/orphan"}`;
    };
    assert.equal(await seen(path.join(dir, "a", "b", "c")), "dir/empty");
    assert.equal(await seen(path.join(dir, "a")), "dir");
    assert.equal(await seen(path.join(dir, "a", "none")), "absent");
    assert.equal(await seen(path.join(dir, "none", "none")), "absent/orphan");
    assert.equal(await seen(path.join(dir, "plain")), "file");
    assert.equal(await seen(path.join(dir, "made-file")), "file/empty");
    assert.equal(await seen(path.join(dir, "link")), "other");
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
