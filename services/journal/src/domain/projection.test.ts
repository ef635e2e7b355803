/**
 * The record fold (given events, when folded, then the record) and the Redis mutations derived
 * from the same record changes.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { JournalEvent, StoredEvent } from "@csi/contracts";
import { keysFor } from "./kinds.js";
import { foldRecord, type Mutation, mutationsFor } from "./projection.js";
import { isLive, snapshotFromHash, volumeFromHash, volumeView } from "./records.js";

const U = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const SRC = "4f2b2a52-0d4e-4a43-9d0c-6a1cb0ad5f10";
const meta = { v: 1 as const, requestId: "r", actor: { service: "journal", replica: "t" } };
let seq = 0;
const at = (time: string, e: Record<string, unknown>): StoredEvent => ({ seq: ++seq, subject: "s", event: { ...meta, time, ...e } as JournalEvent });

/** A volume's reservation at `time`, with `more` fields. */
const volReserved = (time: string, more: Record<string, unknown> = {}) =>
  at(time, {
    type: "VolumeReserved",
    uuid: U,
    name: "pvc",
    instance: "default",
    pool: "default",
    poolId: 1,
    imageName: `csi-vol-${U}`,
    sizeBytes: 1048576,
    digest: "d",
    parameters: {},
    capabilities: [],
    ...more,
  });

const snapReserved = at("2026-01-01T00:00:00.000Z", {
  type: "SnapshotReserved",
  uuid: U,
  name: "snap",
  instance: "default",
  sourceUuid: SRC,
  pool: "fast",
  poolId: 2,
  imageName: `csi-snap-${U}`,
  digest: "d",
});
const snapCreated = at("2026-01-01T00:00:05.000Z", { type: "SnapshotCreated", uuid: U, imageId: "ab", sizeBytes: 4096 });

test("fold: given a snapshot reserved, when it is created later, then its createdAt is the cut's time", () => {
  const h = foldRecord("snapshot", U, undefined, [snapReserved, snapCreated]);
  assert.ok(isLive(h));
  const r = snapshotFromHash(U, h);
  assert.equal(r.createdAt, "2026-01-01T00:00:05.000Z");
  assert.deepEqual([r.imageId, r.sizeBytes, r.pool, r.poolId, r.sourceUuid, r.seq], ["ab", 4096, "fast", 2, SRC, snapCreated.seq]);
});

test("fold: given a reserved snapshot read from Redis, when only the *Created event is folded, then the same record", () => {
  const reservedOnly = foldRecord("snapshot", U, undefined, [snapReserved]);
  assert.deepEqual(foldRecord("snapshot", U, reservedOnly, [snapCreated]), foldRecord("snapshot", U, undefined, [snapReserved, snapCreated]));
});

test("fold: given events of other aggregates or already applied, then they change nothing", () => {
  const h = foldRecord("snapshot", U, undefined, [snapReserved, snapCreated]);
  const other = at("2026-01-01T00:00:06.000Z", { type: "SnapshotCreated", uuid: SRC, imageId: "cd", sizeBytes: 1 });
  assert.deepEqual(foldRecord("snapshot", U, h, [other, snapReserved]), h);
  assert.equal(foldRecord("volume", U, undefined, [snapReserved]), undefined);
});

test("fold: given a volume, when claimed, unclaimed, expanded and deleted, then the claims, size and tombstone follow", () => {
  const reserved = volReserved("2026-01-02T00:00:00.000Z", { parameters: { a: "b" }, source: { kind: "snapshot", uuid: SRC } });
  const claim = { type: "VolumeClaimed", uuid: U, nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false };
  const evs = [
    reserved,
    at("t", { type: "VolumeCreated", uuid: U, imageId: "1", sizeBytes: 1048576 }),
    at("t", claim),
    at("t", { type: "VolumeExpanded", uuid: U, sizeBytes: 2097152 }),
  ];
  const h = foldRecord("volume", U, undefined, evs);
  assert.ok(isLive(h));
  const v = volumeFromHash(U, h);
  assert.deepEqual(
    [v.sizeBytes, v.claims.map((c) => c.nodeId), v.parameters, v.source, v.createdAt],
    [2097152, ["n1"], { a: "b" }, { kind: "snapshot", uuid: SRC }, reserved.event.time],
  );
  const unclaimed = foldRecord("volume", U, h, [at("t", { type: "VolumeUnclaimed", uuid: U, nodeId: "n1" })]);
  assert.ok(isLive(unclaimed));
  assert.deepEqual(volumeFromHash(U, unclaimed).claims, []);
  const gone = foldRecord("volume", U, unclaimed, [at("t", { type: "VolumeDeleted", uuid: U })]);
  assert.equal(isLive(gone), false);
});

test("mutations: the projection writes the fields the fold computes, guarded by the aggregate's sequence", () => {
  const k = keysFor("c1", "default");
  const [reserve, create] = mutationsFor(k, [snapReserved, snapCreated]);
  const key = k.record("snapshot", U);
  assert.deepEqual(reserve?.guard, [key, "_seq"]);
  const hset = (m: Mutation | undefined) => m?.ops.find((o) => o[0] === "HSET") ?? [];
  const written: Record<string, string> = {};
  for (const m of [reserve, create]) {
    const [, , ...kv] = hset(m);
    for (let i = 0; i + 1 < kv.length; i += 2) written[String(kv[i])] = String(kv[i + 1]);
  }
  const { _seq, ...folded } = foldRecord("snapshot", U, undefined, [snapReserved, snapCreated]) ?? {};
  assert.deepEqual(written, folded);
  assert.ok(
    reserve?.ops.some((o) => o[0] === "ZADD" && o[1] === k.snapsOf(SRC)),
    "indexed by its source volume",
  );
  const [undone] = mutationsFor(k, [at("t", { type: "ReservationUndone", kind: "snapshot", uuid: U, reason: "x" })]);
  assert.equal(undone?.ops[0]?.[0], "SNAPINDEXREM", "a snapshot leaves its source's index");
});

test("fold: given a volume reserved with or without limits, when modified, then the limits in force follow", () => {
  const plain = foldRecord("volume", U, undefined, [volReserved("2026-01-03T00:00:00.000Z")]) ?? {};
  assert.equal(plain["csi.mutable"], undefined, "a volume reserved without limits has none");
  assert.deepEqual(volumeFromHash(U, plain).mutableParameters, {});
  let h = foldRecord("volume", U, undefined, [volReserved("2026-01-03T00:00:00.000Z", { mutableParameters: { readIOPS: "5" } })]) ?? {};
  assert.deepEqual(volumeFromHash(U, h).mutableParameters, { readIOPS: "5" });
  h = foldRecord("volume", U, h, [at("t", { type: "VolumeModified", uuid: U, mutableParameters: { writeIOPS: "100" } })]) ?? {};
  assert.deepEqual(volumeFromHash(U, h).mutableParameters, { writeIOPS: "100" }, "a modification replaces the whole set");
  assert.deepEqual(volumeView(volumeFromHash(U, h)).mutableParameters, { writeIOPS: "100" });
  const k = keysFor("c1", "default");
  assert.deepEqual(
    mutationsFor(k, [at("t", { type: "VolumeModified", uuid: U, mutableParameters: {} })])[0]?.guard,
    [k.record("volume", U), "_seq"],
    "guarded like every volume event",
  );
});
