/**
 * A rebuild's chunks of writes against a real redis-server (the Lua script `writeFresh`): each
 * lands only on its rebuild's epoch, not complete, right after every chunk before it; the last
 * one sets the watermark. A chunk after a FLUSHALL, a Redis that came back from a snapshot
 * taken mid-rebuild (fewer chunks written), another epoch or a complete projection writes nothing.
 * A rebuild that writes aggregates while it reads the log (and again when the log changes them
 * after) leaves what one that writes everything at the end leaves, key index included.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type EventBody, subjects } from "@csi/contracts";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { Projector } from "@csi/journal/projection";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { createLogger } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";

const k = keysFor("c1", "default");
const E1 = "0123456789abcdef0123456789abcdef";
const E2 = "fedcba9876543210fedcba9876543210";
let env: TestServers;
let redis: Redis;
let store: RedisStore;

before(async () => {
  env = await startTestServers();
  redis = new Redis(env.redis.url);
  store = new RedisStore(redis, k);
});
after(async () => {
  redis.disconnect();
  await env.dispose();
});

const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;
/** Chunk i: one record hash and an entry in the volume index. */
const chunk = (i: number) => [
  ["HSET", k.record("volume", uuid(i)), "_seq", i + 1, "_gone", "0"] as [string, ...(string | number)[]],
  ["ZADD", k.index("volume"), 0, uuid(i)] as [string, ...(string | number)[]],
];
const has = async (i: number) => (await redis.exists(k.record("volume", uuid(i)))) === 1;

test("chunks land in order on their epoch; the last sets the watermark; then complete", async () => {
  assert.equal(await store.beginRebuild(E1, "log", undefined), true);
  assert.equal(await store.writeFreshOps(E1, 0, chunk(0)), true);
  assert.equal(await store.writeFreshOps(E1, 2, chunk(2)), false, "chunk 1 is missing: refused");
  assert.equal(await has(2), false, "a refused chunk writes nothing");
  assert.equal(await store.writeFreshOps(E2, 1, chunk(1)), false, "another epoch's chunk");
  assert.equal(await store.writeFreshOps(E1, 1, chunk(1), 7), true);
  assert.deepEqual(await redis.hgetall(k.projection), { epoch: E1, log: "log", applied: "7", written: "2" });
  assert.deepEqual(await redis.zrange(k.index("volume"), "0", "-1"), [uuid(0), uuid(1)]);
  assert.equal(await store.markComplete(E1, 7), true);
  assert.equal(await store.writeFreshOps(E1, 2, chunk(2)), false, "nothing more once complete");
  assert.equal(await has(2), false);
});

test("after a FLUSHALL, or back from a snapshot with fewer chunks written, the next chunk is refused", async () => {
  assert.equal(await store.beginRebuild(E2, "log", "force"), true);
  assert.equal(await store.writeFreshOps(E2, 0, chunk(10)), true);
  assert.equal(await store.writeFreshOps(E2, 1, chunk(11)), true);
  // What a Redis restarted from a snapshot taken after chunk 0 holds: the same epoch, one chunk written.
  await redis.hset(k.projection, "written", 1);
  await redis.del(k.record("volume", uuid(11)));
  assert.equal(await store.writeFreshOps(E2, 2, chunk(12), 9), false, "chunk 1 was lost: the rebuild must start over");
  assert.equal(await has(12), false);
  await redis.flushall();
  assert.equal(await store.writeFreshOps(E2, 1, chunk(11)), false, "flushed: no epoch");
  assert.equal(await has(11), false);
  assert.equal(await store.markComplete(E2, 9), false);
});

test("a rebuild that writes while it reads leaves what one that writes at the end leaves, key index included", async () => {
  const c = "c2";
  const k2 = keysFor(c, "default");
  const nc = await connect({ servers: env.nats.url });
  try {
    const log = new EventLog(nc, { cluster: c, instance: "default" });
    await log.ensureStream();
    const meta = { requestId: "r", actor: { service: "test", replica: "1" }, time: "2026-01-01T00:00:00.000Z" };
    const vol = (i: number) => uuid(100 + i);
    const append = (subject: string, body: Record<string, unknown>) => log.append({ subject, body: body as EventBody }, meta);
    const born = async (i: number, node?: string) => {
      const u = vol(i);
      await append(subjects.nameEvents(c, "vol", "default", `pvc-${i}`), { type: "NameReserved", kind: "volume", name: `pvc-${i}`, uuid: u });
      await append(subjects.volumeEvents(c, u), {
        type: "VolumeReserved",
        uuid: u,
        name: `pvc-${i}`,
        instance: "default",
        pool: "default",
        poolId: 1,
        imageName: `csi-vol-${u}`,
        sizeBytes: 1048576,
        digest: "d",
        parameters: {},
        capabilities: [],
      });
      await append(subjects.volumeEvents(c, u), { type: "VolumeCreated", uuid: u, imageId: `i${i}`, sizeBytes: 1048576 });
      if (node)
        await append(subjects.volumeEvents(c, u), {
          type: "VolumeClaimed",
          uuid: u,
          nodeId: node,
          accessMode: "SINGLE_NODE_WRITER",
          accessType: "mount",
          readOnly: false,
        });
    };
    // Volume 0 alone on node n0, volume 1 on n1; then others, so both are written before the log changes them again.
    await born(0, "n0");
    await born(1, "n1");
    for (let i = 2; i < 8; i++) await born(i, "n9");
    const v0 = subjects.volumeEvents(c, vol(0));
    await append(v0, { type: "VolumeUnclaimed", uuid: vol(0), nodeId: "n0" }); // n0's claims set empties
    await append(v0, { type: "VolumeDeleted", uuid: vol(0) }); // a tombstone over a live record
    await append(subjects.nameEvents(c, "vol", "default", "pvc-0"), { type: "NameReleased", kind: "volume", name: "pvc-0", uuid: vol(0) });
    await append(subjects.volumeEvents(c, vol(1)), { type: "VolumeExpanded", uuid: vol(1), sizeBytes: 2097152 });
    await append(subjects.volumeEvents(c, vol(2)), { type: "VolumeDeleted", uuid: vol(2) });
    for (let i = 8; i < 12; i++) await born(i);
    // A tombstone written, then a reservation on its uuid again: a live record once more.
    await append(subjects.volumeEvents(c, vol(2)), {
      type: "VolumeReserved",
      uuid: vol(2),
      name: "pvc-2",
      instance: "default",
      pool: "default",
      poolId: 1,
      imageName: `csi-vol-${vol(2)}`,
      sizeBytes: 4096,
      digest: "d",
      parameters: {},
      capabilities: [],
    });

    const store2 = new RedisStore(redis, k2);
    const scanned = async () => {
      const out: string[] = [];
      let cursor = "0";
      do {
        const [next, found] = await redis.scan(cursor, "MATCH", `${k2.prefix}csi.*`, "COUNT", 1000);
        cursor = next;
        out.push(...found);
      } while (cursor !== "0");
      return out.sort();
    };
    const snapshot = async () => {
      const idx = await redis.zrange(k2.keyIndex, "0", "-1", "WITHSCORES");
      const scores = new Map<string, string>();
      for (let i = 0; i < idx.length; i += 2) scores.set(idx[i] as string, Number(idx[i + 1]) > 0 ? "expiry" : (idx[i + 1] as string));
      const keys = await store2.projectionKeys();
      assert.deepEqual(keys.sort(), await scanned(), "the index holds exactly the keys there are");
      const dump = await store2.dumpProjection(keys);
      // Members in one order (a set's SMEMBERS order depends on how it was built).
      for (const [key, v] of dump) if ("members" in v) dump.set(key, { members: [...v.members].sort() });
      return { scores, dump };
    };
    const logger = createLogger("rebuild-chunks", "silent");
    const streaming = new Projector(log, store2, logger, { batch: 2, rebuildPending: 0 });
    const atTheEnd = new Projector(log, store2, logger, { batch: 1000 });
    await atTheEnd.rebuild("test");
    const expected = await snapshot();
    assert.equal(expected.scores.get(k2.record("volume", vol(0))), "expiry", "the deleted volume is a tombstone");
    assert.equal(expected.scores.has(k2.nodeClaims("n0")), false, "no claims on n0");
    await streaming.rebuild("test");
    assert.deepEqual(await snapshot(), expected);
    assert.deepEqual((await streaming.compare()).differ, []);
  } finally {
    await nc.close();
  }
});
