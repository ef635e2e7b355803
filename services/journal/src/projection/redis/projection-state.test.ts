/**
 * When a projection may be served; the Lua applier's model (ends, tombstones, empty keys); the
 * key-by-key comparison the start-up check and verify make, and its differences named in the
 * port's words (addresses, indexes).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { events, SNAP, VOL } from "../../../test-support/fixtures.js";
import { foldInto } from "../../fold/evolve.js";
import { differenceName } from "../port.js";
import { keysFor } from "./layout.js";
import { differencesAt, diffProjection, judgeProjection, metaFromHash, ProjectionModel, type Stored } from "./projection-state.js";
import { planWrites, projectionOf } from "./writes.js";

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

const k = keysFor("c1", "default");

test("model: ends leave tombstones and take members out of indexes; empty sets and hashes disappear", () => {
  const e = events();
  const evs = [
    e.nameReserved("volume", "pvc", VOL),
    e.volReserved(),
    e.volCreated(),
    e.claimed("n1"),
    e.nameReserved("snapshot", "snap", SNAP),
    e.snapReserved(),
    e.snapCreated(),
  ];
  const ending = [e.at({ type: "SnapshotDeleted", uuid: SNAP }), e.nameReleased("snapshot", "snap", SNAP), e.unclaimed("n1")];
  const m = new ProjectionModel();
  m.apply(planWrites(k, () => undefined, evs).mutations);
  const known = foldInto(new Map(), evs);
  m.apply(planWrites(k, (key) => known.get(key), ending).mutations);
  const dump = m.dump();
  assert.deepEqual(dump.get(k.record("snapshot", SNAP)), { hash: { _gone: "1", _seq: String(ending[0]?.seq) } });
  for (const gone of [k.snapsOf(VOL), k.index("snapshot"), k.nodeClaims("n1"), k.dir("snapshot")]) assert.equal(dump.has(gone), false, gone);
  assert.deepEqual(dump.get(k.dirSeq("snapshot")), { hash: { snap: String(ending[1]?.seq) } }, "the name's fence stays");
  assert.deepEqual(dump.get(k.dir("volume")), { hash: { "csi.volume.pvc": VOL } });
});

test("diff: a record removed or changed by hand is found; tombstones and member order are not compared", () => {
  const e = events();
  const evs = [e.nameReserved("volume", "pvc", VOL), e.volReserved(), e.volCreated(), e.snapReserved(), e.at({ type: "SnapshotDeleted", uuid: SNAP })];
  const want = projectionOf(k, foldInto(new Map(), evs).values());
  const have = new Map<string, Stored>(want);
  assert.deepEqual(diffProjection(want, have), []);
  have.set(k.record("snapshot", SNAP), { hash: { _gone: "1", _seq: "5" } }); // a tombstone (not compared)
  have.set(k.index("volume"), { members: [VOL] });
  assert.deepEqual(diffProjection(want, have), []);
  have.delete(k.record("volume", VOL));
  have.set(k.dir("volume"), { hash: { "csi.volume.pvc": SNAP } });
  have.set(`${k.prefix}csi.volume.stray`, { hash: { "csi.volname": "x", _seq: "1" } });
  assert.deepEqual(diffProjection(want, have), [k.dir("volume"), `${k.prefix}csi.volume.stray`, k.record("volume", VOL)].sort());
  assert.deepEqual(diffProjection(want, have, [k.dir("volume")]), [k.dir("volume")], "only the keys asked about");
  have.set(k.record("volume", VOL), { hash: { _gone: "1", _seq: "99" } });
  assert.ok(diffProjection(want, have).includes(k.record("volume", VOL)), "a tombstone where the log has a live record");
});

test("differences in the port's words: a key changed by hand names the aggregates it holds, an index's member the aggregate it lists; keys of no layout are none", () => {
  const e = events();
  const evs = [e.nameReserved("volume", "pvc", VOL), e.volReserved(), e.volCreated(), e.claimed("n1"), e.snapReserved(), e.snapCreated()];
  const want = projectionOf(k, foldInto(new Map(), evs).values());
  const have = new Map<string, Stored>(want);
  const all = () => differencesAt(k, want, have, new Set([...want.keys(), ...have.keys()]));
  assert.deepEqual(all(), []);
  have.set(k.dir("volume"), { hash: { "csi.volume.pvc": SNAP, "csi.volume.other": VOL } });
  have.set(k.nodeClaims("n1.example"), { members: [VOL] });
  have.delete(k.snapsOf(VOL));
  have.set(`${k.prefix}csi.unknown`, { hash: { x: "1" } });
  assert.deepEqual(all().map(differenceName), [
    "name:volume:other",
    "name:volume:pvc",
    `snapshot:${SNAP} in the snapshots of volume ${VOL}`,
    `volume:${VOL} in the claims of node n1.example`,
  ]);
  assert.deepEqual(
    differencesAt(k, want, have, [k.nodeClaims("n1.example")]),
    [{ address: { kind: "volume", uuid: VOL }, index: { claimsOf: "n1.example" } }],
    "only the keys asked about",
  );
  have.set(k.record("volume", VOL), { hash: { _gone: "1", _seq: "99" } });
  assert.ok(
    all().some((d) => differenceName(d) === `volume:${VOL}`),
    "a tombstone where the log has a live record",
  );
});
