/**
 * Two journal writers racing on one name, in process, on real servers: writer A makes the image
 * and stalls before recording it (a GatedPool), its lock is lost meanwhile (however the test
 * loses it), writer B takes the name; then A wakes and its append must be fenced by the log's
 * expected-last-subject-sequence. Used by test/journal-fence.test.ts (the lock deleted) and
 * test/ha-fence.test.ts (the lock lost in a Redis Sentinel failover).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { resolveClusters } from "@csi/contracts";
import { Journal, type JournalDeps } from "@csi/journal";
import type { JetStreamLog as EventLog } from "@csi/journal/log";
import { FilePool, type ImageInfo } from "@csi/journal/pools";
import { distrustAfterRedisDrops, Projector } from "@csi/journal/projection";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { createLogger } from "@csi/runtime";
import type { Redis } from "ioredis";

/** A pool whose image creation can be held after the image is made, before the journal hears of it. */
export class GatedPool extends FilePool {
  gate?: Promise<void>;
  made?: () => void;
  override async createImage(name: string, sizeBytes: number): Promise<ImageInfo> {
    const img = await super.createImage(name, sizeBytes);
    this.made?.();
    await this.gate;
    return img;
  }
}

/**
 * One journal replica of `cluster` in this process, on the given Redis client, event log and pool;
 * `redisDrops`: its projection is caught up whenever that client reconnects, as the journal's main does.
 */
export function journalReplica(o: {
  cluster: string;
  dir: string;
  redis: Redis;
  events: EventLog;
  pool: FilePool;
  lockTtlMs?: number;
  redisDrops?: boolean;
}): Journal {
  const cluster = resolveClusters({ clusters: [{ clusterID: o.cluster, pools: [{ name: "default", id: 1, root: o.pool.root }] }] }, o.dir).get(o.cluster);
  assert.ok(cluster);
  const logger = createLogger("journal-fence-test", "silent");
  const store = new RedisStore(o.redis, keysFor(o.cluster, cluster.instance));
  const projector = new Projector(o.events, store, logger);
  if (o.redisDrops) distrustAfterRedisDrops(o.redis, projector);
  return testJournal({ cluster, pools: new Map([["default", o.pool]]), log: o.events, store, projector, logger, lockTtlMs: o.lockTtlMs ?? 5000 });
}

/**
 * One journal replica on a log and store it may share with others (its own projector, started
 * first, answering Unavailable after 2 s of a rebuild), with the tests' defaults (`testJournal`).
 */
export async function startedJournal(d: Pick<JournalDeps, "cluster" | "pools" | "log" | "store" | "logger">): Promise<Journal> {
  const projector = new Projector(d.log, d.store, d.logger, { waitMs: 2000 });
  await projector.start();
  return testJournal({ ...d, projector });
}

/**
 * A Journal in this process on the given adapters, with the tests' defaults (a replica name of its
 * own, a 5 s lock TTL, a 200 ms lock wait, the clock); `d` adds or replaces deps.
 */
export function testJournal(d: Pick<JournalDeps, "cluster" | "pools" | "log" | "store" | "projector" | "logger"> & Partial<JournalDeps>): Journal {
  return new Journal({ actor: { service: "journal", replica: randomUUID() }, lockTtlMs: 5000, lockWaitMs: 200, now: () => new Date(), ...d });
}

const MiB = 1024 * 1024;

/** The create both writers ask for. */
export const fencedAsk = (name: string) => ({
  name,
  sizeBytes: 4 * MiB,
  limitBytes: 0,
  parameters: {},
  capabilities: [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }],
});

/**
 * The race: A makes the image and stalls; `loseLock` takes A's lock away; B creates the volume;
 * A is let go. Then: A (fenced off, caught up) answers B's volume, the volume has its image, and the
 * log holds one VolumeCreated, B's.
 */
export async function fencedRace(o: { a: Journal; gated: GatedPool; b: Journal; name: string; loseLock: () => Promise<void> }): Promise<void> {
  let release = () => {};
  o.gated.gate = new Promise((r) => (release = r));
  const made = new Promise<void>((r) => (o.gated.made = r));
  const ask = fencedAsk(o.name);
  const first = o.a.createVolume({ ...ask, requestId: "a" }).then(
    (view) => view.uuid,
    (e: { code?: string }) => e.code,
  );
  await made; // A has made the image and stalls before recording it
  await o.loseLock();
  // B finds the image and records it. (Its first try may be fenced itself: A's reservation is in
  // the log but not yet in the projection; the fence conflict makes B catch up, as a CO's retry would.)
  const v = await o.b.createVolume({ ...ask, requestId: "b1" }).catch(() => o.b.createVolume({ ...ask, requestId: "b2" }));
  assert.equal(v.sizeBytes, ask.sizeBytes);
  release();
  assert.equal(await first, v.uuid, "A, fenced off, caught up and answered the volume B recorded");
  const got = await o.b.getVolume({ uuid: v.uuid });
  assert.deepEqual(got.condition, { abnormal: false, message: "image present" }, "the volume B answered still has its image");
  const created = (await unavailableAgain(() => o.b.audit.history({ uuid: v.uuid, maxEntries: 0 }))).events.filter((e) => e.event.type === "VolumeCreated");
  assert.equal(created.length, 1, "one VolumeCreated");
  assert.match(String(created[0]?.event.requestId), /^b/, "B's: A's was fenced off");
}

/** How long a read is tried again while a replicated stream elects a leader (a loaded machine's Raft may hold one for a while). */
const ELECTION_WAIT_MS = 60_000;

/** `read` again while it fails Unavailable (no stream leader yet), up to ELECTION_WAIT_MS. */
async function unavailableAgain<T>(read: () => Promise<T>): Promise<T> {
  const end = Date.now() + ELECTION_WAIT_MS;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      if ((err as { code?: string }).code !== "Unavailable" || Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}
