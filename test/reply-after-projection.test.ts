/**
 * A reply goes out only once the projection holds what it tells (services/journal/src/commands/
 * run-finish.ts). Found by ha.test's rolling NATS restart on a loaded machine: a CreateVolume's
 * events were in the log, the projection's write after them failed (Redis answered "max retries
 * per request"), the CO was told the volume exists all the same, and its next call — a snapshot of
 * that volume, served by the other journal — was answered NOT_FOUND: "source volume … does not
 * exist". Two journals on one in-memory log and one store whose writes fail on demand (as a
 * dropped Redis connection would), a real FilePool.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError, type ResolvedCluster, resolveClusters } from "@csi/contracts";
import type { Journal } from "@csi/journal";
import { MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { MemoryStore } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { fencedAsk, startedJournal } from "@csi/testkit";

const CLUSTER = "reply";

/** A MemoryStore whose next `applyAndUnlock` calls fail (`failApplies` of them), and whose catch-up batches fail while `down`. */
class DroppingStore extends MemoryStore {
  failApplies = 0;
  down = false;
  override async applyAndUnlock(...a: Parameters<MemoryStore["applyAndUnlock"]>) {
    if (this.failApplies > 0) {
      this.failApplies--;
      throw new DriverError("Unavailable", "redis unavailable: Reached the max retries per request limit (test)");
    }
    return super.applyAndUnlock(...a);
  }
  override async applyBatch(...a: Parameters<MemoryStore["applyBatch"]>) {
    if (this.down) throw new DriverError("Unavailable", "redis unavailable: the connection is reconnecting (test)");
    return super.applyBatch(...a);
  }
}

let dir: string;
let log: MemoryLog;
let store: DroppingStore;
let j1: Journal;
let j2: Journal;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "csi-reply-after-projection-"));
  const root = path.join(dir, "pool");
  const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root }] }] }, dir).get(CLUSTER) as ResolvedCluster;
  const pools = new Map([["default", new FilePool({ name: "default", id: 1, root })]]);
  log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
  store = new DroppingStore();
  const logger = createLogger("reply-after-projection-test", "silent");
  j1 = await startedJournal({ cluster, pools, log, store, logger });
  j2 = await startedJournal({ cluster, pools, log, store, logger });
});

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The uuids the log reserved for a volume name, in log order. */
const reserved = async (name: string) => {
  const uuids: string[] = [];
  await log.read(1, async (batch) => {
    for (const r of batch) if ("event" in r && r.event.type === "VolumeReserved" && r.event.name === name) uuids.push(r.event.uuid);
  });
  return uuids;
};

test("the projection's write after a create fails once: the create is answered only after a catch-up wrote it, and the other journal snapshots the volume", async () => {
  store.failApplies = 1;
  const v = await j1.createVolume({ ...fencedAsk("pvc-dropped-write"), requestId: "c-1" });
  assert.equal(store.failApplies, 0, "the write after the create's appends was the one that failed");
  assert.equal((await j2.getVolume({ uuid: v.uuid })).uuid, v.uuid, "the other journal reads the volume it was told of");
  const s = await j2.createSnapshot({ requestId: "s-1", name: "snap-of-dropped-write", sourceUuid: v.uuid, parameters: {} });
  assert.equal(s.sourceUuid, v.uuid);
});

test("the write fails and so does the catch-up: the create is answered Unavailable, not OK; the CO's retry, once Redis is back, gets the same volume", async () => {
  store.failApplies = 1;
  store.down = true;
  try {
    await assert.rejects(
      j1.createVolume({ ...fencedAsk("pvc-redis-gone"), requestId: "c-2" }),
      (err: unknown) => err instanceof DriverError && err.code === "Unavailable" && /projection could not catch up/.test(err.message),
    );
  } finally {
    store.down = false;
  }
  const [first] = await reserved("pvc-redis-gone");
  assert.ok(first, "the create is in the log");
  // The retry's name reservation is fenced off by the log (its fresh record, sent with it, is undone).
  const again = await j2.createVolume({ ...fencedAsk("pvc-redis-gone"), requestId: "c-3" });
  assert.equal(again.uuid, first, "the retry answers the volume the log holds for the name");
  assert.equal((await j1.getVolume({ uuid: first })).name, "pvc-redis-gone");
});
