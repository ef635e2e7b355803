/**
 * The power-cut harness (tools/testkit/src/powercut.ts) catches what it should, under both rules:
 * data not fsynced is lost, fsynced data stays; a name is durable after the commit its rule asks for
 * (strict: fsync of its directory; ext4: any fsync commits every name, with the files' last fsynced
 * content); the atomic-write pattern (tmp, fsync, rename, fsync dir) survives and without the
 * directory fsync the old content stays; an unlink not committed comes back; sizes follow
 * truncate/extend as fsynced; a sparse 1 GiB file is copied by its data only; after the cut every
 * operation fails with EIO and nothing changes what is durable. Then a real nats-server with its
 * store on the mount: with `sync_interval: always` every acked message survives the cut, with the
 * default sync most are lost. Skipped, saying why, without root, FUSE or python3-pyfuse3.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  fsyncSync,
  ftruncateSync,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  renameSync,
  statSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import { type TestContext, test } from "node:test";
import {
  binaryEnv,
  cleanupUnder,
  ensurePowercut,
  type LocalServer,
  mountPowercut,
  type PowercutLosses,
  type PowercutMount,
  type PowercutRule,
  ROOT,
  startServer,
  tempDir,
} from "@csi/testkit";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

const skip = ensurePowercut();
const RULES: readonly PowercutRule[] = ["ext4", "strict"];
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/** Write `data` to a (new or existing, truncated) file; fsync it if asked. */
function put(file: string, data: string | Buffer, opts: { fsync?: boolean } = {}): void {
  const fd = openSync(file, "w");
  try {
    writeSync(fd, typeof data === "string" ? Buffer.from(data) : data);
    if (opts.fsync) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** fsync a file or a directory. */
function sync(p: string): void {
  const fd = openSync(p, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

const read = (file: string): string | undefined => (existsSync(file) ? readFileSync(file, "utf8") : undefined);

interface Cut {
  /** The reconstructed durable tree. */
  out: string;
  losses: PowercutLosses;
}

/**
 * A mount over a fresh backing directory (`prepare` fills it first: durable as it is), `run` on the
 * mount, the cut, the reconstruction into a directory of its own (removed when test `t` ends). The
 * mount and its directories are gone when it returns.
 */
async function scenario(
  t: TestContext,
  rule: PowercutRule,
  run: (mnt: string, m: PowercutMount) => void | Promise<void>,
  opts: { prepare?: (backing: string) => void } = {},
): Promise<Cut> {
  const dir = await tempDir("csi-powercut-");
  const backing = path.join(dir, "backing");
  const mnt = path.join(dir, "mnt");
  mkdirSync(backing);
  mkdirSync(mnt);
  opts.prepare?.(backing);
  const m = await mountPowercut({ backing, mountpoint: mnt, rule });
  try {
    await run(mnt, m);
    const losses = await m.cut();
    const out = path.join(path.dirname(dir), `${path.basename(dir)}-out`);
    t.after(() => cleanupUnder(out));
    await m.reconstruct(out);
    return { out, losses };
  } finally {
    await m.unmount();
    await cleanupUnder(dir);
  }
}

for (const rule of RULES) {
  test(`${rule}: a writer that does not fsync loses its data, one that fsyncs keeps it`, { skip }, async (t) => {
    const cut = await scenario(t, rule, (mnt) => {
      put(path.join(mnt, "lost"), "volatile");
      const fd = openSync(path.join(mnt, "kept"), "w");
      writeSync(fd, "durable");
      fsyncSync(fd);
      writeSync(fd, " and more"); // after the fsync: lost
      closeSync(fd);
      sync(mnt); // both names durable, in both rules
    });
    const { out } = cut;
    assert.equal(read(path.join(out, "kept")), "durable");
    assert.equal(read(path.join(out, "lost")), "", "its name is durable, its data never was");
    assert.equal(cut.losses.droppedBytes, "volatile".length + " and more".length);
  });

  test(`${rule}: a new file fsynced comes back if its directory's rule says so`, { skip }, async (t) => {
    const cut = await scenario(
      t,
      rule,
      (mnt) => {
        put(path.join(mnt, "d1", "a"), "A", { fsync: true }); // its directory not fsynced
        put(path.join(mnt, "d2", "b"), "B", { fsync: true });
        sync(path.join(mnt, "d2"));
      },
      {
        prepare: (b) => {
          for (const d of ["d1", "d2"]) mkdirSync(path.join(b, d));
        },
      },
    );
    const { out } = cut;
    assert.equal(read(path.join(out, "d1", "a")), rule === "ext4" ? "A" : undefined, "fsync of the file commits its name on ext4 only");
    assert.equal(read(path.join(out, "d2", "b")), "B");
  });

  test(`${rule}: one file's fsync commits every other name on ext4 (with their last fsynced content), none on strict`, { skip }, async (t) => {
    const cut = await scenario(t, rule, (mnt) => {
      const fd = openSync(path.join(mnt, "b"), "w");
      writeSync(fd, "B1");
      fsyncSync(fd);
      writeSync(fd, "B2");
      closeSync(fd);
      put(path.join(mnt, "c"), "C");
      mkdirSync(path.join(mnt, "e"));
      put(path.join(mnt, "e", "f"), "F");
      put(path.join(mnt, "a"), "A", { fsync: true });
    });
    const { out } = cut;
    const expected = rule === "ext4" ? { a: "A", b: "B1", c: "", "e/f": "" } : { a: undefined, b: undefined, c: undefined, "e/f": undefined };
    assert.deepEqual(Object.fromEntries(Object.keys(expected).map((f) => [f, read(path.join(out, f))])), expected);
    if (rule === "strict") assert.deepEqual(readdirSync(out), []);
  });

  test(`${rule}: the atomic write (tmp, fsync, rename over, fsync dir) survives; without the dir fsync the old content stays`, { skip }, async (t) => {
    // "cfg" was there at mount time, "made" is written through the mount first. Both tmp files are
    // fsynced before either rename: on ext4 a later fsync would commit an earlier rename.
    const atomicWrites = (mnt: string, files: string[], syncDir: boolean) => {
      for (const f of files) put(path.join(mnt, `${f}.tmp`), `new ${f}`, { fsync: true });
      for (const f of files) renameSync(path.join(mnt, `${f}.tmp`), path.join(mnt, f));
      if (syncDir) sync(mnt);
    };
    for (const syncDir of [true, false]) {
      const cut = await scenario(
        t,
        rule,
        (mnt) => {
          put(path.join(mnt, "made"), "old made", { fsync: true });
          sync(mnt);
          atomicWrites(mnt, ["cfg", "made"], syncDir);
        },
        { prepare: (b) => writeFileSync(path.join(b, "cfg"), "old cfg") },
      );
      const { out } = cut;
      for (const f of ["cfg", "made"]) {
        assert.equal(read(path.join(out, f)), syncDir ? `new ${f}` : `old ${f}`, `${f}, dir fsync: ${syncDir}`);
        // On ext4 the tmp file's fsync committed its name (before the rename): it stays, fsynced.
        const tmp = !syncDir && rule === "ext4" ? `new ${f}` : undefined;
        assert.equal(read(path.join(out, `${f}.tmp`)), tmp, `${f}.tmp, dir fsync: ${syncDir}`);
      }
    }
  });

  test(`${rule}: an unlink not committed comes back; committed, it is gone`, { skip }, async (t) => {
    for (const commit of [false, true]) {
      const cut = await scenario(
        t,
        rule,
        (mnt) => {
          put(path.join(mnt, "made"), "M", { fsync: true });
          sync(mnt);
          unlinkSync(path.join(mnt, "made"));
          unlinkSync(path.join(mnt, "pre"));
          if (commit) sync(mnt);
        },
        { prepare: (b) => writeFileSync(path.join(b, "pre"), "P") },
      );
      const { out } = cut;
      assert.deepEqual(readdirSync(out).sort(), commit ? [] : ["made", "pre"]);
      if (!commit) assert.deepEqual([read(path.join(out, "made")), read(path.join(out, "pre"))], ["M", "P"]);
    }
  });

  test(`${rule}: sizes follow truncate and extend as fsynced`, { skip }, async (t) => {
    const pattern = Buffer.alloc(10_000, "0123456789");
    const cut = await scenario(
      t,
      rule,
      (mnt) => {
        const t1 = openSync(path.join(mnt, "shrunk"), "w");
        writeSync(t1, pattern);
        fsyncSync(t1);
        ftruncateSync(t1, 100);
        fsyncSync(t1);
        ftruncateSync(t1, 5000); // not fsynced
        closeSync(t1);
        const t2 = openSync(path.join(mnt, "holed"), "w");
        writeSync(t2, pattern.subarray(0, 1000));
        fsyncSync(t2);
        ftruncateSync(t2, 10);
        writeSync(t2, "XY", 50);
        fsyncSync(t2);
        closeSync(t2);
        const t3 = openSync(path.join(mnt, "grown"), "w");
        ftruncateSync(t3, MiB);
        fsyncSync(t3);
        closeSync(t3);
        truncateSync(path.join(mnt, "pre"), 10); // not fsynced: the mount-time content stays
        sync(mnt);
      },
      { prepare: (b) => writeFileSync(path.join(b, "pre"), pattern.subarray(0, 4096)) },
    );
    const { out } = cut;
    assert.deepEqual(readFileSync(path.join(out, "shrunk")), pattern.subarray(0, 100));
    assert.deepEqual(readFileSync(path.join(out, "holed")), Buffer.concat([pattern.subarray(0, 10), Buffer.alloc(40), Buffer.from("XY")]));
    assert.deepEqual(readFileSync(path.join(out, "grown")), Buffer.alloc(MiB));
    assert.deepEqual(readFileSync(path.join(out, "pre")), pattern.subarray(0, 4096));
  });

  test(`${rule}: hard links, symlinks and modes come back as committed`, { skip }, async (t) => {
    const cut = await scenario(t, rule, (mnt) => {
      put(path.join(mnt, "one"), "shared", { fsync: true });
      linkSync(path.join(mnt, "one"), path.join(mnt, "two"));
      symlinkSync("one", path.join(mnt, "ln"));
      mkdirSync(path.join(mnt, "private"), 0o700);
      sync(mnt);
    });
    const { out } = cut;
    assert.equal(statSync(path.join(out, "one")).ino, statSync(path.join(out, "two")).ino);
    assert.equal(read(path.join(out, "two")), "shared");
    assert.equal(readlinkSync(path.join(out, "ln")), "one");
    assert.equal(statSync(path.join(out, "private")).mode & 0o777, 0o700);
  });

  test(`${rule}: after the cut every operation fails with EIO and an fsync changes nothing durable`, { skip }, async (t) => {
    let fd = -1;
    const cut = await scenario(t, rule, async (mnt, m) => {
      fd = openSync(path.join(mnt, "f"), "w");
      writeSync(fd, "before");
      fsyncSync(fd);
      sync(mnt);
      await m.cut();
      const eio = { code: "EIO" };
      assert.throws(() => writeSync(fd, "after"), eio);
      assert.throws(() => fsyncSync(fd), eio);
      assert.throws(() => sync(mnt), eio);
      assert.throws(() => openSync(path.join(mnt, "g"), "w"), eio);
      assert.throws(() => readdirSync(mnt), eio);
      assert.throws(() => statSync(path.join(mnt, "f")), eio);
      assert.throws(() => readSync(openSync(path.join(mnt, "f"), "r"), Buffer.alloc(6)), eio);
      assert.throws(() => closeSync(fd), eio); // its flush fails too; the descriptor is gone all the same
    });
    const { out } = cut;
    assert.equal(read(path.join(out, "f")), "before");
  });
}

test("unmount works while a process holds a file on the mount, and after the daemon was killed", { skip }, async (t) => {
  const dir = await tempDir("csi-powercut-");
  t.after(() => cleanupUnder(dir));
  const mounted = (p: string) =>
    readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .some((l) => l.split(" ")[4] === p);
  for (const kill of [false, true]) {
    const [backing, mnt] = [path.join(dir, `backing-${kill}`), path.join(dir, `mnt-${kill}`)];
    for (const d of [backing, mnt]) mkdirSync(d);
    const m = await mountPowercut({ backing, mountpoint: mnt, rule: "ext4" });
    assert.ok(mounted(m.mountpoint));
    const fd = openSync(path.join(mnt, "held"), "w"); // this process holds it across the unmount
    await m.cut();
    if (kill) process.kill(m.pid!, "SIGKILL");
    await m.unmount();
    assert.equal(mounted(m.mountpoint), false, `still mounted (daemon killed: ${kill})`);
    assert.equal(existsSync(`${m.backing}.powercut-store`), false, "the durable store is removed");
    try {
      closeSync(fd); // the mount is gone: its flush fails, the descriptor goes all the same
    } catch {}
  }
});

test("ext4: a sparse 1 GiB file is copied by its data only, fast", { skip }, async (t) => {
  const started = Date.now();
  const cut = await scenario(
    t,
    "ext4",
    (mnt) => {
      const pre = openSync(path.join(mnt, "pre.img"), "r+");
      writeSync(pre, Buffer.alloc(4096, 2), 0, 4096, 300 * MiB); // the first change: the mount-time content is copied first
      fsyncSync(pre);
      closeSync(pre);
      const made = openSync(path.join(mnt, "made.img"), "w");
      ftruncateSync(made, GiB);
      writeSync(made, Buffer.alloc(4096, 3), 0, 4096, 512 * MiB);
      fsyncSync(made);
      closeSync(made);
    },
    {
      prepare: (b) => {
        const fd = openSync(path.join(b, "pre.img"), "w");
        ftruncateSync(fd, GiB);
        writeSync(fd, Buffer.alloc(4096, 1), 0, 4096, 700 * MiB);
        closeSync(fd);
      },
    },
  );
  const { out } = cut;
  const elapsed = Date.now() - started;
  const at = (file: string, offset: number) => {
    const fd = openSync(path.join(out, file), "r");
    const b = Buffer.alloc(4096);
    readSync(fd, b, 0, 4096, offset);
    closeSync(fd);
    return b[0];
  };
  for (const f of ["pre.img", "made.img"]) {
    const st = statSync(path.join(out, f));
    assert.equal(st.size, GiB, f);
    assert.ok(st.blocks * 512 < MiB, `${f}: ${st.blocks * 512} bytes allocated: holes were copied`);
  }
  assert.deepEqual([at("pre.img", 700 * MiB), at("pre.img", 300 * MiB), at("pre.img", 0)], [1, 2, 0]);
  assert.deepEqual([at("made.img", 512 * MiB), at("made.img", 0)], [3, 0]);
  assert.ok(elapsed < 10_000, `mount, copy, fsync, reconstruct of two sparse 1 GiB files took ${elapsed} ms`);
});

/** nats-server 2.10 (sync_interval needs it): scripts/install-nats-server.sh's binary. */
const nats210 = (): string => execFileSync("bash", [path.join(ROOT, "scripts/install-nats-server.sh")], { encoding: "utf8" }).trim();

/**
 * A nats-server of the binary `bin` on `store` (its JetStream store, given as -sd) with `jetstream`
 * as its jetstream block's settings, and only those: CSI_UNSAFE_NO_FSYNC=1 keeps the launcher from
 * adding its own sync setting (it would make every server fsync). Both variables restored at once.
 */
async function natsOn(bin: string, dir: string, store: string, jetstream: string): Promise<LocalServer> {
  const conf = path.join(dir, `nats-${path.basename(path.dirname(store))}.conf`);
  writeFileSync(conf, `jetstream { ${jetstream} }\n`);
  const vars = { [binaryEnv("nats-server")]: bin, CSI_UNSAFE_NO_FSYNC: "1" };
  const before = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await startServer("nats", store, undefined, ["-c", conf]);
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

/** Messages in stream PC on a server, undefined if the stream is not there. */
async function messagesIn(server: LocalServer): Promise<number | undefined> {
  const nc = await connect({ servers: server.url });
  try {
    const jsm = await jetstreamManager(nc);
    return await jsm.streams.info("PC").then(
      (i) => i.state.messages,
      () => undefined,
    );
  } finally {
    await nc.close();
  }
}

/** fsync every file and directory under `dir` (the directories last, deepest first). */
function syncTree(dir: string): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) syncTree(p);
    else if (e.isFile()) sync(p);
  }
  sync(dir);
}

/**
 * A file stream created and made durable (every file and directory of the store fsynced),
 * `n` messages published and acked, the cut; then a nats-server on the reconstructed store: how many
 * messages it has.
 */
async function natsAcrossCut(syncConfig: string, n: number): Promise<{ acked: number; survived: number | undefined }> {
  const bin = nats210();
  const dir = await tempDir("csi-powercut-nats-");
  const [backing, mnt, out] = ["backing", "mnt", "out"].map((d) => path.join(dir, d)) as [string, string, string];
  for (const d of [backing, mnt]) mkdirSync(d);
  const m = await mountPowercut({ backing, mountpoint: mnt, rule: "ext4" });
  let live: LocalServer | undefined;
  let after: LocalServer | undefined;
  try {
    live = await natsOn(bin, dir, path.join(mnt, "js"), syncConfig);
    const nc = await connect({ servers: live.url });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "PC", subjects: ["pc.>"], storage: StorageType.File });
    syncTree(mnt); // the stream's files and names on disk before the first message
    const js = jetstream(nc);
    const acks = await Promise.all(Array.from({ length: n }, (_, i) => js.publish(`pc.${i % 10}`, `message ${i}`)));
    await m.cut();
    await live.kill();
    await nc.close();
    await m.reconstruct(out);
    after = await natsOn(bin, dir, path.join(out, "js"), "");
    return { acked: acks.length, survived: await messagesIn(after) };
  } finally {
    await after?.stop();
    await live?.kill();
    await m.unmount();
    await cleanupUnder(dir);
  }
}

test("nats-server with sync_interval: always keeps every acked message across the cut", { skip }, async (t) => {
  const { acked, survived } = await natsAcrossCut("sync_interval: always", 500);
  t.diagnostic(`${survived} of ${acked} acked messages survived`);
  assert.equal(acked, 500);
  assert.equal(survived, acked);
});

test("nats-server with the default sync loses most acked messages in the cut", { skip }, async (t) => {
  const { acked, survived } = await natsAcrossCut("", 500);
  t.diagnostic(`${survived} of ${acked} acked messages survived`);
  assert.equal(acked, 500);
  assert.notEqual(survived, undefined, "the stream was durable before the messages");
  assert.ok((survived ?? 0) < acked / 2, `${survived} of ${acked} survived`);
});
