/**
 * A rebuild's chunks of writes against a real redis-server (the Lua script `writeFresh`): each
 * lands only on its rebuild's epoch, not complete, right after every chunk before it; the last
 * one sets the watermark. A chunk after a FLUSHALL, a Redis that came back from a snapshot
 * taken mid-rebuild (fewer chunks written), another epoch or a complete projection writes nothing.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { keysFor, RedisStore } from "@csi/journal/operator";
import { startTestServers, type TestServers } from "@csi/testkit";
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
