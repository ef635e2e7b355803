/**
 * A writer fenced off after it made an image must not remove an image another writer has since
 * recorded. In-process journals (two replicas sharing NATS, Redis and the pool) on real servers:
 * writer A makes the image and stalls before recording it; its lock is lost; writer B finds the
 * image and records it ("complete"); A wakes, its append is fenced — and the volume keeps its image.
 * A then catches up with the log and decides again (as a CO's retry would): it answers B's volume.
 */
import assert from "node:assert/strict";
import { readdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { AppendUncertain, JetStreamLog as EventLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { fencedAsk, fencedRace, GatedPool, journalReplica, startTestServers, type TestServers } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";

let env: TestServers;
let nc: NatsConnection;
let redis: Redis;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url });
  redis = new Redis(env.redis.url);
});

after(async () => {
  await nc?.close();
  redis?.disconnect();
  await env?.dispose();
});

test("a fenced writer keeps the image another writer recorded", async () => {
  const root = path.join(env.dir, "pools", "f1", "default");
  const events = new EventLog(nc, { cluster: "f1" });
  await events.ensureStream();
  const replica = (pool: FilePool) => journalReplica({ cluster: "f1", dir: env.dir, redis, events, pool });
  const gated = new GatedPool({ name: "default", id: 1, root });
  await fencedRace({
    a: replica(gated),
    gated,
    b: replica(new FilePool({ name: "default", id: 1, root })),
    name: "pvc-fenced",
    // A's lock expires.
    loseLock: async () => void (await redis.del(keysFor("f1", "default").nameLock("volume", "pvc-fenced"))),
  });
});

test("gc while a create's image is made and its events not written yet: verify sees a leak, gc leaves it (the create holds its uuid's lock), the volume keeps its image", async () => {
  const cluster = "f3";
  const root = path.join(env.dir, "pools", cluster, "default");
  const events = new EventLog(nc, { cluster });
  await events.ensureStream();
  const gated = new GatedPool({ name: "default", id: 1, root });
  const a = journalReplica({ cluster, dir: env.dir, redis, events, pool: gated });
  const operator = journalReplica({ cluster, dir: env.dir, redis, events, pool: new FilePool({ name: "default", id: 1, root }) });
  let release = () => {};
  gated.gate = new Promise((r) => (release = r));
  const made = new Promise<void>((r) => (gated.made = r));
  const creating = a.createVolume({ ...fencedAsk("pvc-gc-race"), requestId: "c" });
  await made; // the image is in the pool; nothing of the create is in the log
  const verify = await operator.audit.verify({ olderThanMs: 0, maxFindings: 1000 });
  const leak = verify.findings.find((f) => f.type === "leakedImage");
  assert.ok(leak?.type === "leakedImage", `verify reports the image no record names yet: ${JSON.stringify(verify.findings)}`);
  const gc = await operator.audit.gc({ requestId: "gc", apply: true, olderThanMs: 0, maxActions: 1000 });
  const action = gc.actions.find((x) => x.imageName === leak.imageName);
  assert.deepEqual([action?.type, action?.outcome], ["removeLeakedImage", "skipped"], JSON.stringify(gc.actions));
  assert.match(String(action?.reason), /busy/);
  release();
  const v = await creating;
  assert.equal(v.imageName, leak.imageName, "the image gc left was the create's");
  assert.deepEqual((await operator.getVolume({ uuid: v.uuid })).condition, { abnormal: false, message: "image present" });
  const after = await operator.audit.verify({ olderThanMs: 0, maxFindings: 1000 });
  assert.equal(after.counts.leakedImages, 0, "and nothing is leaked once its events are written");
});

test("gc while a snapshot is being copied: its temp file is left (the create holds its uuid's lock); a dead build's temp file is removed", async () => {
  const cluster = "f4";
  const root = path.join(env.dir, "pools", cluster, "default");
  const events = new EventLog(nc, { cluster });
  await events.ensureStream();
  const a = journalReplica({ cluster, dir: env.dir, redis, events, pool: new FilePool({ name: "default", id: 1, root, holdCopyMs: 3_000 }) });
  const operator = journalReplica({ cluster, dir: env.dir, redis, events, pool: new FilePool({ name: "default", id: 1, root }) });
  const src = await operator.createVolume({ ...fencedAsk("pvc-gc-copy"), requestId: "src" });
  const dead = `.tmp-csi-snap-11111111-2222-4333-8444-555555555555-0123456789ab`;
  await writeFile(path.join(root, dead), "half a copy of a killed journal");
  const copying = a.createSnapshot({ requestId: "s", name: "snap-gc-copy", sourceUuid: src.uuid, sourcePoolId: undefined, parameters: {} });
  const temps = async () => (await readdir(root)).filter((f) => f.startsWith(".tmp-")).sort();
  while ((await temps()).length < 2) await new Promise((r) => setTimeout(r, 20));
  const live = (await temps()).find((f) => f !== dead) as string;
  const gc = await operator.audit.gc({ requestId: "gc-copy", apply: true, olderThanMs: 0, maxActions: 1000 });
  const outcome = (name: string) => gc.actions.filter((x) => x.imageName === name).map((x) => [x.type, x.outcome]);
  assert.deepEqual(outcome(live), [["removeTempImage", "skipped"]], JSON.stringify(gc.actions));
  assert.deepEqual(outcome(dead), [["removeTempImage", "done"]], JSON.stringify(gc.actions));
  assert.deepEqual(await temps(), [live], "the live build's temp file is still there, the dead one's gone");
  const snap = await copying; // the copy, held a few seconds, then published
  assert.equal(snap.readyToUse, true);
  assert.deepEqual(await temps(), [], "its temp file became the snapshot");
});

/** An event log that loses the ack of the next NameReserved it appends: the event lands, the writer hears nothing. */
class LosingAcks extends EventLog {
  loseNext = false;
  override async append(...args: Parameters<EventLog["append"]>): ReturnType<EventLog["append"]> {
    const stored = await super.append(...args);
    if (this.loseNext && args[0].body.type === "NameReserved") {
      this.loseNext = false;
      throw new AppendUncertain({ cause: new Error("ack lost (test)") });
    }
    return stored;
  }
}

test("an append that got no answer: its command answers once the projection holds it, and the next command decides on the log", async () => {
  const cluster = "f2";
  const root = path.join(env.dir, "pools", cluster, "default");
  const events = new LosingAcks(nc, { cluster });
  await events.ensureStream();
  const journal = journalReplica({ cluster, dir: env.dir, redis, events, pool: new FilePool({ name: "default", id: 1, root }) });
  const store = new RedisStore(redis, keysFor(cluster, "default"));
  await journal.createVolume({ ...fencedAsk("pvc-warm"), requestId: "warm" }); // the projection is built

  events.loseNext = true;
  // The whole reservation went in one write; the log, read after the lost ack, has all of it: the volume is answered.
  const lost = await journal.createVolume({ ...fencedAsk("pvc-lost"), requestId: "lost" });
  const logEnd = await events.lastSeq();
  // Its events were found in the log, not written by the run: the answer waited for a catch-up, so
  // another replica reading after it sees the volume (test/uncertain-ack.test.ts).
  assert.ok(((await store.projectionMeta())?.applied ?? 0) >= logEnd, "the lost NameReserved is in the projection before the answer");

  // The next command (any name) reads a projection at the log's end.
  await journal.createVolume({ ...fencedAsk("pvc-next"), requestId: "next" });
  assert.ok(((await store.projectionMeta())?.applied ?? 0) >= logEnd, "caught up before reading");
  // And the retry of the lost create answers one volume for the name, decided on the log.
  const retried = await journal.createVolume({ ...fencedAsk("pvc-lost"), requestId: "lost-2" });
  const again = await journal.createVolume({ ...fencedAsk("pvc-lost"), requestId: "lost-3" });
  assert.deepEqual([retried.uuid, again.uuid], [lost.uuid, lost.uuid]);
});
