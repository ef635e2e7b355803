import assert from "node:assert/strict";
import { mkdtemp, open, readdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { MiB } from "@csi/contracts";
import { FilePool } from "./file-pool.js";

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

async function readAt(file: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(file, "r");
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, offset);
    return buf;
  } finally {
    await fh.close();
  }
}

describe("FilePool", () => {
  it("creates a sparse image rounded up to a whole MiB", async () => {
    const small = await pool.createImage("one-byte", 1);
    assert.equal(small.sizeBytes, MiB);
    assert.equal(small.readOnly, false);
    assert.match(small.id, /^[0-9a-f]+$/);

    const big = await pool.createImage("sparse", 64 * MiB + 3);
    assert.equal(big.sizeBytes, 65 * MiB);
    const st = await stat(pool.imagePath("sparse"));
    assert.equal(st.size, 65 * MiB);
    assert.ok(st.blocks * 512 < MiB, `expected a sparse file, ${st.blocks} blocks allocated`);
    assert.equal(big.id, st.ino.toString(16));
  });

  it("create is idempotent for the same rounded size, AlreadyExists for another", async () => {
    const a = await pool.createImage("idem", 3 * MiB);
    const b = await pool.createImage("idem", 3 * MiB - 100);
    assert.deepEqual(b, a);
    await rejectsWith(pool.createImage("idem", 4 * MiB), "AlreadyExists");
  });

  it("rejects bad sizes", async () => {
    await rejectsWith(pool.createImage("zero", 0), "InvalidArgument");
    await rejectsWith(pool.createImage("neg", -1), "InvalidArgument");
    await rejectsWith(pool.createImage("nan", Number.NaN), "InvalidArgument");
    const tiny = new FilePool({ name: "tiny", id: 8, root: path.join(dir, "tiny"), maxImageBytes: 4 * MiB });
    await rejectsWith(tiny.createImage("huge", 4 * MiB + 1), "OutOfRange");
    assert.equal((await tiny.createImage("max", 4 * MiB)).sizeBytes, 4 * MiB);
  });

  it("rejects bad names and creates nothing outside the root", async () => {
    const bad = ["../x", "a/b", "", ".hidden", "x".repeat(200), "a..b", "-dash", "sp ace", "/abs"];
    for (const name of bad) {
      assert.throws(() => pool.imagePath(name), { name: "DriverError", code: "InvalidArgument" }, name);
      await rejectsWith(pool.createImage(name, MiB), "InvalidArgument");
      await rejectsWith(pool.statImage(name), "InvalidArgument");
      await rejectsWith(pool.deleteImage(name), "InvalidArgument");
    }
    await rejectsWith(pool.snapshotImage("one-byte", "../snap"), "InvalidArgument");
    await rejectsWith(pool.cloneImage("../one-byte", "ok-target", MiB), "InvalidArgument");
    assert.deepEqual((await readdir(dir)).sort(), ["pool", "tiny"]);
    assert.equal(await pool.statImage("ok-target"), undefined);
  });

  it("resize grows; shrink or same size is a no-op; missing → NotFound", async () => {
    const img = await pool.createImage("grow", 2 * MiB);
    const grown = await pool.resizeImage("grow", 10 * MiB - 1);
    assert.equal(grown.sizeBytes, 10 * MiB);
    assert.equal(grown.id, img.id);
    assert.equal((await stat(pool.imagePath("grow"))).size, 10 * MiB);
    const same = await pool.resizeImage("grow", 3 * MiB);
    assert.equal(same.sizeBytes, 10 * MiB);
    assert.equal((await stat(pool.imagePath("grow"))).size, 10 * MiB);
    await rejectsWith(pool.resizeImage("no-such", MiB), "NotFound");
    await rejectsWith(pool.resizeImage("grow", 2 * 1024 * 1024 * MiB), "OutOfRange");
  });

  it("concurrent resizes never shrink", async () => {
    await pool.createImage("race-grow", MiB);
    await Promise.all([20, 5, 30, 10, 25].map((m) => pool.resizeImage("race-grow", m * MiB)));
    assert.equal((await pool.statImage("race-grow"))?.sizeBytes, 30 * MiB);
  });

  const pattern = Buffer.from("snapshot-pattern-0123456789");
  const overwrite = Buffer.from("OVERWRITTEN-AFTER-SNAPSHOT!");

  it("snapshot is read-only and keeps the bytes of the moment", async () => {
    await pool.createImage("src", 8 * MiB);
    await writeAt(pool.imagePath("src"), 5 * MiB, pattern);
    const snap = await pool.snapshotImage("src", "src-snap");
    assert.equal(snap.readOnly, true);
    assert.equal(snap.sizeBytes, 8 * MiB);
    assert.notEqual(snap.id, (await pool.statImage("src"))?.id);
    assert.equal((await stat(pool.imagePath("src-snap"))).mode & 0o777, 0o444);

    await writeAt(pool.imagePath("src"), 5 * MiB, overwrite);
    assert.deepEqual(await readAt(pool.imagePath("src-snap"), 5 * MiB, pattern.length), pattern);
    assert.deepEqual(await readAt(pool.imagePath("src"), 5 * MiB, overwrite.length), overwrite);

    assert.deepEqual(await pool.snapshotImage("src", "src-snap"), snap, "idempotent");
    await rejectsWith(pool.snapshotImage("src", "src"), "AlreadyExists");
    await rejectsWith(pool.resizeImage("src-snap", 16 * MiB), "InvalidArgument");
    await rejectsWith(pool.snapshotImage("no-such", "snap-2"), "NotFound");
    assert.equal(await pool.statImage("snap-2"), undefined);
  });

  it("clone of a snapshot or an image has its bytes, is writable and grows", async () => {
    const fromSnap = await pool.cloneImage("src-snap", "clone-of-snap", 12 * MiB);
    assert.equal(fromSnap.readOnly, false);
    assert.equal(fromSnap.sizeBytes, 12 * MiB);
    assert.equal((await stat(pool.imagePath("clone-of-snap"))).size, 12 * MiB);
    assert.deepEqual(await readAt(pool.imagePath("clone-of-snap"), 5 * MiB, pattern.length), pattern);
    await writeAt(pool.imagePath("clone-of-snap"), 11 * MiB, overwrite);
    assert.deepEqual(await readAt(pool.imagePath("clone-of-snap"), 11 * MiB, overwrite.length), overwrite);
    assert.deepEqual(await readAt(pool.imagePath("src-snap"), 5 * MiB, pattern.length), pattern);

    const fromImage = await pool.cloneImage("src", "clone-of-src", 8 * MiB);
    assert.equal(fromImage.readOnly, false);
    assert.equal(fromImage.sizeBytes, 8 * MiB);
    assert.deepEqual(await readAt(pool.imagePath("clone-of-src"), 5 * MiB, overwrite.length), overwrite);
    // A clone of the resizable image is itself resizable.
    assert.equal((await pool.resizeImage("clone-of-src", 9 * MiB)).sizeBytes, 9 * MiB);

    const st = await stat(pool.imagePath("clone-of-snap"));
    assert.ok(st.blocks * 512 < 4 * MiB, `expected a sparse clone, ${st.blocks} blocks allocated`);

    assert.deepEqual(await pool.cloneImage("src-snap", "clone-of-snap", 12 * MiB), fromSnap, "idempotent");
    await rejectsWith(pool.cloneImage("src-snap", "clone-of-snap", 13 * MiB), "AlreadyExists");
  });

  it("clone smaller than the source → OutOfRange; missing source → NotFound", async () => {
    await rejectsWith(pool.cloneImage("src", "too-small", 4 * MiB), "OutOfRange");
    await rejectsWith(pool.cloneImage("no-such", "orphan", 4 * MiB), "NotFound");
    assert.equal(await pool.statImage("too-small"), undefined);
    assert.equal(await pool.statImage("orphan"), undefined);
  });

  it("delete twice is fine; stat of a missing image is undefined", async () => {
    await pool.createImage("doomed", MiB);
    await pool.deleteImage("doomed");
    await pool.deleteImage("doomed");
    assert.equal(await pool.statImage("doomed"), undefined);
    await pool.deleteImage("src-snap"); // read-only snapshots delete too
    assert.equal(await pool.statImage("src-snap"), undefined);
  });

  it("20 concurrent creates of one name agree on one image", async () => {
    const results = await Promise.all(Array.from({ length: 20 }, () => pool.createImage("race", 5 * MiB)));
    const ids = new Set(results.map((r) => r.id));
    assert.equal(ids.size, 1);
    assert.ok(results.every((r) => r.sizeBytes === 5 * MiB));
    const files = await readdir(pool.root);
    assert.equal(files.filter((f) => f === "race.img").length, 1);
    assert.deepEqual(
      files.filter((f) => f.startsWith(".tmp-")),
      [],
      "no temp files left",
    );
    assert.equal((await stat(pool.imagePath("race"))).size, 5 * MiB);
  });

  it("lists images sorted by name, skipping foreign files", async () => {
    await writeFile(path.join(pool.root, "notes.txt"), "");
    await writeFile(path.join(pool.root, ".tmp-leftover-123"), "");
    const list = await pool.listImages();
    const names = list.map((i) => i.name);
    assert.deepEqual(names, [...names].sort());
    for (const n of ["clone-of-snap", "clone-of-src", "grow", "idem", "one-byte", "race", "sparse", "src"]) {
      assert.ok(names.includes(n), `${n} listed`);
    }
    assert.ok(!names.includes("src-snap") && !names.includes("doomed"));
    assert.ok(!names.some((n) => n.startsWith(".") || n.includes("notes")));
    const src = list.find((i) => i.name === "src");
    assert.deepEqual(src, await pool.statImage("src"));
  });

  it("reports capacity", async () => {
    const cap = await pool.capacity();
    assert.ok(cap.totalBytes > 0);
    assert.ok(cap.freeBytes > 0 && cap.freeBytes <= cap.totalBytes);
    assert.equal(cap.maxImageBytes, 1024 * 1024 * MiB);
  });

  it("imagePath stays inside the root", () => {
    assert.equal(pool.imagePath("src"), path.join(pool.root, "src.img"));
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
