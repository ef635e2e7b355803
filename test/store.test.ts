/**
 * The JournalStore contract (test/contracts/store.contract.ts) held against both stores: RedisStore
 * on a real redis-server (its function library loaded as an admin would), a fresh cluster's keys
 * per test; and MemoryStore. Then what only one of them shows: MemoryStore names the projection's
 * differences (addresses, indexes) and counts its records as RedisStore does (same scenario, same
 * answers), and its clock drives lock TTLs and tombstones.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, describe, test } from "node:test";
import { type Address, addressKey } from "@csi/journal/fold";
import { type JournalStore, MemoryStore } from "@csi/journal/projection";
import { keysFor, RedisStore, TOMBSTONE_TTL_MS } from "@csi/journal/redis";
import { events, SNAP, VOL } from "@csi/journal/test-support";
import { type LocalServer, loadJournalFunctionsAt, startServer, tempDir } from "@csi/testkit";
import { Redis } from "ioredis";
import { folded, storeContract, trailsOf, volumeLife } from "./contracts/store.contract.js";

let dir: string | undefined;
let server: LocalServer | undefined;
let redis: Redis | undefined;
after(async () => {
  redis?.disconnect();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The redis-server, started by the first test that needs it (none when only the MemoryStore's tests run). */
async function connection(): Promise<Redis> {
  if (!redis) {
    dir = await tempDir("csi-store-");
    server = await startServer("redis", path.join(dir, "redis"));
    await loadJournalFunctionsAt(server.url);
    redis = new Redis(server.url);
  }
  return redis;
}

/** A uuid no test's projection holds. */
const NONE = "00000000-0000-4000-8000-00000000dead";

let clusters = 0;
const redisStore = async (cluster = `st${++clusters}`) => new RedisStore(await connection(), keysFor(cluster, "default"));

storeContract("RedisStore", async () => ({ store: await redisStore(), close: async () => {} }));
storeContract("MemoryStore", async () => ({ store: new MemoryStore(), close: async () => {} }));

describe("MemoryStore beside RedisStore", () => {
  /** A life, a rebuild, an apply, a wipe: what each step answers (record counts, differences, states). */
  async function scenario(store: JournalStore) {
    const e = events();
    const life = volumeLife(e);
    const states = folded(life);
    const epoch = "0123456789abcdef0123456789abcdef";
    await store.beginRebuild(epoch, "log", "force");
    await store.writeFresh(epoch, 0, [...states.values()], life.length);
    await store.markComplete(epoch, life.length);
    const rebuilt = { size: await store.recordCount(), differences: await store.differences(states.values()) };
    const both: Address[] = [
      { kind: "volume", uuid: VOL },
      { kind: "snapshot", uuid: SNAP },
    ];
    const trails = trailsOf([e.claimed("n3"), e.unclaimed("n1"), e.at({ type: "SnapshotDeleted", uuid: SNAP })], await store.readStates(both));
    const applied = await store.applyAndUnlock(trails, [], "t");
    const changed = await store.differences(states.values());
    return {
      rebuilt,
      applied,
      states: await store.readStates(both),
      changed,
      onlyThose: await store.differences(states.values(), [...changed, { address: { kind: "volume", uuid: NONE } }]),
      size: await store.recordCount(),
      wiped: await store.wipeProjection(),
      afterWipe: await store.differences(states.values()),
      meta: await store.projectionMeta(),
    };
  }

  test("names the projection's differences and counts its records as RedisStore does", async () => {
    const fromRedis = await scenario(new RedisStore(await connection(), keysFor("mem", "default")));
    const fromMemory = await scenario(new MemoryStore());
    assert.deepEqual(fromMemory, fromRedis);
    assert.ok(fromRedis.changed.length > 0, "the change showed as differences");
  });
});

describe("MemoryStore's clock", () => {
  test("a lock lives for its TTL on the clock given", async () => {
    let now = 1_000;
    const store = new MemoryStore({ now: () => now });
    const lock = { kind: "volume", uuid: VOL } as const;
    assert.ok((await store.lockAndRead("t1", 100, { locks: [lock] })).ok, "taken");
    now += 99;
    assert.equal((await store.lockAndRead("t2", 100, { locks: [lock] })).ok, false);
    assert.equal(await store.renew(lock, "t1", 100), true);
    now += 99;
    assert.equal((await store.lockAndRead("t2", 100, { locks: [lock] })).ok, false, "renewed");
    now += 1;
    assert.equal(await store.renew(lock, "t1", 100), false, "expired: not renewed");
    assert.ok((await store.lockAndRead("t2", 100, { locks: [lock] })).ok, "expired: taken");
  });

  test("a tombstone is kept TOMBSTONE_TTL_MS, then forgotten (an older write then lands again, as in Redis)", async () => {
    let now = 1_000;
    const store = new MemoryStore({ now: () => now });
    const epoch = "0123456789abcdef0123456789abcdef";
    await store.beginRebuild(epoch, "log", "force");
    await store.writeFresh(epoch, 0, [], 0);
    await store.markComplete(epoch, 0);
    const e = events();
    const reserved = [e.volReserved()];
    assert.equal(await store.applyAndUnlock(trailsOf([...reserved, e.at({ type: "VolumeDeleted", uuid: VOL })]), [], "t"), 1);
    const vol = { kind: "volume", uuid: VOL } as const;
    now += TOMBSTONE_TTL_MS - 1;
    assert.deepEqual((await store.readStates([vol])).get(addressKey(vol)), { kind: "volume", uuid: VOL, seq: 2 });
    assert.equal(await store.recordCount(), 1, "the tombstone is a record held");
    now += 1;
    assert.equal((await store.readStates([vol])).get(addressKey(vol)), undefined, "expired");
    assert.equal(await store.recordCount(), 0);
    assert.equal(await store.applyAndUnlock(trailsOf(reserved), [], "t"), 1, "nothing guards it any more");
  });
});
