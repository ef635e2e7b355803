/**
 * The journal's Redis user runs code only through the journal's function library (docs/security.md,
 * "Redis ACL of the journal"), on a real redis-server with the ACL file `csictl auth init` writes:
 *
 *  - before an admin loads the library, the journal's user can neither use it nor load it (a clear
 *    error naming `csictl redis load-functions`); the admin loads it with csictl, idempotently,
 *    keeping other versions' libraries unless --prune;
 *  - the journal's user is refused EVAL, EVALSHA, SCRIPT, FUNCTION LOAD/DELETE/FLUSH/…, DEBUG (the
 *    server allows DEBUG here, so the ACL is what refuses it), KEYS, SCAN, FLUSHALL, CONFIG, …;
 *  - it may FCALL the library on its cluster's keys and not on another cluster's (refused before
 *    anything is written), and a function refuses a write command outside the planner's and a
 *    record prefix outside the call's hash tag;
 *  - the key index lists and wipes the projection without SCAN;
 *  - a runaway script or function blocks Redis only until the admin kills it (busy-reply-threshold,
 *    SCRIPT KILL / FUNCTION KILL), which the journal's user may not do;
 *  - a journal process with only this ACL starts, creates and deletes a volume, rebuilds after a
 *    FLUSHALL, and says what to do when the library is gone.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { realpath, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { writeAuthDir } from "@csi/cli/auth";
import { accessEnv, REDIS_ADMIN_USER, redisAccessFrom } from "@csi/cli/auth-files";
import { DriverError } from "@csi/contracts";
import { JOURNAL_FUNCTIONS, JOURNAL_LIBRARY, journalFunctionsLoaded, keysFor, RedisStore } from "@csi/journal/redis";
import { JournalClient, redisConnectOptions } from "@csi/runtime";
import {
  CSICTL_BIN,
  type LocalServer,
  REDIS_BUSY_REPLY_MS,
  type ServiceProcess,
  spawnService,
  startServer,
  tempDir,
  withoutServerEnv,
  writeClustersFile,
} from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";

const CLUSTER = "c1";
const OTHER = "c2";
const MiB = 1024 * 1024;
const k1 = keysFor(CLUSTER, "default");
const k2 = keysFor(OTHER, "default");
const CSICTL = CSICTL_BIN;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir: string;
let authDir: string;
let redis: LocalServer;
let admin: Redis;
let journal: Redis;

const connectAs = (user: string) => {
  const r = new Redis(redis.url, { ...redisConnectOptions({ redisUrl: redis.url, ...redisAccessFrom(authDir, user) }), maxRetriesPerRequest: 0 });
  r.on("error", () => {});
  return r;
};

/** `csictl redis load-functions` with the given Redis user's credentials in the environment. */
function csictlLoad(user: string, ...more: string[]) {
  const access = redisAccessFrom(authDir, user);
  return spawnSync(process.execPath, [CSICTL, "--json", "redis", "load-functions", ...more], {
    encoding: "utf8",
    env: { ...withoutServerEnv(process.env), REDIS_URL: redis.url, REDIS_USERNAME: access.redisUsername, REDIS_PASSWORD: access.redisPassword },
  });
}

/** A Redis error reply matching `re`. */
const refused = (re: RegExp) => (err: unknown) => {
  assert.match(String((err as Error)?.message ?? err), re);
  return true;
};
const NOPERM = refused(/NOPERM/);

before(async () => {
  dir = await realpath(await tempDir("csi-redis-fn-"));
  const auth = await writeAuthDir(path.join(dir, "auth"), { clusters: [CLUSTER], nodes: ["n1"] });
  authDir = auth.dir;
  // DEBUG allowed by the server (Redis 7 refuses it to every client by default): the ACL must refuse it itself.
  redis = await startServer("redis", path.join(dir, "redis"), undefined, ["--aclfile", auth.redisAcl, "--enable-debug-command", "yes"]);
  admin = connectAs(REDIS_ADMIN_USER);
  journal = connectAs("journal");
  // What another deployment sharing this Redis keeps there, and a key of nobody's.
  await admin.hset(k2.projection, "complete", "1", "applied", "7");
  await admin.set("plain", "x");
});

after(async () => {
  admin?.disconnect();
  journal?.disconnect();
  await redis?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("loading the library", () => {
  test("before an admin loads it, the journal's user can neither use nor load it, and is told what to do", async () => {
    assert.equal(await journalFunctionsLoaded(journal), false);
    const store = new RedisStore(journal, k1);
    await assert.rejects(store.beginRebuild("e0", "log", undefined), (err: unknown) => {
      assert.ok(err instanceof DriverError && err.code === "Unavailable", String(err));
      assert.match(err.message, new RegExp(`${JOURNAL_LIBRARY}.*csictl redis load-functions`));
      return true;
    });
    await assert.rejects(journal.call("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)"), NOPERM);
    const asJournal = csictlLoad("journal");
    assert.equal(asJournal.status, 1, asJournal.stderr);
    assert.match(asJournal.stderr, /may not load functions.*REDIS_USERNAME=admin/);
    assert.equal(await admin.exists(k1.projection), 0, "nothing was written");
  });

  test("the admin loads it with csictl; again is the same; another version's library is kept unless --prune", async () => {
    const first = csictlLoad(REDIS_ADMIN_USER);
    assert.equal(first.status, 0, first.stderr);
    assert.equal(JSON.parse(first.stdout).library, JOURNAL_LIBRARY);
    assert.equal(await journalFunctionsLoaded(journal), true);
    await admin.call("FUNCTION", "LOAD", "#!lua name=csi_journal_v0\nredis.register_function('csi_journal_v0_version', function() return 0 end)");
    const again = csictlLoad(REDIS_ADMIN_USER);
    assert.equal(again.status, 0, again.stderr);
    assert.deepEqual(JSON.parse(again.stdout).kept, ["csi_journal_v0"], "an older journal may still call it");
    const pruned = csictlLoad(REDIS_ADMIN_USER, "--prune");
    assert.equal(pruned.status, 0, pruned.stderr);
    assert.deepEqual(JSON.parse(pruned.stdout).pruned, ["csi_journal_v0"]);
    assert.equal(await journalFunctionsLoaded(journal), true, "this version's library stays");
  });
});

describe("what the journal's user may not run", () => {
  const cases: [string, () => Promise<unknown>][] = [
    ["EVAL", () => journal.eval("while true do end", 0)],
    ["EVAL of a read", () => journal.eval("return redis.call('GET', KEYS[1])", 1, k1.projection)],
    ["EVALSHA", () => journal.evalsha("e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)],
    ["EVAL_RO", () => journal.call("EVAL_RO", "return 1", 0)],
    ["SCRIPT LOAD", () => journal.script("LOAD", "return 1")],
    ["SCRIPT KILL", () => journal.script("KILL")],
    ["SCRIPT FLUSH", () => journal.script("FLUSH")],
    ["FUNCTION LOAD", () => journal.call("FUNCTION", "LOAD", "REPLACE", "#!lua name=evil\nredis.register_function('evil', function() while true do end end)")],
    ["FUNCTION DELETE", () => journal.call("FUNCTION", "DELETE", JOURNAL_LIBRARY)],
    ["FUNCTION FLUSH", () => journal.call("FUNCTION", "FLUSH")],
    ["FUNCTION KILL", () => journal.call("FUNCTION", "KILL")],
    ["FUNCTION LIST", () => journal.call("FUNCTION", "LIST")],
    ["FUNCTION DUMP", () => journal.call("FUNCTION", "DUMP")],
    ["FUNCTION RESTORE", () => journal.call("FUNCTION", "RESTORE", "x")],
    ["DEBUG SLEEP", () => journal.call("DEBUG", "SLEEP", "0")],
    ["KEYS", () => journal.keys("*")],
    ["SCAN", () => journal.scan("0")],
    ["FLUSHALL", () => journal.flushall()],
    ["FLUSHDB", () => journal.flushdb()],
    ["CONFIG GET", () => journal.config("GET", "dir")],
    ["CONFIG SET", () => journal.config("SET", "busy-reply-threshold", "0")],
    ["ACL LIST", () => journal.call("ACL", "LIST")],
    ["MODULE LIST", () => journal.call("MODULE", "LIST")],
    ["CLIENT LIST", () => journal.call("CLIENT", "LIST")],
    ["SHUTDOWN", () => journal.call("SHUTDOWN", "NOSAVE")],
    ["PUBLISH", () => journal.publish("x", "y")],
  ];
  for (const [name, run] of cases) test(`${name} is refused (NOPERM)`, () => assert.rejects(run(), NOPERM));

  test("the server still runs, the library and every key are as they were; the admin may run DEBUG here", async () => {
    assert.equal(await admin.call("DEBUG", "SLEEP", "0"), "OK", "the server allows DEBUG: it was the ACL that refused it");
    assert.equal(await journalFunctionsLoaded(journal), true);
    assert.equal(await admin.get("plain"), "x");
    assert.equal(await admin.hget(k2.projection, "applied"), "7");
  });
});

describe("FCALL of the library: its cluster's keys, nobody else's", () => {
  const EPOCH = "0123456789abcdef0123456789abcdef";
  const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;

  test("a rebuild, an operation's locks and writes, a renewal: all on c1's keys", async () => {
    const store = new RedisStore(journal, k1);
    assert.equal(await store.beginRebuild(EPOCH, "log", "force"), true);
    const ops: [string, ...(string | number)[]][] = [
      ["HSET", k1.record("volume", uuid(1)), "csi.volname", "pvc-1", "_seq", 1],
      ["ZADD", k1.index("volume"), 0, uuid(1)],
    ];
    assert.equal(await store.writeFreshOps(EPOCH, 0, ops, 1), true);
    assert.equal(await store.markComplete(EPOCH, 1), true);
    const token = RedisStore.newToken();
    const lock = k1.uuidLock("volume", uuid(2));
    const got = await store.lockAndReadKeys(token, 5000, { locks: [lock], hashes: [k1.record("volume", uuid(1))], fields: [], counts: [k1.nodeClaims("n1")] });
    assert.ok(got.ok && got.read.projectionComplete && got.read.hashes[0]?.["csi.volname"] === "pvc-1" && got.read.counts[0] === 0);
    assert.equal(await store.renew({ kind: "volume", uuid: uuid(2) }, token, 5000), true);
    const n = await store.applyMutations(
      [{ guard: [k1.record("volume", uuid(2)), "_seq"], seq: 2, ops: [["HSET", k1.record("volume", uuid(2)), "csi.volname", "pvc-2"]] }],
      [[lock, token]],
    );
    assert.equal(n, 1);
    assert.equal(await admin.exists(lock), 0, "the lock was released");
    assert.equal(await admin.hget(k1.record("volume", uuid(2)), "csi.volname"), "pvc-2");
  });

  test("another cluster's keys are refused before anything is written", async () => {
    const other = new RedisStore(journal, k2);
    await assert.rejects(other.beginRebuild(EPOCH, "log", "force"), (err: unknown) => NOPERM((err as Error).cause));
    await assert.rejects(other.lockAndReadKeys("t", 5000, { locks: [k2.uuidLock("volume", uuid(9))], hashes: [], fields: [] }), (err: unknown) =>
      NOPERM((err as Error).cause),
    );
    // One call naming a c1 lock and a c2 key: the whole call is refused, the c1 lock is not taken.
    const c1Lock = k1.uuidLock("volume", uuid(8));
    await assert.rejects(journal.fcall(JOURNAL_FUNCTIONS.lockAndRead, 3, k1.projection, c1Lock, k2.projection, "t", 5000, 1, 1, 0, 0, ""), NOPERM);
    assert.equal(await admin.exists(c1Lock), 0);
    assert.equal(await admin.hget(k2.projection, "applied"), "7", "c2's projection untouched");
    assert.deepEqual(await admin.keys(`${k2.prefix}lock.*`), []);
  });

  test("a function refuses a write outside the planner's, and a record read outside the call's hash tag", async () => {
    const store = new RedisStore(journal, k1);
    const rec = k1.record("volume", uuid(3));
    // SET is granted to the user (the locks), but not a write the applier takes.
    await assert.rejects(store.applyMutations([{ guard: [rec, "_seq"], seq: 3, ops: [["SET", rec, "x"]] }], []), (err: unknown) =>
      refused(/not a projection write/)((err as Error).cause),
    );
    assert.equal(await admin.exists(rec), 0, "nothing written");
    const lock = k1.uuidLock("volume", uuid(3));
    await assert.rejects(
      journal.fcall(JOURNAL_FUNCTIONS.lockAndRead, 2, k1.projection, lock, "t", 5000, 1, 0, 0, 0, `${k2.prefix}csi.volume.`, "", ""),
      refused(/record prefix is not in the projection key's hash tag/),
    );
    // A record's own name, locked through a prefix outside the hash tag: refused the same way.
    const rec1 = k1.record("volume", uuid(3));
    await assert.rejects(
      journal.fcall(
        JOURNAL_FUNCTIONS.lockAndRead,
        5,
        k1.projection,
        lock,
        rec1,
        k1.dir("volume"),
        k1.dirSeq("volume"),
        "t",
        5000,
        1,
        1,
        0,
        0,
        "",
        k2.nameLock("volume", ""),
        "csi.volume.",
      ),
      refused(/name lock prefix is not in the projection key's hash tag/),
    );
    assert.equal(await admin.exists(lock), 0, "no lock taken");
  });
});

describe("the key index instead of SCAN", () => {
  const uuid = (i: number) => `00000000-0000-4000-9000-${String(i).padStart(12, "0")}`;

  test("lists the projection's keys (live and tombstones), drops emptied keys and expired tombstones", async () => {
    const store = new RedisStore(journal, k1);
    const scanned = async () => (await admin.keys(`${k1.prefix}csi.*`)).sort();
    assert.deepEqual((await store.projectionKeys()).sort(), await scanned(), "the index holds what SCAN would find");
    const src = k1.snapsOf(uuid(1));
    const gone = k1.record("volume", uuid(2));
    await store.applyMutations([{ guard: [k1.record("snapshot", uuid(3)), "_seq"], seq: 10, ops: [["SADD", src, uuid(3)]] }], []);
    await store.applyMutations(
      [
        { guard: [k1.record("snapshot", uuid(3)), "_seq"], seq: 11, ops: [["SREM", src, uuid(3)]] },
        {
          guard: [gone, "_seq"],
          seq: 12,
          ops: [
            ["DEL", gone],
            ["HSET", gone, "_gone", "1"],
            ["PEXPIRE", gone, 200],
          ],
        },
      ],
      [],
    );
    const keys = await store.projectionKeys();
    assert.ok(!keys.includes(src), "a set emptied by its last SREM is no longer listed");
    assert.ok(keys.includes(gone), "a tombstone is listed while it lives");
    const expiry = Number(await admin.zscore(k1.keyIndex, gone));
    assert.ok(expiry > Date.now() - 5000 && expiry < Date.now() + 5000, `its score is its expiry (${expiry})`);
    await sleep(300);
    // The next tombstone written prunes the expired ones from the index.
    const next = k1.record("volume", uuid(4));
    await store.applyMutations(
      [
        {
          guard: [next, "_seq"],
          seq: 13,
          ops: [
            ["HSET", next, "_gone", "1"],
            ["PEXPIRE", next, 60_000],
          ],
        },
      ],
      [],
    );
    assert.equal(await admin.zscore(k1.keyIndex, gone), null, "an expired tombstone left the index");
    assert.deepEqual((await store.projectionKeys()).sort(), await scanned());
  });

  test("a wipe removes exactly the indexed keys; a rebuild's first write empties a key the index missed", async () => {
    const store = new RedisStore(journal, k1);
    const stale = k1.record("volume", uuid(5));
    await admin.hset(stale, "csi.volname", "old", "csi.mutable", "{}"); // made before the key index: not listed
    await admin.set(k1.uuidLock("volume", uuid(6)), "held");
    const listed = (await store.projectionKeys()).length;
    assert.ok(listed > 0);
    assert.equal(await store.beginRebuild("e2", "log", "force"), true);
    await store.wipeProjection();
    assert.equal(await admin.exists(k1.keyIndex), 0, "the index is gone with its keys");
    assert.deepEqual(await admin.keys(`${k1.prefix}csi.*`), [stale], "only the unindexed key is left");
    assert.equal(await admin.exists(k1.uuidLock("volume", uuid(6))), 1, "locks stay");
    assert.equal(await admin.hget(k2.projection, "applied"), "7", "another cluster's keys stay");
    assert.equal(await store.writeFreshOps("e2", 0, [["HSET", stale, "csi.volname", "new", "_seq", 5]], 5), true);
    assert.deepEqual(await admin.hgetall(stale), { "csi.volname": "new", _seq: "5" }, "the stale field went with the first write");
    assert.deepEqual(await store.projectionKeys(), [stale]);
  });
});

describe("a runaway script or function: BUSY for everyone until the admin kills it", () => {
  const runaway = async (start: (r: Redis) => Promise<unknown>, kill: string[]) => {
    const runner = connectAs(REDIS_ADMIN_USER);
    const killer = connectAs(REDIS_ADMIN_USER);
    let running: Promise<string> | undefined;
    try {
      // Both connections ready (AUTH and ioredis' ready check done) before the script runs: a
      // handshake that meets the busy server never completes, and a kill queued behind it is never
      // sent (a busy run hung so, the script spinning for ever).
      await Promise.all([runner.ping(), killer.ping()]);
      running = start(runner).then(
        () => "finished",
        (err: Error) => err.message,
      );
      // Until the script runs: a PONG says it has not started yet (on a busy machine its call can
      // come late); a ping sent while it runs waits for busy-reply-threshold, then is answered BUSY.
      for (const end = Date.now() + 60_000; ; await sleep(100)) {
        const reply = await journal.ping().catch((err: Error) => err.message);
        if (reply !== "PONG") break;
        assert.ok(Date.now() < end, "the runaway script did not start within 60 s");
      }
      await assert.rejects(journal.ping(), refused(/BUSY/), "past busy-reply-threshold, other clients are answered BUSY");
      await assert.rejects(journal.call(...(kill as [string, ...string[]])), refused(/NOPERM|BUSY/), "the journal's user may not kill it");
      assert.equal(await killer.call(...(kill as [string, ...string[]])), "OK");
      assert.match(await running, /killed/i);
      assert.equal(await journal.ping(), "PONG");
    } finally {
      // Whatever failed, the runaway does not outlive the test: every later one would get BUSY.
      if (running) await killer.call(...(kill as [string, ...string[]])).catch(() => {});
      runner.disconnect();
      killer.disconnect();
    }
  };

  test(`busy-reply-threshold is ${REDIS_BUSY_REPLY_MS} ms on the servers we start`, async () => {
    assert.deepEqual(await admin.config("GET", "busy-reply-threshold"), ["busy-reply-threshold", String(REDIS_BUSY_REPLY_MS)]);
  });

  test("an admin's EVAL that never ends: SCRIPT KILL", () => runaway((r) => r.eval("while true do end", 0), ["SCRIPT", "KILL"]));

  test("a function that never ends (and writes nothing): FUNCTION KILL", async () => {
    await admin.call(
      "FUNCTION",
      "LOAD",
      "REPLACE",
      "#!lua name=csi_test_spin\nredis.register_function{function_name='csi_test_spin', callback=function() while true do end end, flags={'no-writes'}}",
    );
    try {
      await runaway((r) => r.fcall_ro("csi_test_spin", 0), ["FUNCTION", "KILL"]);
    } finally {
      await admin.call("FUNCTION", "DELETE", "csi_test_spin");
    }
  });
});

describe("a journal with only this ACL", () => {
  let nats: LocalServer;
  let nc: NatsConnection;
  let client: JournalClient;
  let proc: ServiceProcess | undefined;
  let env: Record<string, string>;
  const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
  const create = (name: string) => client.call(CLUSTER, "volume.create", { requestId: randomUUID(), name, sizeBytes: MiB, capabilities: cap });

  before(async () => {
    nats = await startServer("nats", path.join(dir, "nats"));
    nc = await connect({ servers: nats.url });
    client = new JournalClient(nc, 20_000);
    const clustersFile = await writeClustersFile(dir, [{ clusterID: CLUSTER, pools: ["default"] }]);
    const redisEnv = Object.fromEntries(Object.entries(accessEnv(authDir, { kind: "journal", cluster: CLUSTER })).filter(([k]) => k.startsWith("REDIS_")));
    env = { NATS_URL: nats.url, REDIS_URL: redis.url, CLUSTERS_FILE: clustersFile, CLUSTER_ID: CLUSTER, DATA_DIR: dir, CATCHUP_EVERY_MS: "0", ...redisEnv };
    assert.equal(env.REDIS_USERNAME, "journal");
  });

  after(async () => {
    await proc?.stop();
    await nc?.close();
    await nats?.stop();
  });

  test("starts, creates and deletes a volume, rebuilds its projection (wiping only its own keys)", async () => {
    await admin.flushall(); // what the tests above left; the functions survive a FLUSHALL
    await admin.hset(k2.projection, "complete", "1", "applied", "7");
    await admin.hset(`${k2.prefix}csi.volume.x`, "csi.volname", "theirs");
    proc = await spawnService("journal", env);
    const v = await create("pvc-acl");
    assert.equal((await create("pvc-acl")).uuid, v.uuid, "idempotent by name");
    assert.deepEqual(await client.call(CLUSTER, "volume.delete", { requestId: "d1", uuid: v.uuid }), { deleted: true });
    const w = await create("pvc-acl-2");
    await admin.del(k1.projection); // the projection's meta gone: the next command rebuilds it (a wipe, then the log)
    const again = await (async () => {
      for (let i = 0; ; i++) {
        try {
          return await create("pvc-acl-2");
        } catch (err) {
          if (i > 50 || !(err instanceof DriverError) || err.code !== "Unavailable") throw err;
          await sleep(200);
        }
      }
    })();
    assert.equal(again.uuid, w.uuid, "rebuilt from the log with the journal's user: the name still answers its volume");
    assert.equal(await admin.hget(k1.projection, "complete"), "1");
    await proc.untilLog((l) => /projection rebuilt/.test(l), "that it rebuilt");
    assert.equal(await admin.exists(k2.projection), 1, "another cluster's projection: the journal never wiped it");
    assert.equal(await admin.hget(`${k2.prefix}csi.volume.x`, "csi.volname"), "theirs");
    assert.ok(!proc.logs.some((l) => /NOPERM/.test(l)), "no command of the journal was refused");
  });

  test("the library flushed by an admin: commands fail naming the admin's step; once loaded again, they work", async () => {
    await admin.call("FUNCTION", "FLUSH");
    await assert.rejects(create("pvc-acl-3"), (err: unknown) => {
      assert.ok(err instanceof DriverError && err.code === "Unavailable", String(err));
      return true;
    });
    assert.ok(proc, "the journal of the test above");
    await proc.untilLog((l) => l.includes("csictl redis load-functions"), "what to do (the journal's log says the admin's step)");
    assert.equal(csictlLoad(REDIS_ADMIN_USER).status, 0);
    assert.ok((await create("pvc-acl-3")).uuid);
  });

  test("a journal does not start without the library, and says why", async () => {
    await proc?.stop();
    proc = undefined;
    await admin.call("FUNCTION", "FLUSH");
    await assert.rejects(spawnService("journal", env), /csi_journal_v\d+.*csictl redis load-functions/s);
    assert.equal(csictlLoad(REDIS_ADMIN_USER).status, 0);
    proc = await spawnService("journal", env);
    assert.ok((await create("pvc-acl-4")).uuid);
  });
});
