/**
 * Audit on real nats-server, redis-server and a journal process: a volume's life replayed at
 * points between its steps (by sequence and by time, for the cluster and for the volume alone);
 * FLUSHALL + audit.rebuild restores the projection key by key; verify finds a planted leaked
 * image (one named like ours, one foreign), a planted orphaned reservation and a claim of a node
 * that stopped heartbeating; gc's dry run touches nothing, gc applied removes them under the
 * locks with events in the log, and verify is clean after.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { access, readdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { JournalEvent, type ReplayEntry, subjects } from "@csi/contracts";
import { volumeReservedBody } from "@csi/journal/test-support";
import { type JournalTestEnv, journalPerFile, registerNode } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const CLUSTER = "audit";
const MiB = 1024 * 1024;
const HOUR = 3600 * 1000;
let j: JournalTestEnv;
journalPerFile(CLUSTER, { timeoutMs: 30_000 }, (env) => {
  j = env;
});
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
const poolDir = () => path.join(j.servers.dir, "pools", CLUSTER, "default");
const exists = (f: string) =>
  access(path.join(poolDir(), f)).then(
    () => true,
    () => false,
  );

const lastSeq = async () => (await (await jetstreamManager(j.nc)).streams.info(subjects.streamName(CLUSTER))).state.last_seq;
const replay = (at: number | string, more: { uuid?: string } = {}) => j.client.call(CLUSTER, "audit.replay", { at, ...more });
const entryOf = (entries: ReplayEntry[], uuid: string) => entries.find((e) => e.uuid === uuid);

/** A node registration, as a node-agent publishes it (its heartbeat). */
const heartbeat = (nodeId: string, time: Date) => registerNode(j.nc, nodeId, time);

/** Every projection key with its value (locks and the meta hash, which a rebuild renews, left out). */
async function dumpProjection(): Promise<Map<string, unknown>> {
  const keys = (await j.redis.keys(`{${CLUSTER}}:csi.*`)).sort();
  const out = new Map<string, unknown>();
  for (const k of keys) {
    const type = await j.redis.type(k);
    out.set(k, type === "hash" ? await j.redis.hgetall(k) : type === "zset" ? await j.redis.zrange(k, "0", "-1") : (await j.redis.smembers(k)).sort());
  }
  return out;
}

test("replay: a volume's life seen at points between its steps, by sequence and by time, for the cluster and for the volume", async () => {
  const c = j.client;
  const vol = await c.call(CLUSTER, "volume.create", { requestId: "create", name: "pvc-life", sizeBytes: 2 * MiB, capabilities: [cap] });
  const afterCreate = await lastSeq();
  await c.call(CLUSTER, "volume.expand", { requestId: "expand", uuid: vol.uuid, sizeBytes: 4 * MiB });
  const afterExpand = await lastSeq();
  const snap = await c.call(CLUSTER, "snapshot.create", { requestId: "snap", name: "snap-life", sourceUuid: vol.uuid });
  await heartbeat("node-life", new Date());
  await c.call(CLUSTER, "volume.publish", { requestId: "pub", uuid: vol.uuid, nodeId: "node-life", capability: cap, readOnly: false });
  const afterPublish = await lastSeq();
  await c.call(CLUSTER, "volume.unpublish", { requestId: "unpub", uuid: vol.uuid, nodeId: "node-life" });
  await c.call(CLUSTER, "snapshot.delete", { requestId: "dsnap", uuid: snap.uuid });
  await c.call(CLUSTER, "volume.delete", { requestId: "delete", uuid: vol.uuid });

  const at1 = await replay(afterCreate);
  assert.equal(at1.upTo.seq, afterCreate);
  assert.deepEqual([entryOf(at1.entries, vol.uuid)?.status, entryOf(at1.entries, vol.uuid)?.volume?.sizeBytes], ["ready", 2 * MiB]);
  assert.equal(entryOf(at1.entries, snap.uuid), undefined, "no snapshot yet");

  const at2 = await replay(afterExpand);
  assert.equal(entryOf(at2.entries, vol.uuid)?.volume?.sizeBytes, 4 * MiB, "expanded");
  assert.equal(entryOf(at2.entries, snap.uuid), undefined);

  const at3 = await replay(afterPublish);
  assert.deepEqual(
    entryOf(at3.entries, vol.uuid)?.volume?.claims.map((x) => x.nodeId),
    ["node-life"],
  );
  assert.deepEqual(entryOf(at3.entries, snap.uuid)?.snapshot, snap, "the snapshot as its create answered it");

  const end = await replay(await lastSeq());
  assert.equal(entryOf(end.entries, vol.uuid), undefined, "deleted: not among the live aggregates");
  const one = await replay(await lastSeq(), { uuid: vol.uuid });
  assert.deepEqual(
    one.entries.map((e) => [e.uuid, e.status]),
    [[vol.uuid, "deleted"]],
  );
  assert.deepEqual((await replay(0, { uuid: vol.uuid })).entries, [], "before its first event it did not exist");

  // By time: the expand's own time is a point after it and (clocks being ms) before or at the snapshot.
  const history = await c.call(CLUSTER, "volume.history", { uuid: vol.uuid });
  const expanded = history.events.find((e) => e.event.type === "VolumeExpanded");
  assert.ok(expanded);
  const byTime = await replay(String(expanded.event.time), { uuid: vol.uuid });
  assert.deepEqual([byTime.entries[0]?.volume?.sizeBytes, byTime.entries[0]?.status], [4 * MiB, "ready"]);
  assert.ok(byTime.upTo.seq >= expanded.seq && byTime.upTo.seq < afterPublish);
  const early = await replay("2000-01-01T00:00:00Z");
  assert.deepEqual([early.upTo.seq, early.entries], [0, []]);
});

test("FLUSHALL + audit.rebuild restores the projection exactly, key by key", async () => {
  const c = j.client;
  const a = await c.call(CLUSTER, "volume.create", { requestId: "r1", name: "pvc-rebuild-a", sizeBytes: MiB, capabilities: [cap] });
  const b = await c.call(CLUSTER, "volume.create", { requestId: "r2", name: "pvc-rebuild-b", sizeBytes: MiB, capabilities: [cap] });
  await c.call(CLUSTER, "snapshot.create", { requestId: "r3", name: "snap-rebuild", sourceUuid: a.uuid });
  await c.call(CLUSTER, "volume.publish", { requestId: "r4", uuid: b.uuid, nodeId: "node-rebuild", capability: cap, readOnly: false });
  await c.call(CLUSTER, "volume.modify", { requestId: "r5", uuid: a.uuid, mutableParameters: { readIOPS: "100" } });
  await c.call(CLUSTER, "volume.delete", {
    requestId: "r6",
    uuid: (await c.call(CLUSTER, "volume.create", { requestId: "r7", name: "pvc-gone", sizeBytes: MiB, capabilities: [cap] })).uuid,
  });
  const before = await dumpProjection();
  assert.ok(before.size > 10);
  await j.redis.flushall();
  const rebuilt = await c.call(CLUSTER, "audit.rebuild", { requestId: "rebuild" });
  assert.equal(rebuilt.replayedTo, await lastSeq());
  const afterRebuild = await dumpProjection();
  assert.deepEqual([...afterRebuild.keys()], [...before.keys()]);
  for (const [k, v] of before) assert.deepEqual(afterRebuild.get(k), v, k);
  await c.call(CLUSTER, "volume.unpublish", { requestId: "r8", uuid: b.uuid });
});

test("verify finds planted garbage; gc's dry run touches nothing; gc removes it with events under the locks; verify is clean after", async () => {
  const c = j.client;
  // Planted: an image named like a volume's with no reservation, a foreign image, and a
  // reservation without an image, reserved two hours ago (as a writer that died after
  // VolumeReserved leaves it), and one reserved just now (younger than the threshold).
  const leakedOurs = `csi-vol-${randomUUID()}`;
  await writeFile(path.join(poolDir(), `${leakedOurs}.img`), Buffer.alloc(4096));
  await writeFile(path.join(poolDir(), "left-by-hand.img"), Buffer.alloc(1024));
  const js = jetstream(j.nc);
  const plant = async (name: string, time: Date) => {
    const uuid = randomUUID();
    const meta = { v: 1, time: time.toISOString(), requestId: `plant-${name}`, actor: { service: "test", replica: "1" } };
    const reserved = JournalEvent.parse({ ...meta, ...volumeReservedBody(uuid, name, { capabilities: [cap] }) });
    await js.publish(subjects.nameEvents(CLUSTER, "vol", "default", name), JSON.stringify({ ...meta, type: "NameReserved", kind: "volume", name, uuid }), {
      expect: { lastSubjectSequence: 0 },
    });
    await js.publish(subjects.volumeEvents(CLUSTER, uuid), JSON.stringify(reserved), { expect: { lastSubjectSequence: 0 } });
    return uuid;
  };
  const orphan = await plant("pvc-orphan", new Date(Date.now() - 2 * HOUR));
  const young = await plant("pvc-young", new Date());
  // A claim of a node whose last heartbeat is long gone.
  const claimed = await c.call(CLUSTER, "volume.create", { requestId: "v1", name: "pvc-stale-claim", sizeBytes: MiB, capabilities: [cap] });
  await heartbeat("node-gone", new Date(Date.now() - HOUR));
  await c.call(CLUSTER, "volume.publish", { requestId: "v2", uuid: claimed.uuid, nodeId: "node-gone", capability: cap, readOnly: false });

  const found = await c.call(CLUSTER, "audit.verify", { olderThanMs: HOUR });
  assert.deepEqual(found.counts, { leakedImages: 2, orphanedReservations: 1, missingImages: 0, projectionDrift: 0, staleClaims: 1, foreignRecords: 0 });
  assert.deepEqual(
    found.findings.map((f) => [f.type, "imageName" in f ? f.imageName : "nodeId" in f ? f.nodeId : ""]),
    [
      ["leakedImage", leakedOurs],
      ["leakedImage", "left-by-hand"],
      ["orphanedReservation", `csi-vol-${orphan}`],
      ["staleClaim", "node-gone"],
    ],
  );
  const limited = await c.call(CLUSTER, "audit.verify", { olderThanMs: HOUR, maxFindings: 1 });
  assert.deepEqual([limited.findings.length, limited.truncated, limited.counts.leakedImages], [1, true, 2]);

  const seqBefore = await lastSeq();
  // gc removes a leaked image only with proof (docs/operations.md): named after one of ours, older
  // than the grace (the planted one was made just now), never named by the log; the other is not ours.
  const dry = await c.call(CLUSTER, "audit.gc", { requestId: "gc-dry", olderThanMs: HOUR });
  assert.equal(dry.apply, false);
  assert.deepEqual(
    dry.actions.map((x) => [x.type, x.imageName, x.outcome, x.reason?.replace(/ \(.*/, "")]),
    [
      ["removeLeakedImage", leakedOurs, "skipped", "kept: younger than the grace period"],
      ["removeLeakedImage", "left-by-hand", "skipped", "kept: not named after a volume or snapshot of this driver"],
      ["collectReservation", `csi-vol-${orphan}`, "planned", undefined],
    ],
  );
  assert.equal(await lastSeq(), seqBefore, "a dry run appends nothing");
  assert.ok((await exists(`${leakedOurs}.img`)) && (await exists("left-by-hand.img")), "a dry run removes nothing");

  const applied = await c.call(CLUSTER, "audit.gc", { requestId: "gc-apply", olderThanMs: HOUR, graceMs: 0, apply: true });
  assert.deepEqual(
    applied.actions.map((x) => x.outcome),
    ["done", "skipped", "done"],
  );
  assert.equal(await exists(`${leakedOurs}.img`), false);
  // Quarantined, not gone: kept in the pool's .trash for its retention (an operator can move it back).
  assert.ok(
    (await readdir(path.join(poolDir(), ".trash"))).some((f) => f.startsWith(`${leakedOurs}.img@`)),
    "in quarantine",
  );
  assert.equal(await exists("left-by-hand.img"), true, "never removed: not ours");
  await rm(path.join(poolDir(), "left-by-hand.img")); // the operator's to remove

  await c.call(CLUSTER, "volume.unpublish", { requestId: "v3", uuid: claimed.uuid, nodeId: "node-gone" });
  const clean = await c.call(CLUSTER, "audit.verify", { olderThanMs: HOUR });
  assert.deepEqual(clean.counts, { leakedImages: 0, orphanedReservations: 0, missingImages: 0, projectionDrift: 0, staleClaims: 0, foreignRecords: 0 });
  assert.deepEqual(clean.findings, []);

  // The log holds the cleanup: who, why, what.
  const jsm = await jetstreamManager(j.nc);
  const poolEvents: JournalEvent[] = [];
  for (let seq = seqBefore + 1; seq <= (await lastSeq()); seq++) {
    const m = await jsm.streams.getMessage(subjects.streamName(CLUSTER), { seq });
    if (m) poolEvents.push(JournalEvent.parse(m.json()));
  }
  const collected = poolEvents.filter((e) => e.type === "ImageLeakCollected" || e.type === "ReservationCollected" || e.type === "NameReleased");
  assert.deepEqual(
    collected.map((e) => [e.type, e.requestId, e.actor.service, "imageName" in e ? e.imageName : "uuid" in e ? e.uuid : ""]).sort(),
    [
      ["ImageLeakCollected", "gc-apply", "journal", leakedOurs],
      ["NameReleased", "gc-apply", "journal", orphan],
      ["ReservationCollected", "gc-apply", "journal", orphan],
    ].sort(),
  );
  // The young reservation was left alone; the collected one's name is free again.
  const youngNow = await replay(await lastSeq(), { uuid: young });
  assert.equal(youngNow.entries[0]?.status, "reserved");
  const again = await c.call(CLUSTER, "volume.create", { requestId: "v4", name: "pvc-orphan", sizeBytes: MiB, capabilities: [cap] });
  assert.notEqual(again.uuid, orphan);
  assert.ok((await readdir(poolDir())).includes(`${again.imageName}.img`));
});
