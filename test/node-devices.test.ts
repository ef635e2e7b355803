/**
 * The Linux-facing adapters against the real kernel: loop devices, mkfs, mounts, bind mounts,
 * online growth, statistics. Needs root and /dev/loop-control; skipped (with the reason) otherwise.
 *
 * Everything lives under one temporary directory, each test in a directory of its own, with a
 * volume of its own brought to the state it starts from (no test uses what an earlier one made).
 * Whatever happens in a test, its directory is then unmounted (deepest first), its loop devices
 * detached, and only then removed; the `after` hook does the same for the whole directory. A test
 * that passes checks that nothing was left attached or mounted before that safety net runs, and
 * the last test checks it for the whole directory.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, open, readdir, readFile, realpath, stat, truncate, unlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import {
  attach,
  bindMount,
  blockDeviceSize,
  detach,
  detectFs,
  findByBackingFile,
  growFs,
  isMountPoint,
  list,
  makeFs,
  mount,
  mountsAt,
  readMounts,
  refreshSize,
  removeFile,
  removeIfEmptyDir,
  run,
  safeJoin,
  stats,
  unmount,
  validateMountFlags,
} from "@csi/node-agent/testing";
import { canResizeExt4Online, cleanupUnder, hasXfs, loopsUnder, mountsLeftUnder, mountsUnder, whyNoDevices } from "@csi/testkit";

const MiB = 1024 * 1024;

const skipAll = whyNoDevices();
const skipXfs = skipAll ?? (hasXfs ? undefined : "mkfs.xfs is not installed (apt-get install -y xfsprogs)");
if (skipAll) console.log(`# block-volume tests skipped: ${skipAll}`);
else if (skipXfs) console.log(`# xfs tests skipped: ${skipXfs}`);

let tmp = "";

before(async () => {
  if (skipAll) return;
  tmp = await realpath(await mkdtemp(path.join(os.tmpdir(), "node-agent-dev-")));
});

after(async () => {
  if (tmp) await cleanupUnder(tmp);
});

async function sparseFile(file: string, size: number): Promise<void> {
  await writeFile(file, "");
  await truncate(file, size);
}

/** The test's own directories (what the CO would make). */
const mkdirs = (d: string) => mkdir(d, { recursive: true, mode: 0o750 });

const rejectsWith = (p: Promise<unknown>, code: string) => assert.rejects(p, { name: "DriverError", code });

let dirs = 0;
/**
 * A test in a directory of its own. If it passes, nothing may be left attached or mounted under
 * that directory (checked, not cleaned); pass or fail, the safety net then unmounts, detaches and
 * removes it, so no test hands anything to the next.
 */
async function inOwnDir(name: string, body: (dir: string) => Promise<void>): Promise<void> {
  const dir = safeJoin(tmp, `${name}-${++dirs}`);
  try {
    await mkdirs(dir);
    await body(dir);
    assert.deepEqual(await loopsUnder(dir), [], "no loop device left behind");
    assert.deepEqual(
      (await mountsLeftUnder(dir)).map((m) => m.mountPoint),
      [],
      "nothing left mounted",
    );
  } finally {
    await cleanupUnder(dir);
  }
}

/** How far a test's own volume is taken before the test starts: the story below, one step per test. */
const stages = ["image", "attached", "formatted", "mounted", "bound", "unbound", "grown", "stored"] as const;
type Stage = (typeof stages)[number];
interface Volume {
  image: string;
  device: string;
  staging: string;
  target: string;
  roTarget: string;
}

function lifecycle(fsType: "ext4" | "xfs", size: number, grownSize: number, skip: string | undefined) {
  describe(`${fsType} volume: attach, mkfs, mount, bind, grow, unmount, detach`, { skip }, () => {
    /** A volume of the test's own at `stage`, made with the adapters whose steps the earlier tests of the story check. */
    async function prepare(root: string, stage: Stage): Promise<Volume> {
      const at = (s: Stage) => stages.indexOf(stage) >= stages.indexOf(s);
      const v: Volume = {
        image: safeJoin(root, "image.img"),
        device: "",
        staging: safeJoin(root, "staging", "vol 1"), // a space, escaped as \040 in mountinfo
        target: safeJoin(root, "pods", "p1", "mount"),
        roTarget: safeJoin(root, "pods", "p2", "mount"),
      };
      await sparseFile(v.image, size);
      for (const d of [v.staging, v.target, v.roTarget]) await mkdirs(d);
      if (at("attached")) v.device = await attach(v.image);
      if (at("formatted")) await makeFs(v.device, fsType);
      if (at("mounted")) {
        await mount(v.device, v.staging, { fsType, flags: ["noatime", "nodev"] });
        await writeFile(path.join(v.staging, "hello.txt"), "written at the staging path");
      }
      if (at("bound")) {
        await bindMount(v.staging, v.target);
        await writeFile(path.join(v.target, "from-target.txt"), "pod data");
        await bindMount(v.staging, v.roTarget, { readOnly: true });
      }
      if (at("unbound")) for (const t of [v.roTarget, v.target]) await unmount(t);
      if (at("grown")) {
        await truncate(v.image, grownSize);
        await refreshSize(v.device);
      }
      if (at("stored")) {
        await unmount(v.staging);
        await detach(v.device, { backingFile: v.image });
        v.device = "";
      }
      return v;
    }

    /** A test on a volume of its own; what it leaves (mounts, its device) is taken down with the adapters, then checked. */
    const onVolume =
      (stage: Stage, body: (v: Volume, t: TestContext) => Promise<void>) =>
      (t: TestContext): Promise<void> =>
        inOwnDir(fsType, async (root) => {
          const v = await prepare(root, stage);
          await body(v, t);
          for (const p of [v.roTarget, v.target, v.staging]) if (existsSync(p)) await unmount(p);
          if (v.device) await detach(v.device, { backingFile: v.image });
        });

    it(
      "attach maps the image to a loop device, and findByBackingFile finds it",
      onVolume("image", async (v) => {
        v.device = await attach(v.image);
        const device = v.device;
        assert.match(device, /^\/dev\/loop\d+$/);
        assert.equal(await findByBackingFile(v.image), device);
        const entry = (await list()).find((d) => d.device === device);
        assert.deepEqual(entry, { device, backingFile: v.image, deleted: false, readOnly: false, autoclear: false });
        assert.equal(await blockDeviceSize(device), size);
      }),
    );

    it(
      "attach read-only gives a second, read-only device",
      onVolume("attached", async ({ image, device }) => {
        const ro = await attach(image, { readOnly: true });
        try {
          assert.notEqual(ro, device);
          assert.equal((await list()).find((d) => d.device === ro)?.readOnly, true);
          assert.equal((await run("blockdev", ["--getro", ro])).stdout.trim(), "1");
        } finally {
          await detach(ro);
        }
        assert.equal(
          (await list()).find((d) => d.device === ro && d.backingFile === image),
          undefined,
        );
      }),
    );

    it(
      "detectFs finds nothing on a new image",
      onVolume("attached", async ({ device }) => {
        assert.equal(await detectFs(device), undefined);
      }),
    );

    it(
      `makeFs makes ${fsType}, detectFs sees it, and a second makeFs is refused`,
      onVolume("attached", async ({ device }) => {
        await makeFs(device, fsType);
        assert.equal(await detectFs(device), fsType);
        await rejectsWith(makeFs(device, fsType), "FailedPrecondition");
      }),
    );

    it(
      "mount puts it at the staging path, with the given flags",
      onVolume("formatted", async ({ device, staging }) => {
        assert.equal(await isMountPoint(staging), false);
        await mount(device, staging, { fsType, flags: ["noatime", "nodev"] });
        assert.equal(await isMountPoint(staging), true);
        const [m, ...more] = await mountsAt(staging);
        assert.equal(more.length, 0);
        assert.equal(m?.mountPoint, staging);
        assert.equal(m?.source, device);
        assert.equal(m?.fsType, fsType);
        assert.ok(m?.options.includes("noatime") && m.options.includes("nodev"), `options ${m?.options}`);
        await writeFile(path.join(staging, "hello.txt"), "written at the staging path");
        await rejectsWith(removeIfEmptyDir(staging), "FailedPrecondition");
      }),
    );

    it(
      "bindMount shows the same files at a target, writable both ways",
      onVolume("mounted", async ({ device, staging, target }) => {
        await bindMount(staging, target);
        assert.equal(await readFile(path.join(target, "hello.txt"), "utf8"), "written at the staging path");
        await writeFile(path.join(target, "from-target.txt"), "pod data");
        assert.equal(await readFile(path.join(staging, "from-target.txt"), "utf8"), "pod data");
        const [m] = await mountsAt(target);
        assert.equal(m?.source, device);
        assert.equal(m?.root, "/");
      }),
    );

    it(
      "a read-only bindMount refuses writes with EROFS, the staging path stays writable",
      onVolume("mounted", async ({ staging, roTarget }) => {
        await bindMount(staging, roTarget, { readOnly: true });
        assert.equal(await readFile(path.join(roTarget, "hello.txt"), "utf8"), "written at the staging path");
        await assert.rejects(writeFile(path.join(roTarget, "nope.txt"), "x"), { code: "EROFS" });
        await writeFile(path.join(staging, "still-rw.txt"), "ok");
      }),
    );

    it(
      "unmount removes the bind mounts; unmounting again is fine; the targets can be removed",
      onVolume("bound", async ({ staging, target, roTarget }) => {
        for (const t of [roTarget, target]) {
          await unmount(t);
          assert.equal(await isMountPoint(t), false);
          await unmount(t);
          assert.deepEqual(await readdir(t), []);
          assert.equal(await removeIfEmptyDir(t), true);
        }
        assert.equal(await isMountPoint(staging), true);
      }),
    );

    it(
      "grows online: bigger image, refreshSize, growFs, and statfs shows the larger size",
      onVolume("unbound", async ({ image, device, staging }, t) => {
        const before = await stats(staging);
        assert.equal(before.kind, "filesystem");
        await truncate(image, grownSize);
        assert.equal(await blockDeviceSize(device), size, "the loop device keeps its old size until refreshed");
        await refreshSize(device);
        assert.equal(await blockDeviceSize(device), grownSize);
        if (fsType === "ext4" && !canResizeExt4Online) {
          await assert.rejects(growFs(device, staging, fsType), { code: "FailedPrecondition", message: /needs the CAP_SYS_RESOURCE capability/ });
          t.diagnostic("this machine drops CAP_SYS_RESOURCE: online ext4 resize is refused (checked the clear error); growing offline instead");
          await unmount(staging);
          await run("e2fsck", ["-f", "-p", device]); // resize2fs wants a checked filesystem when it is not mounted
          await run("resize2fs", [device]);
          await mount(device, staging, { fsType, flags: ["noatime", "nodev"] });
        } else {
          await growFs(device, staging, fsType);
        }
        const grown = await stats(staging);
        assert.ok(grown.kind === "filesystem" && before.kind === "filesystem");
        assert.ok(grown.bytes.total > before.bytes.total + (grownSize - size) * 0.9, `${before.bytes.total} → ${grown.bytes.total}`);
        assert.ok(grown.bytes.total <= grownSize);
        assert.ok(grown.bytes.available > before.bytes.available);
        assert.ok(grown.bytes.used > 0 && grown.inodes.total > 0 && grown.inodes.used > 0);
        assert.equal(await readFile(path.join(staging, "from-target.txt"), "utf8"), "pod data");
      }),
    );

    it(
      "stats of the device itself is its size as a block volume",
      onVolume("grown", async ({ device }) => {
        assert.deepEqual(await stats(device), { kind: "block", bytes: { total: grownSize } });
      }),
    );

    it(
      "unmount, detach, detach again; findByBackingFile then finds nothing",
      onVolume("unbound", async (v) => {
        const { image, device, staging } = v;
        await unmount(staging);
        assert.equal(await isMountPoint(staging), false);
        await detach(device, { backingFile: image });
        await detach(device, { backingFile: image });
        assert.equal(await findByBackingFile(image), undefined);
        assert.equal(await removeIfEmptyDir(staging), true);
        v.device = "";
      }),
    );

    it(
      "the data survives: attach again, mount read-only, read it back",
      onVolume("stored", async (v) => {
        const { image, staging } = v;
        const device = await attach(image);
        v.device = device;
        await mkdirs(staging);
        await mount(device, staging, { fsType, readOnly: true });
        try {
          assert.equal(await readFile(path.join(staging, "from-target.txt"), "utf8"), "pod data");
          await assert.rejects(writeFile(path.join(staging, "x"), "x"), { code: "EROFS" });
        } finally {
          await unmount(staging);
          await detach(device, { backingFile: image });
        }
        v.device = "";
      }),
    );
  });
}

lifecycle("ext4", 64 * MiB, 128 * MiB, skipAll);
lifecycle("xfs", 320 * MiB, 512 * MiB, skipXfs); // mkfs.xfs wants at least 300 MB

describe("loop devices: edge cases", { skip: skipAll }, () => {
  /** The test, in a directory of its own. */
  const edge = (body: (dir: string) => Promise<void>) => () => inOwnDir("edge", body);

  it(
    "attach of a missing image is NotFound",
    edge(async (dir) => {
      await rejectsWith(attach(path.join(dir, "missing.img")), "NotFound");
    }),
  );

  it(
    "detach of a device that is not attached is success",
    edge(async () => {
      const used = new Set((await list()).map((d) => d.device));
      let free = 200;
      while (used.has(`/dev/loop${free}`)) free++;
      await detach(`/dev/loop${free}`);
    }),
  );

  it(
    "detach with an expected backing file leaves a device that maps another file alone",
    edge(async (dir) => {
      const mine = path.join(dir, "mine.img");
      const other = path.join(dir, "other.img");
      await sparseFile(mine, 8 * MiB);
      await sparseFile(other, 8 * MiB);
      const device = await attach(other); // as if our device had been freed and reused for another volume
      try {
        await detach(device, { backingFile: mine });
        assert.equal(await findByBackingFile(other), device);
      } finally {
        await detach(device, { backingFile: other });
      }
      assert.equal(await findByBackingFile(other), undefined);
    }),
  );

  it(
    "a device whose backing file was deleted is not found by path, even when a new file takes the path",
    edge(async (dir) => {
      const image = path.join(dir, "deleted.img");
      await sparseFile(image, 8 * MiB);
      const device = await attach(image);
      try {
        await unlink(image);
        assert.equal(await findByBackingFile(image), undefined);
        assert.deepEqual(
          (await list()).filter((d) => d.device === device).map((d) => [d.backingFile, d.deleted]),
          [[image, true]],
        );
        await sparseFile(image, 8 * MiB);
        assert.equal(await findByBackingFile(image), undefined);
      } finally {
        await detach(device);
      }
      assert.equal(
        (await list()).find((d) => d.device === device && d.backingFile === image),
        undefined,
      );
    }),
  );

  it(
    "detach of a mounted device is FailedPrecondition; the kernel frees it after the unmount",
    edge(async (dir) => {
      const image = path.join(dir, "busy.img");
      const mnt = path.join(dir, "busy-mnt");
      await sparseFile(image, 32 * MiB);
      await mkdirs(mnt);
      const device = await attach(image);
      await makeFs(device, "ext4");
      await mount(device, mnt, { fsType: "ext4" });
      await rejectsWith(detach(device), "FailedPrecondition");
      assert.equal((await list()).find((d) => d.device === device)?.autoclear, true);
      await unmount(mnt);
      assert.equal(await findByBackingFile(image), undefined);
      await detach(device, { backingFile: image });
    }),
  );

  it(
    "a device with a partition table but no filesystem is not empty: makeFs refuses it",
    edge(async (dir) => {
      const image = path.join(dir, "partitioned.img");
      await sparseFile(image, 16 * MiB);
      const mbr = Buffer.alloc(512);
      mbr.writeUInt8(0x83, 446 + 4); // partition 1: type Linux
      mbr.writeUInt32LE(2048, 446 + 8); // first sector
      mbr.writeUInt32LE(16 * 2048 - 2048, 446 + 12); // sectors
      mbr.writeUInt16LE(0xaa55, 510);
      const fh = await open(image, "r+");
      await fh.write(mbr, 0, 512, 0);
      await fh.close();
      const device = await attach(image);
      try {
        assert.equal(await detectFs(device), "partition-table:dos");
        await rejectsWith(makeFs(device, "ext4"), "FailedPrecondition");
      } finally {
        await detach(device, { backingFile: image });
      }
    }),
  );

  it(
    "a block volume: bind-mount the device onto a file, stats it, refuses to remove it while mounted",
    edge(async (dir) => {
      const image = path.join(dir, "raw.img");
      const file = path.join(dir, "pods", "p3", "volumeDevices", "dev");
      await sparseFile(image, 16 * MiB);
      const device = await attach(image);
      await mkdirs(path.dirname(file));
      await writeFile(file, "", { flag: "a" });
      await bindMount(device, file);
      try {
        assert.ok((await stat(file)).isBlockDevice());
        assert.deepEqual(await stats(file), { kind: "block", bytes: { total: 16 * MiB } });
        await rejectsWith(removeFile(file), "FailedPrecondition");
      } finally {
        await unmount(file);
        await detach(device, { backingFile: image });
      }
      await removeFile(file);
      assert.equal(existsSync(file), false);
    }),
  );
});

describe("argument checks (no devices needed)", () => {
  for (const flag of ["a,b", "ro,remount", "-o", "--bind", "a b", "tab\there", "", "nul\0"]) {
    it(`rejects mount flag ${JSON.stringify(flag)}`, () => assert.throws(() => validateMountFlags([flag]), { name: "DriverError", code: "InvalidArgument" }));
  }
  it("accepts ordinary flags", () => validateMountFlags(["noatime", "discard", "errors=remount-ro", "context=system_u:object_r:x"]));

  it("mount refuses bad flags, relative paths and odd filesystem types before running anything", async () => {
    await rejectsWith(mount("/dev/loop0", "/mnt/x", { fsType: "ext4", flags: ["rw,suid"] }), "InvalidArgument");
    await rejectsWith(mount("-o", "/mnt/x", { fsType: "ext4" }), "InvalidArgument");
    await rejectsWith(mount("/dev/loop0", "mnt", { fsType: "ext4" }), "InvalidArgument");
    await rejectsWith(mount("/dev/loop0", "/mnt/x", { fsType: "ext4 -o" }), "InvalidArgument");
    await rejectsWith(bindMount("rel", "/mnt/x"), "InvalidArgument");
  });

  it("makeFs and growFs accept only ext4 and xfs", async () => {
    await rejectsWith(makeFs("/dev/loop0", "btrfs"), "InvalidArgument");
    await rejectsWith(makeFs("/dev/loop0", "ext4; rm -rf /"), "InvalidArgument");
    await rejectsWith(growFs("/dev/loop0", "/mnt/x", "ntfs"), "InvalidArgument");
  });

  it("detectFs of a missing device is NotFound", async () => {
    await rejectsWith(detectFs("/dev/does-not-exist"), "NotFound");
  });
});

describe("nothing left behind", { skip: skipAll }, () => {
  it("no loop device is backed by a file in the temp dir, nothing is mounted under it", async () => {
    assert.deepEqual(await loopsUnder(tmp), []);
    assert.deepEqual(
      mountsUnder(await readMounts(), tmp).map((m) => m.mountPoint),
      [],
    );
  });
});
