/**
 * A writer fenced off after it made an image must not remove an image another writer has since
 * recorded. In-process journals (two replicas sharing NATS, Redis and the pool) on real servers:
 * writer A makes the image and stalls before recording it; its lock is lost; writer B finds the
 * image and records it ("complete"); A wakes, its append is fenced — and the volume keeps its image.
 * A then catches up with the log and decides again (as a CO's retry would): it answers B's volume.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import path from "node:path";
import { after, before, test } from "node:test";
import { resolveClusters } from "@csi/contracts";
import { createLogger } from "@csi/runtime";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { EventLog } from "../services/journal/src/adapters/event-log.js";
import { FilePool } from "../services/journal/src/adapters/file-pool.js";
import { RedisStore } from "../services/journal/src/adapters/redis-store.js";
import { Journal } from "../services/journal/src/app/journal.js";
import { Projector } from "../services/journal/src/app/projector.js";
import { keysFor } from "../services/journal/src/domain/kinds.js";
import type { ImageInfo } from "../services/journal/src/domain/pool-backend.js";
import { startTestServers, type TestServers } from "./support/servers.js";

const MiB = 1024 * 1024;
let env: TestServers;
let nc: NatsConnection;
let redis: Redis;

/** A pool whose image creation can be held after the image is made, before the journal hears of it. */
class GatedPool extends FilePool {
  gate?: Promise<void>;
  made?: () => void;
  override async createImage(name: string, sizeBytes: number): Promise<ImageInfo> {
    const img = await super.createImage(name, sizeBytes);
    this.made?.();
    await this.gate;
    return img;
  }
}

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

function replica(pool: FilePool, events: EventLog): Journal {
  const cluster = resolveClusters({ clusters: [{ clusterID: "f1", pools: [{ name: "default", id: 1, root: pool.root }] }] }, env.dir).get("f1");
  assert.ok(cluster);
  const logger = createLogger("journal-fence-test", "silent");
  const store = new RedisStore(redis, keysFor("f1", cluster.instance));
  const projector = new Projector(events, store, logger);
  const actor = { service: "journal", replica: randomUUID() };
  return new Journal({
    cluster,
    pools: new Map([["default", pool]]),
    log: events,
    store,
    projector,
    actor,
    logger,
    lockTtlMs: 5000,
    lockWaitMs: 200,
    now: () => new Date(),
  });
}

test("a fenced writer keeps the image another writer recorded", async () => {
  const root = path.join(env.dir, "pools", "f1", "default");
  const events = new EventLog(nc, { cluster: "f1" });
  await events.ensureStream();
  const gated = new GatedPool({ name: "default", id: 1, root });
  let release = () => {};
  gated.gate = new Promise((r) => (release = r));
  const made = new Promise<void>((r) => (gated.made = r));
  const a = replica(gated, events);
  const b = replica(new FilePool({ name: "default", id: 1, root }), events);
  const ask = {
    name: "pvc-fenced",
    sizeBytes: 4 * MiB,
    limitBytes: 0,
    parameters: {},
    capabilities: [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }],
  };

  const first = a.createVolume({ ...ask, requestId: "a" }).then(
    (view) => view.uuid,
    (e: { code?: string }) => e.code,
  );
  await made; // A has made the image and stalls before recording it
  await redis.del(keysFor("f1", "default").nameLock("volume", ask.name)); // ... and its lock expires
  // B finds the image and records it. (Its first try may be fenced itself: A's reservation is in
  // the log but not yet in the projection; the fence conflict makes B catch up, as a CO's retry would.)
  const v = await b.createVolume({ ...ask, requestId: "b1" }).catch(() => b.createVolume({ ...ask, requestId: "b2" }));
  assert.equal(v.sizeBytes, 4 * MiB);
  release();
  assert.equal(await first, v.uuid, "A, fenced off, caught up and answered the volume B recorded");
  const got = await b.getVolume({ uuid: v.uuid });
  assert.deepEqual(got.condition, { abnormal: false, message: "image present" }, "the volume B answered still has its image");
  const created = (await b.history({ uuid: v.uuid, maxEntries: 0 })).events.filter((e) => e.event.type === "VolumeCreated");
  assert.equal(created.length, 1, "one VolumeCreated");
  assert.match(String(created[0]?.event.requestId), /^b/, "B's: A's was fenced off");
});
