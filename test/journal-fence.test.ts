/**
 * A writer fenced off after it made an image must not remove an image another writer has since
 * recorded. In-process journals (two replicas sharing NATS, Redis and the pool) on real servers:
 * writer A makes the image and stalls before recording it; its lock is lost; writer B finds the
 * image and records it ("complete"); A wakes, its append is fenced — and the volume keeps its image.
 * A then catches up with the log and decides again (as a CO's retry would): it answers B's volume.
 */
import path from "node:path";
import { after, before, test } from "node:test";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { EventLog } from "../services/journal/src/adapters/event-log.js";
import { FilePool } from "../services/journal/src/adapters/file-pool.js";
import { keysFor } from "../services/journal/src/domain/kinds.js";
import { fencedRace, GatedPool, journalReplica } from "./support/fenced-writers.js";
import { startTestServers, type TestServers } from "./support/servers.js";

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
