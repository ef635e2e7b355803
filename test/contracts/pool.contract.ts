/**
 * What every pool backend (services/journal/src/pools/port.ts) does, as one suite run
 * against each implementation (test/pool.test.ts: FilePool in a directory, RbdPool on a real
 * single-node Ceph): sizes rounded up to whole MiB and bounded, idempotent create and
 * AlreadyExists on another size, resize that never shrinks, read-only snapshots that keep the
 * bytes of their moment, clones at least as large as their source with its bytes, snapshots and
 * clones that outlive their source, delete of a missing image, NotFound on missing sources,
 * concurrent builders that agree on one image, stat and list (no temporaries), capacity, and
 * the publish context.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MiB } from "@csi/contracts";
import type { ImageInfo, PoolBackend } from "@csi/journal/pools";

/** One pool of the backend, and the backend's own ways to its images' bytes. */
export interface PoolUnderTest {
  pool: PoolBackend;
  write(name: string, offset: number, data: Buffer): Promise<void>;
  read(name: string, offset: number, length: number): Promise<Buffer>;
  /** The temporary entries of builds the backend holds now (none may be left after a call). */
  temporaries(): Promise<string[]>;
  /** Another pool of the backend with this largest image (closed with the suite). */
  withMaxImageBytes(max: number): Promise<PoolBackend>;
  close(): Promise<void>;
}

async function rejectsWith(p: Promise<unknown>, code: string, what = ""): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.equal((err as { name?: unknown }).name, "DriverError", `${what}: ${err}`);
    assert.equal((err as { code?: unknown }).code, code, `${what}: ${(err as Error).message}`);
    return true;
  });
}

const pattern = Buffer.from("snapshot-pattern-0123456789");
const overwrite = Buffer.from("OVERWRITTEN-AFTER-SNAPSHOT!");

export function poolContract(label: string, open: () => Promise<PoolUnderTest>): void {
  describe(`pool contract: ${label}`, () => {
    let t: PoolUnderTest;
    let pool: PoolBackend;
    before(async () => {
      t = await open();
      pool = t.pool;
    });
    after(() => t?.close());

    test("create rounds up to a whole MiB; the same rounded size again is the same image, another size AlreadyExists", async () => {
      const small = await pool.createImage("one-byte", 1);
      assert.equal(small.sizeBytes, MiB);
      assert.equal(small.readOnly, false);
      assert.ok(small.id.length > 0);
      assert.equal((await pool.createImage("odd", 64 * MiB + 3)).sizeBytes, 65 * MiB);
      const a = await pool.createImage("idem", 3 * MiB);
      assert.deepEqual(await pool.createImage("idem", 3 * MiB - 100), a);
      await rejectsWith(pool.createImage("idem", 4 * MiB), "AlreadyExists");
      assert.deepEqual(await pool.statImage("idem"), a);
    });

    test("bad sizes and names: InvalidArgument; past the pool's largest image: OutOfRange; nothing made", async () => {
      for (const size of [0, -1, Number.NaN]) await rejectsWith(pool.createImage("bad-size", size), "InvalidArgument", String(size));
      const tiny = await t.withMaxImageBytes(4 * MiB);
      await rejectsWith(tiny.createImage("huge", 4 * MiB + 1), "OutOfRange");
      assert.equal(await tiny.statImage("huge"), undefined);
      for (const name of ["../x", "a/b", "", ".hidden", "x".repeat(200), "a..b", "-dash", "sp ace", "/abs", "a@b"]) {
        await rejectsWith(pool.createImage(name, MiB), "InvalidArgument", name);
        await rejectsWith(pool.statImage(name), "InvalidArgument", name);
        await rejectsWith(pool.deleteImage(name), "InvalidArgument", name);
        assert.throws(() => pool.publishContext(name), { name: "DriverError", code: "InvalidArgument" }, name);
      }
      await rejectsWith(pool.snapshotImage("one-byte", "../snap"), "InvalidArgument");
      await rejectsWith(pool.cloneImage("../one-byte", "ok-target", MiB), "InvalidArgument");
      assert.equal(await pool.statImage("ok-target"), undefined);
    });

    test("resize grows (same id); a smaller or equal size answers the current one; missing → NotFound; too large → OutOfRange", async () => {
      const img = await pool.createImage("grow", 2 * MiB);
      const grown = await pool.resizeImage("grow", 10 * MiB - 1);
      assert.deepEqual(grown, { ...img, sizeBytes: 10 * MiB });
      assert.equal((await pool.resizeImage("grow", 3 * MiB)).sizeBytes, 10 * MiB);
      assert.equal((await pool.statImage("grow"))?.sizeBytes, 10 * MiB);
      await rejectsWith(pool.resizeImage("no-such", MiB), "NotFound");
      await rejectsWith(pool.resizeImage("grow", 2 * 1024 * 1024 * MiB), "OutOfRange");
    });

    test("concurrent resizes never shrink", async () => {
      await pool.createImage("race-grow", MiB);
      await Promise.all([20, 5, 30, 10, 25].map((m) => pool.resizeImage("race-grow", m * MiB)));
      assert.equal((await pool.statImage("race-grow"))?.sizeBytes, 30 * MiB);
    });

    test("a snapshot is read-only and keeps the bytes of its moment; again is the same; missing source → NotFound", async () => {
      await pool.createImage("src", 8 * MiB);
      await t.write("src", 5 * MiB, pattern);
      const snap = await pool.snapshotImage("src", "src-snap");
      assert.equal(snap.readOnly, true);
      assert.equal(snap.sizeBytes, 8 * MiB);
      assert.notEqual(snap.id, (await pool.statImage("src"))?.id);
      await t.write("src", 5 * MiB, overwrite);
      assert.deepEqual(await t.read("src-snap", 5 * MiB, pattern.length), pattern);
      assert.deepEqual(await t.read("src", 5 * MiB, overwrite.length), overwrite);
      assert.deepEqual(await pool.snapshotImage("src", "src-snap"), snap, "idempotent");
      assert.deepEqual(await pool.statImage("src-snap"), snap);
      await rejectsWith(pool.snapshotImage("src", "src"), "AlreadyExists", "a writable image of that name");
      await rejectsWith(pool.resizeImage("src-snap", 16 * MiB), "InvalidArgument", "resize of a snapshot");
      await rejectsWith(pool.snapshotImage("no-such", "snap-2"), "NotFound");
      assert.equal(await pool.statImage("snap-2"), undefined);
      assert.deepEqual(await t.temporaries(), []);
    });

    test("a clone of a snapshot or of an image has its bytes, is writable, grows to the size asked; again is the same", async () => {
      const fromSnap = await pool.cloneImage("src-snap", "clone-of-snap", 12 * MiB);
      assert.equal(fromSnap.readOnly, false);
      assert.equal(fromSnap.sizeBytes, 12 * MiB);
      assert.deepEqual(await t.read("clone-of-snap", 5 * MiB, pattern.length), pattern);
      await t.write("clone-of-snap", 11 * MiB, overwrite);
      assert.deepEqual(await t.read("clone-of-snap", 11 * MiB, overwrite.length), overwrite);
      assert.deepEqual(await t.read("src-snap", 5 * MiB, pattern.length), pattern, "the snapshot is untouched");
      const fromImage = await pool.cloneImage("src", "clone-of-src", 8 * MiB);
      assert.equal(fromImage.readOnly, false);
      assert.equal(fromImage.sizeBytes, 8 * MiB);
      assert.deepEqual(await t.read("clone-of-src", 5 * MiB, overwrite.length), overwrite);
      assert.equal((await pool.resizeImage("clone-of-src", 9 * MiB)).sizeBytes, 9 * MiB);
      assert.deepEqual(await pool.cloneImage("src-snap", "clone-of-snap", 12 * MiB), fromSnap, "idempotent");
      await rejectsWith(pool.cloneImage("src-snap", "clone-of-snap", 13 * MiB), "AlreadyExists");
      assert.deepEqual(await t.temporaries(), []);
    });

    test("a clone smaller than its source → OutOfRange; a missing source → NotFound; nothing left behind", async () => {
      await rejectsWith(pool.cloneImage("src", "too-small", 4 * MiB), "OutOfRange");
      await rejectsWith(pool.cloneImage("no-such", "orphan", 4 * MiB), "NotFound");
      assert.equal(await pool.statImage("too-small"), undefined);
      assert.equal(await pool.statImage("orphan"), undefined);
      assert.deepEqual(await t.temporaries(), []);
    });

    test("snapshots and clones outlive their source, whose name is free again at once", async () => {
      await pool.createImage("parent", 4 * MiB);
      await t.write("parent", MiB, pattern);
      await pool.snapshotImage("parent", "parent-snap");
      await pool.cloneImage("parent", "parent-clone", 4 * MiB);
      await pool.deleteImage("parent");
      assert.equal(await pool.statImage("parent"), undefined);
      assert.deepEqual(await t.read("parent-snap", MiB, pattern.length), pattern);
      assert.deepEqual(await t.read("parent-clone", MiB, pattern.length), pattern);
      const again = await pool.createImage("parent", 2 * MiB);
      assert.equal(again.sizeBytes, 2 * MiB);
      assert.deepEqual(await t.read("parent", MiB, pattern.length), Buffer.alloc(pattern.length), "a new, empty image");
      const restored = await pool.cloneImage("parent-snap", "restored", 4 * MiB);
      await pool.deleteImage("parent-snap");
      assert.deepEqual(await t.read("restored", MiB, pattern.length), pattern);
      assert.equal((await pool.statImage("restored"))?.id, restored.id);
    });

    test("delete of a missing image is fine; a deleted image is gone from stat and list", async () => {
      await pool.createImage("doomed", MiB);
      await pool.deleteImage("doomed");
      await pool.deleteImage("doomed");
      await pool.deleteImage("never-was");
      assert.equal(await pool.statImage("doomed"), undefined);
      await pool.snapshotImage("one-byte", "doomed-snap");
      await pool.deleteImage("doomed-snap"); // read-only snapshots delete too
      assert.equal(await pool.statImage("doomed-snap"), undefined);
      const names = (await pool.listImages()).map((i) => i.name);
      assert.ok(!names.includes("doomed") && !names.includes("doomed-snap"));
    });

    test("concurrent creates of one name agree on one image; so do concurrent snapshots", async () => {
      const made = await Promise.all(Array.from({ length: 20 }, () => pool.createImage("race", 5 * MiB)));
      assert.equal(new Set(made.map((r) => r.id)).size, 1);
      assert.ok(made.every((r) => r.sizeBytes === 5 * MiB));
      const snaps = await Promise.all(Array.from({ length: 5 }, () => pool.snapshotImage("race", "race-snap")));
      assert.equal(new Set(snaps.map((r) => r.id)).size, 1);
      assert.ok(snaps.every((s) => s.readOnly));
      assert.deepEqual(await t.temporaries(), []);
    });

    test("list: every image sorted by name, as stat sees it; no temporaries", async () => {
      const list = await pool.listImages();
      const names = list.map((i) => i.name);
      assert.deepEqual(names, [...names].sort());
      for (const n of ["clone-of-snap", "clone-of-src", "grow", "idem", "one-byte", "race", "race-snap", "src", "src-snap"])
        assert.ok(names.includes(n), `${n} listed`);
      assert.ok(!names.some((n) => n.startsWith(".")));
      for (const n of ["src", "src-snap"]) assert.deepEqual(list.find((i) => i.name === n) as ImageInfo, await pool.statImage(n));
    });

    test("capacity: total, free within it, the largest image", async () => {
      const cap = await pool.capacity();
      assert.ok(cap.totalBytes > 0);
      assert.ok(cap.freeBytes > 0 && cap.freeBytes <= cap.totalBytes, JSON.stringify(cap));
      assert.equal(cap.maxImageBytes, pool.maxImageBytes);
    });

    test("the publish context says where an image is", () => {
      const ctx = pool.publishContext("src");
      assert.ok(
        Object.values(ctx).some((v) => v.includes("src")),
        JSON.stringify(ctx),
      );
    });
  });
}
