/**
 * The whole journal runner (services/journal/src/app/runner.ts) with in-memory adapters and no
 * servers: a Journal over MemoryLog and MemoryStore, a real FilePool in a temporary directory and
 * a Projector over them. Volumes created, repeated, refused, expanded, snapshotted and restored,
 * published and unpublished (a node's claim count refusing one more), a group snapshot made and
 * deleted, everything deleted, two creates of one name at once; every command's fold ran once
 * (observeFold: as many evolutions as events appended), and the projection is the log folded.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError, resolveClusters } from "@csi/contracts";
import { Journal } from "@csi/journal";
import { MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { MemoryStore, Projector } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { testJournal } from "@csi/testkit";

const CLUSTER = "c1";
const MiB = 1024 * 1024;
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

let dir: string;
let pool: FilePool;
let log: MemoryLog;
let projector: Projector;
let journal: Journal;
let store: MemoryStore;
/** Each run's (appended, evolutions), as observeFold tells them. */
const folds: [number, number][] = [];

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "csi-runner-"));
  const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root: path.join(dir, "pool") }] }] }, dir).get(CLUSTER);
  assert.ok(cluster, "the cluster is configured");
  pool = new FilePool({ name: "default", id: 1, root: path.join(dir, "pool") });
  log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
  store = new MemoryStore();
  const logger = createLogger("runner-test", "silent");
  projector = new Projector(log, store, logger, { waitMs: 2000 });
  journal = testJournal({
    cluster,
    pools: new Map([["default", pool]]),
    log,
    store,
    projector,
    logger,
    observeFold: (appended, evolutions) => void folds.push([appended, evolutions]),
  });
  await projector.start(); // an empty store: rebuilt (empty) and complete
});

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * Run one command: its result or its error's code, and the events its run appended. Every run of
 * it (a fenced-off run is run again) folded each appended event exactly once.
 */
async function command<T>(f: () => Promise<T>): Promise<{ result?: T; code?: string; appended: number }> {
  const from = folds.length;
  const out = await f().then(
    (result) => ({ result }),
    (err: unknown) => ({ code: err instanceof DriverError ? err.code : String(err) }),
  );
  const runs = folds.slice(from);
  assert.ok(runs.length > 0, "observeFold was told of the run");
  for (const [appended, evolutions] of runs) assert.equal(evolutions, appended, "the fold ran once per appended event");
  return { ...out, appended: runs.reduce((n, [a]) => n + a, 0) };
}

function ok<T>(r: { result?: T; code?: string }): T {
  assert.equal(r.code, undefined, `failed: ${r.code}`);
  return r.result as T;
}

const images = async () => (await readdir(pool.root)).filter((f) => f.endsWith(".img")).sort();
const create = (name: string, sizeBytes: number, more: Record<string, unknown> = {}) =>
  command(() => journal.createVolume({ requestId: `c-${name}`, name, sizeBytes, limitBytes: 0, parameters: {}, capabilities: [cap], ...more }));

test("the journal runner on in-memory adapters: volumes, snapshots, claims, a group snapshot; one fold per command", async () => {
  const made = await create("pvc-1", 4 * MiB);
  const v = ok(made);
  assert.ok(made.appended > 0, "a create appends its events");
  assert.equal(v.sizeBytes, 4 * MiB);
  assert.deepEqual(await images(), [`${v.imageName}.img`]);

  const again = await create("pvc-1", 4 * MiB);
  assert.deepEqual(ok(again), v, "a repeated create answers the same volume");
  assert.equal(again.appended, 0, "and appends nothing");
  const conflict = await create("pvc-1", 8 * MiB);
  assert.deepEqual([conflict.code, conflict.appended], ["AlreadyExists", 0], "another size under the same name");

  const grown = await command(() => journal.expandVolume({ requestId: "e1", uuid: v.uuid, sizeBytes: 6 * MiB }));
  assert.equal(ok(grown).sizeBytes, 6 * MiB);
  assert.equal(grown.appended, 1);

  const snapped = await command(() => journal.createSnapshot({ requestId: "s1", name: "snap-1", sourceUuid: v.uuid, parameters: {} }));
  const s = ok(snapped);
  assert.ok(snapped.appended > 0, "a snapshot appends its events");
  assert.equal(s.readyToUse, true);
  assert.deepEqual((await journal.listSnapshots({ sourceUuid: v.uuid, maxEntries: 0 })).entries, [s], "the source's snapshot index");

  const restored = ok(await create("pvc-2", 6 * MiB, { source: { kind: "snapshot", uuid: s.uuid } }));
  assert.deepEqual(restored.source, { kind: "snapshot", uuid: s.uuid });
  assert.deepEqual(
    (await journal.listVolumes({ maxEntries: 0 })).entries.map((x) => x.uuid),
    [v.uuid, restored.uuid].sort(),
  );

  const publish = (uuid: string, nodeId: string, maxVolumes = 0) =>
    command(() => journal.publishVolume({ requestId: `p-${uuid}-${nodeId}`, uuid, nodeId, capability: cap, readOnly: false, maxVolumes }));
  const published = await publish(v.uuid, "n1", 1);
  assert.equal(ok(published).publishContext.imageName, v.imageName);
  assert.equal(published.appended, 1);
  assert.equal((await publish(v.uuid, "n1", 1)).appended, 0, "published already");
  const full = await publish(restored.uuid, "n1", 1);
  assert.deepEqual([full.code, full.appended], ["ResourceExhausted", 0], "n1 holds its one volume (the store's node claims)");
  assert.deepEqual((await journal.getVolume({ uuid: v.uuid })).claims, [{ nodeId: "n1", accessMode: cap.accessMode, accessType: "mount", readOnly: false }]);
  const busy = await command(() => journal.deleteVolume({ requestId: "d-busy", uuid: v.uuid }));
  assert.deepEqual([busy.code, busy.appended], ["FailedPrecondition", 0], "a published volume is not deleted");
  const unpublished = await command(() => journal.unpublishVolume({ requestId: "u1", uuid: v.uuid, nodeId: "n1" }));
  assert.deepEqual([ok(unpublished), unpublished.appended], [{ deleted: true, held: [] }, 1]);
  assert.equal(ok(await publish(restored.uuid, "n1", 1)).publishContext.imageName, restored.imageName, "n1 has room again");
  ok(await command(() => journal.unpublishVolume({ requestId: "u2", uuid: restored.uuid })));

  const group = await command(() => journal.createGroupSnapshot({ requestId: "g1", name: "grp-1", sourceUuids: [v.uuid, restored.uuid], parameters: {} }));
  const g = ok(group);
  assert.ok(group.appended > 0, "a group snapshot appends its events");
  assert.equal(g.readyToUse, true);
  assert.deepEqual(g.snapshots.map((x) => x.sourceUuid).sort(), [v.uuid, restored.uuid].sort());
  const member = g.snapshots[0]?.uuid as string;
  const alone = await command(() => journal.deleteSnapshot({ requestId: "ds-member", uuid: member }));
  assert.deepEqual([alone.code, alone.appended], ["InvalidArgument", 0], "a member goes with its group only");
  const ungrouped = await command(() => journal.deleteGroupSnapshot({ requestId: "dg", uuid: g.uuid }));
  assert.deepEqual(ok(ungrouped), { deleted: true });
  assert.ok(ungrouped.appended > 0, "its delete too");
  assert.deepEqual(ok(await command(() => journal.deleteGroupSnapshot({ requestId: "dg2", uuid: g.uuid }))), { deleted: false }, "gone already");

  for (const [i, uuid] of [restored.uuid, v.uuid].entries()) {
    const del = await command(() => journal.deleteVolume({ requestId: `d${i}`, uuid }));
    assert.deepEqual(ok(del), { deleted: true });
    assert.ok(del.appended > 0, "a delete appends its events");
  }
  assert.deepEqual(ok(await command(() => journal.deleteSnapshot({ requestId: "ds", uuid: s.uuid }))), { deleted: true });
  const gone = await command(() => journal.deleteVolume({ requestId: "d-again", uuid: v.uuid }));
  assert.deepEqual([ok(gone), gone.appended], [{ deleted: false }, 0]);
  assert.deepEqual(await images(), [], "every image removed");
  assert.deepEqual((await journal.listVolumes({ maxEntries: 0 })).entries, []);

  const [x, y] = await Promise.all([create("pvc-3", MiB), create("pvc-3", MiB)]);
  assert.equal(ok(x).uuid, ok(y).uuid, "two creates of one name at once: one volume");
  assert.deepEqual(await images(), [`${ok(x).imageName}.img`], "one image");

  assert.ok((await log.info()).last > 0, "the log holds the history");
  assert.deepEqual((await projector.compare()).differ, [], "the projection is the log folded");
});

test("a journal whose Redis or event log is known down refuses a command before it reads, touches an image or appends", async () => {
  const down = new Journal({ ...journal.d, unavailable: () => "redis unavailable: the Redis connection is reconnecting" });
  const lastBefore = (await log.info()).last;
  const imagesBefore = await readdir(path.join(dir, "pool"));
  await assert.rejects(
    down.createVolume({ requestId: "c-down", name: "pvc-down", sizeBytes: MiB, limitBytes: 0, parameters: {}, capabilities: [cap] }),
    (err: unknown) => err instanceof DriverError && err.code === "Unavailable" && /the Redis connection is reconnecting/.test(err.message),
  );
  assert.equal((await log.info()).last, lastBefore, "nothing appended");
  assert.deepEqual(await readdir(path.join(dir, "pool")), imagesBefore, "no image made");
  // The same command on the journal that can serve goes through.
  ok(await command(() => journal.createVolume({ requestId: "c-up", name: "pvc-down", sizeBytes: MiB, limitBytes: 0, parameters: {}, capabilities: [cap] })));
});

/**
 * The round trips a command makes to Redis and to the log (issue 25): every call of the store's
 * and the log's command-path methods during `f`, with the events of each append.
 */
async function roundTrips(f: () => Promise<unknown>): Promise<string[]> {
  const calls: string[] = [];
  const spy = <O extends object>(o: O, names: string[]) => {
    const restore: (() => void)[] = [];
    for (const name of names) {
      const rec = o as Record<string, unknown>;
      const orig = rec[name] as (...a: unknown[]) => unknown;
      rec[name] = (...a: unknown[]) => {
        const n = name === "appendAll" ? `appendAll(${(a[0] as { body: { type: string } }[]).map((x) => x.body.type).join(",")})` : name;
        calls.push(n);
        return orig.apply(o, a);
      };
      restore.push(() => {
        rec[name] = orig;
      });
    }
    return () => {
      for (const r of restore) r();
    };
  };
  const unspyStore = spy(store, ["lockAndRead", "applyAndUnlock", "readStates", "completeStates"]);
  // (the runner appends through appendAll only; its events are published one by one inside it, in one write)
  const unspyLog = spy(log, ["appendAll", "history", "read"]);
  try {
    await f();
  } finally {
    unspyStore();
    unspyLog();
  }
  return calls;
}

// Each ends with the request marked served (commands/run-served.ts) inside the apply + unlock.
test("round trips: a create and a snapshot make three (lock + read, one write of three events, apply + unlock with the served mark), a delete and an expand three", async () => {
  assert.deepEqual(
    await roundTrips(() => create("pvc-rt", MiB)),
    ["lockAndRead", "appendAll(NameReserved,VolumeReserved,VolumeCreated)", "applyAndUnlock"],
    "CreateVolume",
  );
  const v = (await journal.listVolumes({ maxEntries: 0 })).entries.find((x) => x.name === "pvc-rt");
  assert.ok(v);
  assert.deepEqual(
    await roundTrips(() => command(() => journal.createSnapshot({ requestId: "s-rt", name: "snap-rt", sourceUuid: v.uuid, parameters: {} }))),
    ["lockAndRead", "appendAll(NameReserved,SnapshotReserved,SnapshotCreated)", "applyAndUnlock"],
    "CreateSnapshot",
  );
  assert.deepEqual(
    await roundTrips(() => command(() => journal.expandVolume({ requestId: "e-rt", uuid: v.uuid, sizeBytes: 2 * MiB }))),
    ["lockAndRead", "appendAll(VolumeExpanded)", "applyAndUnlock"],
    "ControllerExpandVolume",
  );
  const snap = (await journal.listSnapshots({ sourceUuid: v.uuid, maxEntries: 0 })).entries[0];
  assert.ok(snap);
  assert.deepEqual(
    await roundTrips(() => command(() => journal.deleteSnapshot({ requestId: "ds-rt", uuid: snap.uuid }))),
    ["lockAndRead", "appendAll(NameReleased,SnapshotDeleted)", "applyAndUnlock"],
    "DeleteSnapshot",
  );
  // A delete also reads the nodes' device reports of the volume (in use means in use): beside its
  // lock + read, in the same wave (the memory log's history is a read), so it still waits three times.
  assert.deepEqual(
    await roundTrips(() => command(() => journal.deleteVolume({ requestId: "d-rt", uuid: v.uuid }))),
    ["history", "read", "lockAndRead", "appendAll(NameReleased,VolumeDeleted)", "applyAndUnlock"],
    "DeleteVolume",
  );
});

test("locks whose release did not get through (Redis away for a moment) are released once it answers, not at their TTL", { timeout: 60_000 }, async () => {
  const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root: path.join(dir, "pool-rl") }] }] }, dir).get(
    CLUSTER,
  );
  assert.ok(cluster);
  const rlLog = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
  const rlStore = new MemoryStore();
  const logger = createLogger("runner-test", "silent");
  const rlProjector = new Projector(rlLog, rlStore, logger, { waitMs: 2000 });
  // A TTL far past this test's patience: only an early release lets the retry through.
  const j = testJournal({
    cluster,
    pools: new Map([["default", new FilePool({ name: "default", id: 1, root: path.join(dir, "pool-rl") })]]),
    log: rlLog,
    store: rlStore,
    projector: rlProjector,
    logger,
    lockTtlMs: 600_000,
  });
  await rlProjector.start();
  const real = rlStore.applyAndUnlock.bind(rlStore);
  let failures = 2; // the run's write and its release after the catch-up: Redis is away
  rlStore.applyAndUnlock = (...args) =>
    failures-- > 0 ? Promise.reject(new DriverError("Unavailable", "redis unavailable: the Redis connection is reconnecting")) : real(...args);
  const req = { requestId: "rl-1", name: "pvc-rl", sizeBytes: MiB, limitBytes: 0, parameters: {}, capabilities: [cap] };
  await j.createVolume(req).catch(() => {});
  assert.equal(failures, 0, "both writes failed as arranged");
  // The CO's retry, again and again while the name is locked (Aborted); a lock left to its TTL would hold it for 10 minutes.
  for (;;) {
    const r = await j.createVolume({ ...req, requestId: "rl-2" }).then(
      (v) => ({ v }),
      (err: unknown) => ({ err }),
    );
    if ("v" in r) break;
    assert.ok(r.err instanceof DriverError && r.err.code === "Aborted", `only the lock may refuse the retry: ${String(r.err)}`);
  }
});
