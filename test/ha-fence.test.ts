/**
 * Issue 14, item 2: a lock lost in a Redis failover does not let two writers both act on one name.
 * Real servers (scripts/lib/ha-servers.ts): a 3-node NATS cluster (the event stream at 3 replicas),
 * a Redis primary + replica behind 3 Sentinels; two journal writers in this process reach Redis
 * through the sentinels, as the journal does (redisConnectOptions).
 *
 * The replica is frozen (SIGSTOP) and its replication link cut before writer A takes its lock, so
 * the lock lives only on the primary (as a write not yet replicated when the primary dies would). A makes the image and stalls; the primary is SIGKILLed and the replica woken, and the
 * sentinels promote it — without A's lock. Writer B takes the lock on the new primary and records
 * the volume. When A wakes, its append is refused by the JetStream expected-last-subject-sequence
 * fence: one VolumeCreated (B's), one image, and A answers B's volume.
 *
 * And the other loss of an asynchronous replica: a volume acknowledged just before the failover
 * whose projection writes never reached the replica. The journal catches its projection up from
 * the log when Redis comes back (Projector.distrust), so the volume is found, not NOT_FOUND.
 */
import assert from "node:assert/strict";
import { readdir, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { keysFor } from "@csi/journal/redis";
import { redisConnectOptions, SentinelSafeRedis } from "@csi/runtime";
import type { LocalServer } from "@csi/testkit";
import { fencedAsk, fencedRace, GatedPool, journalReplica, tempDir } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Redis } from "ioredis";
import { type HaServers, redisReplicaInSync, startHaServers, untilSeen, withRedis } from "../scripts/lib/ha-servers.js";

let dir: string;
let ha: HaServers;
let nc: NatsConnection;
let redis: Redis;

before(async () => {
  dir = await tempDir("csi-ha-fence-");
  ha = await startHaServers(path.join(dir, "servers"));
  nc = await connect({ servers: ha.natsUrl.split(","), maxReconnectAttempts: -1 });
  const access = { redisUrl: ha.redis[0]?.url ?? "", redisSentinels: ha.sentinelAddrs, redisMasterName: ha.masterName };
  redis = new SentinelSafeRedis(access.redisUrl, { ...redisConnectOptions(access), maxRetriesPerRequest: 2 });
  redis.on("error", () => {}); // the primary is killed on purpose
});

after(async () => {
  for (const s of ha?.redis ?? []) if (s.pid) process.kill(s.pid, "SIGCONT");
  await nc?.close();
  redis?.disconnect();
  await ha?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Runs `f` on a direct connection to one Redis server (not through the sentinels). */
const direct = <T>(s: LocalServer, f: (r: Redis) => Promise<T>) => withRedis(s.url, f);

/** The sentinels name `s` master, and `s` says it is one (waiting on what the sentinels say). */
async function promoted(s: LocalServer): Promise<void> {
  await untilSeen("the sentinels promote the replica", async () => ({ done: (await ha.redisPrimary()) === s, seen: ha.sentinelEvents.last() }));
  await untilSeen("the replica is master", async () => {
    const role = /^role:(\S+)/m.exec(await direct(s, (r) => r.info("replication")))?.[1] ?? "?";
    return { done: role === "master", seen: `role ${role}; ${ha.sentinelEvents.last()}` };
  });
}

/** The writers' client (through the sentinels) answers again: ioredis asked the sentinels and reached the new master. */
const clientBack = (what: string) =>
  untilSeen(what, async () => ({ done: (await redis.ping()) === "PONG", seen: `client ${redis.status}; ${ha.sentinelEvents.last()}` }));

test("a lock lost in a Sentinel failover: the JetStream sequence fence refuses the second writer", { timeout: 900_000 }, async () => {
  const name = "pvc-failover";
  const lockKey = keysFor("f1", "default").nameLock("volume", name);
  const [primary, replica] = ha.redis;
  assert.ok(primary && replica);
  assert.equal(await ha.redisPrimary(), primary, "the first server is the master");
  const events = new EventLog(nc, { cluster: "f1", replicas: 3 });
  await events.ensureStream();
  const root = path.join(dir, "pools", "f1", "default");
  const writer = (pool: FilePool) => journalReplica({ cluster: "f1", dir, redis, events, pool });
  const gated = new GatedPool({ name: "default", id: 1, root });
  const a = writer(gated);
  const b = writer(new FilePool({ name: "default", id: 1, root }));
  await redis.ping();

  // Frozen replica, its replication link cut: nothing A writes from now on reaches it. (Freezing alone
  // is not enough: the kernel would keep buffering the replication stream for it to read on waking.)
  assert.ok(replica.pid);
  process.kill(replica.pid, "SIGSTOP");
  assert.ok((await direct(primary, (r) => r.call("CLIENT", "KILL", "TYPE", "replica"))) === 1, "the replica's link cut");
  await fencedRace({
    a,
    gated,
    b,
    name,
    loseLock: async () => {
      assert.ok(await direct(primary, (r) => r.exists(lockKey)), "A holds the lock, on the primary only");
      await primary.kill();
      process.kill(replica.pid as number, "SIGCONT");
      await promoted(replica);
      assert.equal(await direct(replica, (r) => r.exists(lockKey)), 0, "the new master never had A's lock");
      await clientBack("the writers' client reaches the new master");
    },
  });
  const images = (await readdir(root)).filter((f) => f.endsWith(".img"));
  assert.equal(images.length, 1, `one image: ${images.join(", ")}`);
});

test("projection writes lost in a Sentinel failover: the journal catches up from the log when Redis is back", { timeout: 900_000 }, async () => {
  // After the test above: redis[1] is the master, redis[0] dead. Bring redis[0] back as its replica.
  const [replica, primary] = ha.redis;
  assert.ok(primary && replica);
  await replica.restart();
  await redisReplicaInSync(replica);
  assert.equal(await ha.redisPrimary(), primary);
  const events = new EventLog(nc, { cluster: "f2", replicas: 3 });
  await events.ensureStream();
  const root = path.join(dir, "pools", "f2", "default");
  const journal = journalReplica({ cluster: "f2", dir, redis, events, pool: new FilePool({ name: "default", id: 1, root }), redisDrops: true });
  await clientBack("the writers' client on the master");
  // A first volume: the projection exists and is complete, on the replica too.
  await journal.createVolume({ ...fencedAsk("pvc-before"), requestId: "before" });
  await untilSeen("the replica has it", async () => {
    const [m, r] = await Promise.all([primary, replica].map((s) => direct(s, (c) => c.info("replication"))));
    const offset = (info: string | undefined) => /(?:master_repl_offset|slave_repl_offset):(\d+)/.exec(info ?? "")?.[1];
    return { done: offset(m) !== undefined && offset(m) === offset(r), seen: `master at ${offset(m)}, replica at ${offset(r)}` };
  });

  assert.ok(replica.pid);
  process.kill(replica.pid, "SIGSTOP");
  assert.equal(await direct(primary, (r) => r.call("CLIENT", "KILL", "TYPE", "replica")), 1, "the replica's link cut");
  const v = await journal.createVolume({ ...fencedAsk("pvc-lost-write"), requestId: "create" });
  const recordKey = keysFor("f2", "default").record("volume", v.uuid);
  assert.equal(await direct(primary, (r) => r.exists(recordKey)), 1, "acknowledged: in the projection on the master");
  await primary.kill();
  process.kill(replica.pid, "SIGCONT");
  await promoted(replica);
  assert.equal(await direct(replica, (r) => r.exists(recordKey)), 0, "the new master lost the volume's projection");
  await clientBack("the client reaches the new master");

  // Without the catch-up this is NOT_FOUND ("source volume … does not exist").
  const snap = await journal.createSnapshot({ requestId: "snap", name: "snap-after-failover", sourceUuid: v.uuid, parameters: {} });
  assert.ok(snap.uuid);
  assert.equal((await journal.getVolume({ uuid: v.uuid })).uuid, v.uuid, "the volume is found again");
  assert.equal(await direct(replica, (r) => r.exists(recordKey)), 1, "its projection restored from the log");
});
