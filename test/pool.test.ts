/**
 * The pool contract (test/contracts/pool.contract.ts) held against both backends: FilePool in a
 * temporary directory, and RbdPool on a real single-node Ceph started for this file (skipped,
 * with the reason, only where Ceph's packages cannot be installed). Then what only RBD shows, as
 * `rbd` itself sees it: the owner metadata on each image, snapshots as ceph-csi makes them (a clone
 * with a snapshot of its own name, no temporary snapshot left on the source), the clone-depth
 * limit, a parent kept in the trash while clones need it and purged after, leftovers of an
 * interrupted build swept, and each failure of the cluster or the helper as its CSI code.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { open, readdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type DriverError, MiB } from "@csi/contracts";
import { FilePool, OWNER_KEY, RbdPool, type RbdPoolOptions } from "@csi/journal/pools";
import { CEPH_PYTHON, type CephCluster, startCeph, tempDir, whyNoCeph } from "@csi/testkit";
import { poolContract } from "./contracts/pool.contract.js";

async function fileIO(file: string, mode: "r" | "r+", f: (fh: Awaited<ReturnType<typeof open>>) => Promise<unknown>) {
  const fh = await open(file, mode);
  try {
    return await f(fh);
  } finally {
    await fh.close();
  }
}

poolContract("FilePool", async () => {
  const dir = await tempDir("csi-pool-");
  let n = 0;
  const make = async (max?: number) => {
    const p = new FilePool({ name: `p${++n}`, id: n, root: path.join(dir, `p${n}`), ...(max ? { maxImageBytes: max } : {}) });
    await p.init();
    return p;
  };
  const pool = await make();
  return {
    pool,
    write: async (name, offset, data) => void (await fileIO(pool.imagePath(name), "r+", (fh) => fh.write(data, 0, data.length, offset))),
    read: async (name, offset, length) => {
      const buf = Buffer.alloc(length);
      await fileIO(pool.imagePath(name), "r", (fh) => fh.read(buf, 0, length, offset));
      return buf;
    },
    temporaries: async () => (await readdir(pool.root)).filter((f) => f.startsWith(".tmp-")),
    withMaxImageBytes: make,
    close: () => rm(dir, { recursive: true, force: true }),
  };
});

const noCeph = whyNoCeph();
let ceph: CephCluster | undefined;
const pools: RbdPool[] = [];
before(async () => {
  if (!noCeph) ceph = await startCeph();
});
after(async () => {
  await Promise.all(pools.map((p) => p.close()));
  await ceph?.stop();
});

/** An RbdPool on the test cluster's pool `rbd`, as the `csi` user (profile rbd, no admin rights). */
function rbdPool(more: Partial<RbdPoolOptions> = {}): RbdPool {
  const c = ceph as CephCluster;
  const p = new RbdPool({ name: "ceph", id: 2, cephPool: "rbd", monitors: c.monitors, user: c.user, keyFile: c.keyFile, ...more });
  pools.push(p);
  return p;
}

/** Whether process `pid` is gone or a zombie (SIGKILLed, not yet reaped), waiting up to ~5 s for it. */
async function killed(pid: number): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
    if (!stat || stat.split(") ")[1]?.startsWith("Z")) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

const HOLD_OPEN = `
import os, sys, rados, rbd
c = rados.Rados(rados_id="admin", conffile=os.environ["CEPH_CONF"]); c.connect()
with rbd.Image(c.open_ioctx(sys.argv[1]), sys.argv[2]):
    print("open", flush=True)
    sys.stdin.read()
c.shutdown()
`;

const rbdNames = async () => ((await ceph?.rbdJson(["ls", "rbd"])) ?? []) as string[];

describe("RbdPool", { skip: noCeph }, () => {
  poolContract("RbdPool", async () => {
    const c = ceph as CephCluster;
    const pool = rbdPool();
    await pool.init();
    await c.mgrActive; // capacity comes from the manager's statistics
    return {
      pool,
      write: (name, offset, data) => c.writeImage("rbd", name, offset, data),
      read: (name, offset, length) => c.readImage("rbd", name, offset, length),
      temporaries: async () => (await rbdNames()).filter((n) => n.startsWith(".tmp-")),
      withMaxImageBytes: async (max) => rbdPool({ maxImageBytes: max }),
      close: async () => {},
    };
  });

  describe("as rbd sees it", () => {
    let pool: RbdPool;
    before(async () => {
      pool = rbdPool({ sweepEveryMs: 0, maxCloneDepth: 2 });
      await pool.init();
    });
    const info = async (name: string) =>
      (await ceph?.rbdJson(["info", `rbd/${name}`])) as { size: number; parent?: { image: string; snapshot: string }; features: string[] };
    const snaps = async (name: string) => (await ceph?.rbdJson(["snap", "ls", "--all", `rbd/${name}`])) as { name: string; namespace: { type: string } }[];
    const owner = (kind: "volume" | "snapshot", uuid: string, name: string) => ({ kind, uuid, name, clusterID: "c1" });

    test("every image made names its owner in its metadata; a snapshot is a clone with a snapshot of its own name", async () => {
      await pool.createImage("meta-vol", 4 * MiB, owner("volume", "u-vol", "pvc-meta"));
      await pool.snapshotImage("meta-vol", "meta-snap", owner("snapshot", "u-snap", "snap-meta"));
      await pool.cloneImage("meta-snap", "meta-clone", 8 * MiB, owner("volume", "u-clone", "pvc-clone"));
      const meta = (await ceph?.rbdJson(["image-meta", "list", "rbd/meta-vol"])) as Record<string, string>;
      assert.deepEqual(Object.keys(meta), [OWNER_KEY], "one key: one metadata write");
      assert.deepEqual(JSON.parse(meta[OWNER_KEY] ?? ""), { kind: "volume", uuid: "u-vol", name: "pvc-meta", cluster: "c1" });
      const ownerIn = async (image: string) => JSON.parse((await pool.imageMeta(image))?.[OWNER_KEY] ?? "{}") as Record<string, string>;
      assert.equal((await ownerIn("meta-snap")).name, "snap-meta");
      assert.equal((await ownerIn("meta-clone")).uuid, "u-clone");
      const snap = await info("meta-snap");
      assert.equal(snap.parent?.image, "meta-vol");
      assert.ok(snap.features.includes("deep-flatten"), snap.features.join());
      assert.deepEqual(
        (await snaps("meta-snap")).map((s) => [s.name, s.namespace.type]),
        [["meta-snap", "user"]],
      );
      // The temporary snapshot of the source left the user namespace: the snapshot image still needs it (trash).
      assert.deepEqual(
        (await snaps("meta-vol")).map((s) => s.namespace.type),
        ["trash"],
      );
      const clone = await info("meta-clone");
      assert.deepEqual([clone.parent?.image, clone.parent?.snapshot, clone.size], ["meta-snap", "meta-snap", 8 * MiB]);
      assert.ok(clone.features.includes("layering") && !clone.features.includes("deep-flatten"), `the pool's features: ${clone.features}`);
    });

    test("bound to its log in the Ceph pool's metadata: every image made after carries the log; another log, or another pool on the same Ceph pool, is refused", async () => {
      const to = { cluster: "c1", pool: "ceph", log: `L-${randomUUID()}` };
      const bound = await pool.bind(to, { logRecords: 0, rebind: true });
      assert.deepEqual([bound.log, pool.boundLog], [to.log, to.log]);
      assert.equal((await pool.bind(to, { logRecords: 0, rebind: false })).boundAt, bound.boundAt, "the same log: kept as it is");
      await pool.createImage("bound-vol", 2 * MiB, owner("volume", "u-bound", "pvc-bound"));
      const meta = (await ceph?.rbdJson(["image-meta", "list", "rbd/bound-vol"])) as Record<string, string>;
      assert.equal((JSON.parse(meta[OWNER_KEY] ?? "{}") as { log?: string }).log, to.log);
      const other = rbdPool();
      await assert.rejects(other.bind({ ...to, log: "L-other" }, { logRecords: 5, rebind: false }), (e: DriverError) => {
        assert.equal(e.code, "FailedPrecondition");
        assert.match(e.message, new RegExp(`belongs to event log ${to.log}, and this journal's log is L-other`));
        return true;
      });
      await assert.rejects(
        other.bind({ ...to, pool: "ceph2" }, { logRecords: 5, rebind: true }),
        /already pool "ceph" of cluster c1: two pools cannot share one Ceph pool/,
      );
      const rebound = await other.bind({ ...to, log: "L-other" }, { logRecords: 0, rebind: true });
      assert.equal(rebound.previous, to.log, "the previous log kept in the binding");
      assert.equal((await pool.listImages()).find((i) => i.name === "bound-vol")?.owner?.log, to.log, "read back by the pool");
      await pool.deleteImage("bound-vol");
      await pool.bind(to, { logRecords: 0, rebind: true }); // back, for the tests after
    });

    test("a clone deeper than maxCloneDepth is flattened before it is published", async () => {
      // meta-vol ← meta-snap (1) ← meta-clone (2) ← deep-snap (3: over 2, flattened) ← deep-clone (1)
      await pool.snapshotImage("meta-clone", "deep-snap");
      assert.equal((await info("deep-snap")).parent, undefined, "flattened");
      await pool.cloneImage("deep-snap", "deep-clone", 8 * MiB);
      assert.equal((await info("deep-clone")).parent?.image, "deep-snap");
    });

    test("a parent deleted while clones need it waits in the trash; once they are gone the next sweep purges it", async () => {
      await pool.createImage("trash-parent", 2 * MiB);
      await pool.cloneImage("trash-parent", "trash-child", 2 * MiB);
      await pool.deleteImage("trash-parent");
      assert.ok(!(await rbdNames()).includes("trash-parent"), "its name is free at once");
      const trash = async () => ((await (ceph as CephCluster).rbdJson(["trash", "ls", "--all", "rbd"])) as { name: string }[]).map((e) => e.name);
      assert.ok((await trash()).includes("trash-parent"), "kept for its clone");
      await pool.deleteImage("trash-child");
      await pool.deleteImage("never-was"); // any call sweeps (sweepEveryMs 0)
      assert.ok(!(await trash()).includes("trash-parent"), "purged");
    });

    test("leftovers of an interrupted build go with the next build or delete of that name, and no other's", async () => {
      const leftover = (name: string) => ceph?.rbd(["create", "--size", "1M", `rbd/.tmp-${name}-0123456789ab`]);
      await leftover("half-snap");
      await leftover("half-snap-b");
      await pool.createImage("half-src", MiB);
      await pool.snapshotImage("half-src", "half-snap");
      await leftover("half-del");
      await pool.deleteImage("half-del");
      assert.deepEqual(
        (await rbdNames()).filter((n) => n.startsWith(".tmp-")),
        [".tmp-half-snap-b-0123456789ab"],
      );
      await ceph?.rbd(["rm", "--no-progress", "rbd/.tmp-half-snap-b-0123456789ab"]);
    });

    test("an image someone has open (a node mapped it) is not deleted: FailedPrecondition", async () => {
      await pool.createImage("in-use", MiB);
      const c = ceph as CephCluster;
      // A watcher for as long as the Python process holds the image open: it says so on stdout, then waits for stdin to end.
      const holder = spawn(CEPH_PYTHON, ["-c", HOLD_OPEN, "rbd", "in-use"], { env: { ...process.env, CEPH_CONF: c.conf }, stdio: ["pipe", "pipe", "inherit"] });
      try {
        await new Promise((resolve, reject) => {
          holder.stdout.once("data", resolve);
          holder.once("exit", reject);
        });
        await assert.rejects(pool.deleteImage("in-use"), (e: Error & { code: string }) => e.code === "FailedPrecondition" && /watchers/.test(e.message));
        assert.ok((await rbdNames()).includes("in-use"));
      } finally {
        holder.stdin.end();
      }
      await new Promise((r) => holder.once("exit", r));
      await pool.deleteImage("in-use");
      assert.ok(!(await rbdNames()).includes("in-use"));
    });

    test("a volume is made as librbd's own create makes it, in 3 OSD ops; a Ceph pool that overrides how images are made gets librbd's create", async () => {
      const c = ceph as CephCluster;
      const direct = rbdPool();
      await direct.createImage("direct-warm", 4 * MiB); // the helper started, the sweep done
      const ops0 = await c.osdOps();
      await direct.createImage("direct-vol", 4 * MiB, owner("volume", "u-direct", "pvc-direct"));
      assert.equal((await c.osdOps()) - ops0, 3, "the directory entry, the id object, the header with its owner");
      await c.rbd(["create", "--size", "4M", "--image-feature", "layering", "rbd/by-librbd"]);
      type Info = Record<string, unknown>;
      const shape = async (name: string) => {
        const info = (await c.rbdJson(["info", `rbd/${name}`])) as Info;
        assert.equal(info.block_name_prefix, `rbd_data.${info.id}`);
        const own = ["name", "id", "block_name_prefix", "create_timestamp", "access_timestamp", "modify_timestamp"];
        return Object.fromEntries(Object.entries(info).filter(([k]) => !own.includes(k)));
      };
      assert.deepEqual(await shape("direct-vol"), await shape("by-librbd"));
      assert.equal(JSON.parse(((await c.rbdJson(["image-meta", "list", "rbd/direct-vol"])) as Record<string, string>)[OWNER_KEY] ?? "").uuid, "u-direct");
      // The image works as any other: a snapshot, a clone of it, a resize, data, and librbd's delete.
      await direct.snapshotImage("direct-vol", "direct-snap");
      await direct.cloneImage("direct-snap", "direct-clone", 8 * MiB);
      assert.equal((await direct.resizeImage("direct-vol", 8 * MiB)).sizeBytes, 8 * MiB);
      await c.writeImage("rbd", "direct-vol", 4096, Buffer.from("direct"));
      assert.equal((await c.readImage("rbd", "direct-vol", 4096, 6)).toString(), "direct");
      await assert.rejects(direct.createImage("direct-vol", 16 * MiB), (e: Error & { code: string }) => e.code === "AlreadyExists");
      await direct.deleteImage("direct-clone");
      await direct.deleteImage("direct-snap");
      await direct.deleteImage("direct-vol");
      assert.ok(!(await rbdNames()).includes("direct-vol"));
      // A pool-level override of librbd's create (here the object order): librbd's create, which honours it.
      await c.rbd(["config", "pool", "set", "rbd", "rbd_default_order", "23"]);
      try {
        const overridden = rbdPool();
        await overridden.createImage("override-vol", 4 * MiB, owner("volume", "u-over", "pvc-over"));
        assert.equal(((await c.rbdJson(["info", "rbd/override-vol"])) as Info).order, 23);
      } finally {
        await c.rbd(["config", "pool", "remove", "rbd", "rbd_default_order"]);
      }
    });

    test("a create cut between its writes (a directory entry, an id object, no header) is made again by the name's next create; its delete removes it", async () => {
      const c = ceph as CephCluster;
      // What a helper SIGKILLed after its first two writes leaves (librbd's own create request leaves the same).
      const cut = async (name: string, id: string) => {
        const env = { ...process.env, CEPH_CONF: c.conf };
        const code = `
import os, struct, sys, rados
e = lambda b: struct.pack("<I", len(b)) + b
c = rados.Rados(rados_id="admin", conffile=os.environ["CEPH_CONF"]); c.connect(); io = c.open_ioctx("rbd")
name, image_id = sys.argv[1].encode(), sys.argv[2].encode()
io.execute("rbd_directory", "rbd", "dir_add_image", e(name) + e(image_id))
op = io.create_write_op(); op.new(rados.LIBRADOS_CREATE_EXCLUSIVE); op.execute("rbd", "set_id", e(image_id)); io.operate_write_op(op, "rbd_id." + sys.argv[1]); io.release_write_op(op)
c.shutdown()`;
        await new Promise<void>((resolve, reject) =>
          spawn(CEPH_PYTHON, ["-c", code, name, id], { env, stdio: "inherit" }).on("exit", (n) => (n === 0 ? resolve() : reject(new Error(`exit ${n}`)))),
        );
      };
      await cut("cut-vol", "deadbeef0001");
      assert.ok((await rbdNames()).includes("cut-vol"), "rbd ls lists the remnant");
      assert.equal(await pool.statImage("cut-vol"), undefined, "librbd cannot open it");
      const made = await pool.createImage("cut-vol", 4 * MiB, owner("volume", "u-cut", "pvc-cut"));
      assert.notEqual(made.id, "deadbeef0001");
      assert.equal((await info("cut-vol")).size, 4 * MiB);
      await cut("cut-gone", "deadbeef0002");
      await pool.deleteImage("cut-gone");
      assert.ok(!(await rbdNames()).includes("cut-gone"), "deleted: the remnant is gone");
      await pool.deleteImage("cut-vol");
    });

    test("the publish context names the Ceph pool, monitors and user, never the key", async () => {
      const ctx = pool.publishContext("meta-vol");
      const key = (await open((ceph as CephCluster).keyFile, "r").then((fh) => fh.readFile("utf8").finally(() => fh.close()))).trim();
      assert.deepEqual(ctx, { poolKind: "rbd", cephPool: "rbd", imageName: "meta-vol", monitors: ceph?.monitors.join(","), cephUser: "csi" });
      assert.ok(!JSON.stringify(ctx).includes(key));
    });
  });

  describe("failures as CSI codes", () => {
    const code = (p: Promise<unknown>) =>
      p.then(
        () => "OK",
        (e: { code?: string; message?: string }) => `${e.code}`,
      );

    test("a key file that is missing or holds no key: InvalidArgument at start, naming the file and not its content", async () => {
      const dir = await tempDir("csi-key-");
      try {
        const bad = path.join(dir, "userKey");
        await writeFile(bad, "not a key, but a secret-looking text\n");
        await assert.rejects(
          rbdPool({ keyFile: path.join(dir, "missing") }).init(),
          (e: Error & { code: string }) => e.code === "InvalidArgument" && e.message.includes("missing"),
        );
        await assert.rejects(
          rbdPool({ keyFile: bad }).init(),
          (e: Error & { code: string }) => e.code === "InvalidArgument" && !e.message.includes("secret-looking"),
        );
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    test("a wrong key: Internal, access denied; an unreachable cluster: Unavailable within the call's bound", async () => {
      const dir = await tempDir("csi-key-");
      try {
        const wrong = path.join(dir, "userKey");
        await writeFile(wrong, "AQBk1jhnAAAAABAAzq0UhVkU3SYXtGtSpyZHMw==\n", { mode: 0o600 });
        const denied = rbdPool({ keyFile: wrong, opTimeoutMs: 10_000 });
        await assert.rejects(denied.statImage("x"), (e: Error & { code: string }) => e.code === "Internal" && /access denied|EACCES|EPERM/.test(e.message));
        const started = Date.now();
        const away = rbdPool({ monitors: ["127.0.0.1:1"], opTimeoutMs: 2000 });
        assert.equal(await code(away.createImage("x", MiB)), "Unavailable");
        assert.ok(Date.now() - started < 30_000);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    test("no Python with python3-rbd to run the helper: Unavailable, naming it; nothing else breaks", async () => {
      const pool = rbdPool({ python: "/nonexistent/python3" });
      await assert.rejects(pool.statImage("meta-vol"), (e: Error & { code: string }) => e.code === "Unavailable" && /nonexistent\/python3/.test(e.message));
      await assert.rejects(pool.statImage("meta-vol"), (e: Error & { code: string }) => e.code === "Unavailable", "each call tries again");
    });

    test("a helper that stops answering is killed at the call's deadline (Unavailable); the next call starts another", async () => {
      const pool = rbdPool({ opTimeoutMs: 3000 });
      await pool.createImage("helper-probe", MiB);
      const pid = pool.helperPid as number;
      process.kill(pid, "SIGSTOP");
      assert.equal(await code(pool.statImage("helper-probe")), "Unavailable");
      assert.equal(pool.helperPid, undefined, "the frozen helper was let go");
      assert.ok(await killed(pid), "and killed");
      assert.equal((await pool.statImage("helper-probe"))?.name, "helper-probe");
      assert.notEqual(pool.helperPid, pid);
    });

    test("an OSD that stops answering: librados times the call out, Unavailable; the pool works again after", async () => {
      const pool = rbdPool({ opTimeoutMs: 3000 });
      await pool.statImage("meta-vol");
      ceph?.signal("osd", "SIGSTOP");
      try {
        assert.equal(await code(pool.createImage("frozen-osd", MiB)), "Unavailable");
      } finally {
        ceph?.signal("osd", "SIGCONT");
      }
      const after = rbdPool();
      assert.equal((await after.createImage("after-freeze", MiB)).sizeBytes, MiB);
    });
  });
});
