import assert from "node:assert/strict";
import { mkdtemp, open, readdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { MiB } from "@csi/contracts";
import { FilePool } from "./file.js";

let dir: string;
let pool: FilePool;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "file-pool-test-"));
  pool = new FilePool({ name: "test", id: 7, root: path.join(dir, "pool") });
  await pool.init();
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Assert that `p` rejects with a DriverError of the given code. */
async function rejectsWith(p: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.equal((err as { name?: unknown }).name, "DriverError");
    assert.equal((err as { code?: unknown }).code, code);
    return true;
  });
}

async function writeAt(file: string, offset: number, data: Buffer): Promise<void> {
  const fh = await open(file, "r+");
  try {
    await fh.write(data, 0, data.length, offset);
  } finally {
    await fh.close();
  }
}

/**
 * What only the file pool shows (its files): sparse files, inode ids, read-only modes, paths kept
 * inside the root, foreign files ignored. What every pool does is test/contracts/pool.contract.ts,
 * run against this pool by test/pool.test.ts.
 */
describe("FilePool", () => {
  it("an image is a sparse file of the rounded size; its id is the inode", async () => {
    const big = await pool.createImage("sparse", 64 * MiB + 3);
    const st = await stat(pool.imagePath("sparse"));
    assert.equal(st.size, 65 * MiB);
    assert.ok(st.blocks * 512 < MiB, `expected a sparse file, ${st.blocks} blocks allocated`);
    assert.equal(big.id, st.ino.toString(16));
    await pool.resizeImage("sparse", 70 * MiB);
    assert.equal((await stat(pool.imagePath("sparse"))).size, 70 * MiB);
  });

  it("bad names create nothing outside the root", async () => {
    for (const name of ["../x", "a/b", "", ".hidden", "a..b", "/abs"]) {
      assert.throws(() => pool.imagePath(name), { name: "DriverError", code: "InvalidArgument" }, name);
      await rejectsWith(pool.createImage(name, MiB), "InvalidArgument");
    }
    await rejectsWith(pool.cloneImage("../sparse", "ok-target", MiB), "InvalidArgument");
    assert.deepEqual(await readdir(dir), ["pool"]);
  });

  it("a snapshot is a file of mode 0444; a clone is sparse", async () => {
    await pool.createImage("src", 8 * MiB);
    await writeAt(pool.imagePath("src"), 5 * MiB, Buffer.from("pattern"));
    await pool.snapshotImage("src", "src-snap");
    assert.equal((await stat(pool.imagePath("src-snap"))).mode & 0o777, 0o444);
    await pool.cloneImage("src-snap", "clone-of-snap", 12 * MiB);
    const st = await stat(pool.imagePath("clone-of-snap"));
    assert.equal(st.size, 12 * MiB);
    assert.ok(st.blocks * 512 < 4 * MiB, `expected a sparse clone, ${st.blocks} blocks allocated`);
  });

  it("20 concurrent creates of one name leave one file and no temp files", async () => {
    await Promise.all(Array.from({ length: 20 }, () => pool.createImage("race", 5 * MiB)));
    const files = await readdir(pool.root);
    assert.equal(files.filter((f) => f === "race.img").length, 1);
    assert.deepEqual(
      files.filter((f) => f.startsWith(".tmp-")),
      [],
      "no temp files left",
    );
  });

  it("lists images only, skipping foreign files and temp files", async () => {
    await writeFile(path.join(pool.root, "notes.txt"), "");
    await writeFile(path.join(pool.root, ".tmp-leftover-123"), "");
    const names = (await pool.listImages()).map((i) => i.name);
    assert.deepEqual(names, ["clone-of-snap", "race", "sparse", "src", "src-snap"]);
  });

  it("imagePath stays inside the root; the publish context is the image's path", () => {
    assert.equal(pool.imagePath("src"), path.join(pool.root, "src.img"));
    assert.deepEqual(pool.publishContext("src"), { imagePath: path.join(pool.root, "src.img") });
  });
});

describe("FilePool temp files of interrupted builds", () => {
  const temps = async (p: FilePool) => (await readdir(p.root)).filter((f) => f.startsWith(".tmp-")).sort();
  const leftover = async (p: FilePool, name: string, ageMs = 0) => {
    const file = path.join(p.root, `.tmp-${name}-${"0123456789ab"}`);
    await writeFile(file, "half a copy");
    const then = new Date(Date.now() - ageMs);
    await utimes(file, then, then);
    return path.basename(file);
  };

  it("deleting an image sweeps its temp files, whatever their age, and no other image's", async () => {
    const p = new FilePool({ name: "t1", id: 9, root: path.join(dir, "t1") });
    await p.init();
    await leftover(p, "snap-a");
    const others = [await leftover(p, "snap-a-b"), await leftover(p, "other")];
    await p.deleteImage("snap-a"); // the image itself was never published
    assert.deepEqual(await temps(p), others.sort());
  });

  it("a temp file left untouched past the stale age is swept by the next operation; a fresh one is kept", async () => {
    const p = new FilePool({ name: "t2", id: 10, root: path.join(dir, "t2"), sweepEveryMs: 0 });
    await p.init();
    await leftover(p, "old", 60_000);
    const fresh = await leftover(p, "fresh", 1_000);
    await p.createImage("next", MiB);
    assert.deepEqual(await temps(p), [fresh]);
  });

  it("building an image sweeps the temp files of its earlier, interrupted builds (a retry on another replica), fresh or not", async () => {
    const p = new FilePool({ name: "t4", id: 12, root: path.join(dir, "t4") });
    await p.createImage("src", MiB);
    await leftover(p, "src-snap"); // a replica killed mid-copy, a moment ago
    const other = await leftover(p, "other-snap");
    assert.equal((await p.snapshotImage("src", "src-snap")).readOnly, true);
    assert.deepEqual(await temps(p), [other], "only the other image's build is left to its own retry or the stale sweep");
  });

  it("leftovers: the temp files of other builds with the aggregate their image is named after and their last touch; removeLeftover removes one still the same, never our own build's", async () => {
    const p = new FilePool({ name: "t5", id: 13, root: path.join(dir, "t5"), holdCopyMs: 300 });
    await p.createImage("src", MiB);
    const uuid = "5a80a7bb-fe02-43ae-9e6c-84ee247b5a4e";
    const dead = await leftover(p, `csi-snap-${uuid}`, 5_000); // a journal killed mid-copy
    const building = p.snapshotImage("src", "src-snap");
    while ((await temps(p)).length < 2) await new Promise((r) => setTimeout(r, 10));
    const listed = await p.leftovers();
    assert.deepEqual(
      listed.map((l) => [l.kind, l.name, l.owner]),
      [["temp", dead, { kind: "snapshot", uuid }]],
      "the dead build's temp file, not ours in progress",
    );
    assert.ok(Math.abs((listed[0]?.since ?? 0) - (Date.now() - 5_000)) < 2_000, "since: its last touch");
    assert.equal(await p.removeLeftover({ kind: "temp", name: dead, id: "0" }), false, "another inode: kept");
    assert.equal(await p.removeLeftover({ kind: "temp", name: dead, id: listed[0]?.id ?? "" }), true);
    await assert.rejects(p.removeLeftover({ kind: "temp", name: "src.img", id: "1" }), /not a temp file/);
    assert.equal((await temps(p)).length, 1, "our own build's temp file stays");
    await building;
    assert.deepEqual(await temps(p), []);
  });

  it("a build in progress keeps its temp file when its own image is deleted meanwhile", async () => {
    const p = new FilePool({ name: "t3", id: 11, root: path.join(dir, "t3"), holdCopyMs: 300 });
    await p.createImage("src", MiB);
    const snap = p.snapshotImage("src", "src-snap");
    while ((await temps(p)).length === 0) await new Promise((r) => setTimeout(r, 10));
    await p.deleteImage("src-snap");
    assert.equal((await temps(p)).length, 1, "our own build's temp file stays");
    assert.equal((await snap).readOnly, true);
    assert.deepEqual(await temps(p), []);
  });
});
