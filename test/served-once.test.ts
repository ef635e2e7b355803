/**
 * A request is served once (services/journal/src/commands/run-served.ts): a resend of a command a
 * journal already answered does nothing, even after the CO acted on the answer. Found by ha.test's
 * rolling NATS restart: a CreateSnapshot answered by one journal, the snapshot deleted by the CO's
 * next call, then the JournalClient's resend of the create (sent on its reconnect, held behind the
 * name's lock) ran on another journal, found the name free and made a second snapshot nobody was
 * told of. Two journals on one in-memory log and store; a gated pool holds a run mid-way.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError, type ResolvedCluster, resolveClusters } from "@csi/contracts";
import type { Journal } from "@csi/journal";
import { MemoryLog } from "@csi/journal/log";
import { MemoryStore } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { fencedAsk, GatedPool, startedJournal } from "@csi/testkit";

const CLUSTER = "once";
let dir: string;
let cluster: ResolvedCluster;
let log: MemoryLog;
let pool: GatedPool;
let j1: Journal;
let j2: Journal;
/** How far the store's clock is ahead of the real one (a test moves it past the kept answer's time to live). */
let later = 0;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "csi-served-once-"));
  const root = path.join(dir, "pool");
  cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root }] }] }, dir).get(CLUSTER) as ResolvedCluster;
  pool = new GatedPool({ name: "default", id: 1, root });
  const pools = new Map([["default", pool]]);
  log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
  const store = new MemoryStore({ now: () => Date.now() + later });
  const logger = createLogger("served-once-test", "silent");
  j1 = await startedJournal({ cluster, pools, log, store, logger });
  j2 = await startedJournal({ cluster, pools, log, store, logger });
});

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The log's reservations of volumes, by name. */
const reservations = async (name: string) => {
  let n = 0;
  await log.read(1, async (batch) => {
    for (const r of batch) if ("event" in r && r.event.type === "VolumeReserved" && r.event.name === name) n++;
  });
  return n;
};

const abortedWith = (re: RegExp) => (err: unknown) => err instanceof DriverError && err.code === "Aborted" && re.test(err.message);

test("a resend of a create answered already, after the CO deleted the volume, gets the answer its caller lost and makes nothing; once that is no longer kept, it is refused", async () => {
  const v = await j1.createVolume({ ...fencedAsk("pvc-once"), requestId: "c-1" });
  await j1.deleteVolume({ requestId: "d-1", uuid: v.uuid });
  assert.deepEqual(await j2.createVolume({ ...fencedAsk("pvc-once"), requestId: "c-1", resend: true }), v, "the first answer again");
  assert.equal(await reservations("pvc-once"), 1, "one reservation of the name: the resend made no second volume");
  await assert.rejects(j1.getVolume({ uuid: v.uuid }), (err: unknown) => err instanceof DriverError && err.code === "NotFound");
  later = 5 * 60_000; // past the answer's minute (ANSWER_TTL_MS), within the mark's ten (SERVED_TTL_MS)
  try {
    await assert.rejects(j2.createVolume({ ...fencedAsk("pvc-once"), requestId: "c-1", resend: true }), abortedWith(/answered already/));
  } finally {
    later = 0;
  }
  assert.equal(await reservations("pvc-once"), 1, "nor a later one");
});

test("a resend of a request answered with an error gets the same error, and nothing runs", async () => {
  const v = await j1.createVolume({ ...fencedAsk("pvc-err"), requestId: "c-5" });
  const grow = { requestId: "e-5", uuid: v.uuid, sizeBytes: 1024 ** 5 };
  const first = await j1.expandVolume(grow).then(
    () => undefined,
    (err: unknown) => err as DriverError,
  );
  assert.ok(first instanceof DriverError, "the first run answers an error");
  await assert.rejects(
    j2.expandVolume({ ...grow, resend: true }),
    (err: unknown) => err instanceof DriverError && err.code === first.code && err.message === first.message,
  );
});

test("a resend of a request no run answered (its first run died before it) runs as the first would have", async () => {
  const v = await j2.createVolume({ ...fencedAsk("pvc-resent"), requestId: "c-2", resend: true });
  assert.equal((await j1.getVolume({ uuid: v.uuid })).name, "pvc-resent");
  assert.equal(await reservations("pvc-resent"), 1);
});

test("two runs of one request never overlap: a resend while the first run works is refused, the first answers", async () => {
  let go = () => {};
  pool.gate = new Promise<void>((r) => (go = r));
  const made = new Promise<void>((r) => (pool.made = r));
  const first = j1.createVolume({ ...fencedAsk("pvc-overlap"), requestId: "c-3" });
  await made; // the first run holds its locks, its image made, its events not yet appended
  try {
    // Refused on whichever of the run's locks it meets first (the name's, or the request's).
    await assert.rejects(j2.createVolume({ ...fencedAsk("pvc-overlap"), requestId: "c-3", resend: true }), abortedWith(/in progress|being answered/));
  } finally {
    pool.gate = undefined;
    go();
  }
  const v = await first;
  assert.equal(v.name, "pvc-overlap");
  assert.equal(await reservations("pvc-overlap"), 1);
});

test("a first send of a request id twice (a caller's own retry) is idempotent by name, as before", async () => {
  const a = await j1.createVolume({ ...fencedAsk("pvc-twice"), requestId: "c-4" });
  const b = await j2.createVolume({ ...fencedAsk("pvc-twice"), requestId: "c-4" });
  assert.equal(b.uuid, a.uuid);
});
