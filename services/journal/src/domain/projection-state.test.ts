/**
 * When a projection may be served, and the in-memory projection the start-up check compares
 * Redis with: the same mutations the Lua applier runs, the same guards, the same keys.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { JournalEvent, StoredEvent } from "@csi/contracts";
import { keysFor } from "./kinds.js";
import { foldRecord, mutationsFor } from "./projection.js";
import { diffProjection, judgeProjection, metaFromHash, ProjectionModel, type Stored } from "./projection-state.js";

const EPOCH = "0123456789abcdef0123456789abcdef";
const LOG = { id: "2026-01-01T00:00:00.000Z", last: 40 };
const complete = { epoch: EPOCH, log: LOG.id, applied: 30, complete: true };

test("judge: a complete projection of this log, at or behind its end, is served; anything else is rebuilt", () => {
  const table: [string, Parameters<typeof judgeProjection>[0], string | true][] = [
    ["complete, behind the log (catch-up applies the rest)", complete, true],
    ["complete, at the log's end", { ...complete, applied: 40 }, true],
    ["flushed", undefined, "missing"],
    ["a rebuild cut in half", { ...complete, complete: false }, "incomplete"],
    ["made before epochs existed", { applied: 30, complete: true }, "no valid epoch"],
    ["a malformed epoch", { ...complete, epoch: "x" }, "no valid epoch"],
    ["replayed from a stream since recreated", { ...complete, log: "2025-01-01T00:00:00.000Z" }, "built from another log"],
    ["ahead of the log", { ...complete, applied: 41 }, "watermark ahead of the log"],
    ["a garbled watermark", { ...complete, applied: Number.NaN }, "invalid watermark"],
  ];
  for (const [what, meta, want] of table) {
    const j = judgeProjection(meta, LOG);
    assert.deepEqual(j, want === true ? { ok: true } : { ok: false, reason: want }, what);
  }
});

test("meta: read from the Redis hash; an empty hash is no projection", () => {
  assert.equal(metaFromHash({}), undefined);
  assert.equal(metaFromHash(undefined), undefined);
  assert.deepEqual(metaFromHash({ epoch: EPOCH, log: LOG.id, applied: "7", complete: "1" }), { epoch: EPOCH, log: LOG.id, applied: 7, complete: true });
  assert.deepEqual(metaFromHash({ epoch: EPOCH, applied: "0" }), { epoch: EPOCH, applied: 0, complete: false });
});

const U = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const S = "4f2b2a52-0d4e-4a43-9d0c-6a1cb0ad5f10";
const k = keysFor("c1", "default");
const meta = { v: 1 as const, requestId: "r", actor: { service: "journal", replica: "t" }, time: "2026-01-01T00:00:00.000Z" };
let seq = 0;
const ev = (e: Record<string, unknown>): StoredEvent => ({ seq: ++seq, subject: "s", event: { ...meta, ...e } as JournalEvent });
const base = { instance: "default", pool: "default", poolId: 1, digest: "d" };

const history = [
  ev({ type: "NameReserved", kind: "volume", name: "pvc", uuid: U }),
  ev({ type: "VolumeReserved", uuid: U, name: "pvc", imageName: `csi-vol-${U}`, sizeBytes: 1048576, parameters: {}, capabilities: [], ...base }),
  ev({ type: "VolumeCreated", uuid: U, imageId: "1", sizeBytes: 1048576 }),
  ev({ type: "VolumeClaimed", uuid: U, nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }),
  ev({ type: "NameReserved", kind: "snapshot", name: "snap", uuid: S }),
  ev({ type: "SnapshotReserved", uuid: S, name: "snap", sourceUuid: U, imageName: `csi-snap-${S}`, ...base }),
  ev({ type: "SnapshotCreated", uuid: S, imageId: "2", sizeBytes: 1048576 }),
];
const ending = [
  ev({ type: "SnapshotDeleted", uuid: S }),
  ev({ type: "NameReleased", kind: "snapshot", name: "snap", uuid: S }),
  ev({ type: "VolumeUnclaimed", uuid: U, nodeId: "n1" }),
];

const modelOf = (...batches: StoredEvent[][]) => {
  const m = new ProjectionModel();
  for (const b of batches) m.apply(mutationsFor(k, b));
  return m.dump();
};

test("model: the keys a volume, a claim and a snapshot of it leave, with the fold's record", () => {
  const dump = modelOf(history);
  assert.deepEqual(
    [...dump.keys()].sort(),
    [
      k.dir("snapshot"),
      k.dirSeq("snapshot"),
      k.dir("volume"),
      k.dirSeq("volume"),
      k.index("snapshot"),
      k.snapsOf(U),
      k.index("volume"),
      k.nodeClaims("n1"),
      k.record("snapshot", S),
      k.record("volume", U),
    ].sort(),
  );
  assert.deepEqual(dump.get(k.record("volume", U)), { hash: foldRecord("volume", U, undefined, history) });
  assert.deepEqual(dump.get(k.dir("volume")), { hash: { "csi.volume.pvc": U } });
  assert.deepEqual(dump.get(k.nodeClaims("n1")), { members: [U] });
});

test("model: ends leave tombstones and take members out of indexes; empty sets and hashes disappear", () => {
  const dump = modelOf(history, ending);
  assert.deepEqual(dump.get(k.record("snapshot", S)), { hash: { _gone: "1", _seq: String(ending[0]?.seq) } });
  for (const gone of [k.snapsOf(U), k.index("snapshot"), k.nodeClaims("n1"), k.dir("snapshot")]) assert.equal(dump.has(gone), false, gone);
  assert.deepEqual(dump.get(k.dirSeq("snapshot")), { hash: { snap: String(ending[1]?.seq) } }, "the name's fence stays");
});

test("model: applying is idempotent and an older event after a newer one changes nothing (the Lua guard)", () => {
  const once = modelOf(history, ending);
  assert.deepEqual(modelOf(history, ending, history, ending), once);
  assert.deepEqual(modelOf(history, ending, [history[1] as StoredEvent]), once);
});

test("diff: a record removed or changed by hand is found; tombstones and member order are not compared", () => {
  const want = modelOf(history, ending);
  const have = new Map<string, Stored>(want);
  assert.deepEqual(diffProjection(want, have), []);
  have.delete(k.record("snapshot", S)); // a tombstone that expired
  have.set(k.index("volume"), { members: [U] });
  assert.deepEqual(diffProjection(want, have), []);
  have.delete(k.record("volume", U));
  have.set(k.dir("volume"), { hash: { "csi.volume.pvc": S } });
  have.set(`${k.prefix}csi.volume.stray`, { hash: { "csi.volname": "x", _seq: "1" } });
  assert.deepEqual(diffProjection(want, have), [k.dir("volume"), `${k.prefix}csi.volume.stray`, k.record("volume", U)].sort());
  assert.deepEqual(diffProjection(want, have, [k.dir("volume")]), [k.dir("volume")], "only the keys asked about");
  have.set(k.record("volume", U), { hash: { _gone: "1", _seq: "99" } });
  assert.ok(diffProjection(want, have).includes(k.record("volume", U)), "a tombstone where the log has a live record");
});
