/**
 * The projection as a function of the fold: the hashes records map to (and back), and the
 * writes planned from before/after states, run through the Lua applier's model, leave exactly
 * `projectionOf` the fold — however the log is cut into batches, whatever state between the
 * two Redis holds, and however often a batch is applied again.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { StoredEvent } from "@csi/contracts";
import { events, GRP, SNAP, T0, VOL } from "../../../test-support/fixtures.js";
import { type Aggregate, addressKey, beforesNeeded, foldInto, foldOne, liveRecord, type States } from "../../fold/evolve.js";
import type { LogRecord } from "../../log/records.js";
import { groupFromHash, groupHash, snapshotFromHash, snapshotHash, stateFromHash, volumeFromHash, volumeHash } from "./hash.js";
import { keysFor } from "./layout.js";
import { diffProjection, ProjectionModel, type Stored } from "./projection-state.js";
import { freshWrites, type Mutation, planWrites, projectionOf } from "./writes.js";

const k = keysFor("c1", "default");
const T1 = "2026-01-01T00:00:05.000Z";

/** A whole life: a volume claimed twice, a snapshot, a group, names reserved and released, ends. */
function life(): StoredEvent[] {
  const e = events();
  return [
    e.nameReserved("volume", "pvc", VOL),
    e.volReserved({ parameters: { a: "b" }, mutableParameters: { readIOPS: "5" } }),
    e.volCreated(),
    e.claimed("n1"),
    e.at({ type: "VolumeExpanded", uuid: VOL, sizeBytes: 2097152 }),
    e.claimed("n2"),
    e.unclaimed("n1"),
    e.nameReserved("snapshot", "snap", SNAP),
    e.snapReserved(),
    e.snapCreated(T1),
    e.at({ type: "DeviceStateReported", uuid: VOL, nodeId: "n2", state: "staged", via: "grpc", at: T0 }),
    e.nameReserved("groupsnapshot", "grp", GRP),
    e.groupReserved(),
    e.at({ type: "GroupSnapshotCreated", uuid: GRP }),
    e.at({ type: "VolumeModified", uuid: VOL, mutableParameters: {} }),
    e.at({ type: "GroupSnapshotDeleted", uuid: GRP }),
    e.nameReleased("groupsnapshot", "grp", GRP),
    e.at({ type: "SnapshotDeleted", uuid: SNAP }),
    e.nameReleased("snapshot", "snap", SNAP),
    e.unclaimed("n2"),
    e.at({ type: "ReservationCollected", kind: "volume", uuid: VOL, reason: "gc" }),
    e.nameReleased("volume", "pvc", VOL),
  ];
}

/**
 * The same life with foreign records among its events (log/records.ts): on the volume's, the
 * snapshot's and the names' subjects (they move those fences), on no aggregate's, and last.
 */
function lifeWithGarbage(): LogRecord[] {
  const e = events(1000);
  const vol = { kind: "volume", uuid: VOL } as const;
  const name = { kind: "name", of: "volume", name: "pvc" } as const;
  const out: LogRecord[] = [];
  life().forEach((ev, i) => {
    out.push(ev);
    if (i % 4 === 1) out.push(e.foreign(vol));
    if (i % 5 === 2) out.push(e.foreign(name, "unknown-type"));
    if (i === 9) out.push(e.foreign({ kind: "snapshot", uuid: SNAP }, "wrong-subject"), e.foreign());
  });
  out.push(e.foreign({ kind: "name", of: "snapshot", name: "never" }), e.foreign(vol));
  // Sequences in log order, as the stream assigns them.
  return out.map((r, i) => ({ ...r, seq: i + 1 }));
}

const fold = (evs: LogRecord[]) => foldInto(new Map(), evs);

/** The model's keys, the way Redis's HGETALL would hand one aggregate back (the catch-up's read). */
function readFromModel(model: ProjectionModel, a: Aggregate | { kind: string; uuid: string }): Aggregate | undefined {
  const dump = model.dump();
  if (a.kind === "name") throw new Error("names are read field by field");
  const kind = a.kind as "volume" | "snapshot" | "groupsnapshot";
  const v = dump.get(k.record(kind, (a as { uuid: string }).uuid));
  return stateFromHash(kind, (a as { uuid: string }).uuid, v && "hash" in v ? v.hash : undefined) as Aggregate | undefined;
}

/** Replay `evs` in batches of `size` as the projector does (befores: the states it folded so far). */
function replay(model: ProjectionModel, evs: LogRecord[], size: number, known: States = new Map()): Mutation[][] {
  const plans: Mutation[][] = [];
  for (let i = 0; i < evs.length; i += size) {
    const batch = evs.slice(i, i + size);
    const plan = planWrites(k, (key) => known.get(key), batch);
    model.apply(plan.mutations);
    plans.push(plan.mutations);
    for (const [key, s] of plan.after) if (s) known.set(key, s);
  }
  return plans;
}

const live = (m: Map<string, Stored>) => new Map([...m].filter(([, v]) => !("hash" in v) || v.hash._gone !== "1"));

test("hash: every record maps to its hash and back unchanged", () => {
  const states = fold(life().slice(0, 14));
  const v = liveRecord(states.get(addressKey({ kind: "volume", uuid: VOL })), "volume");
  const s = liveRecord(states.get(addressKey({ kind: "snapshot", uuid: SNAP })), "snapshot");
  const g = liveRecord(states.get(addressKey({ kind: "groupsnapshot", uuid: GRP })), "groupsnapshot");
  assert.ok(v && s && g);
  assert.deepEqual(volumeFromHash(VOL, { ...volumeHash(v), _seq: String(v.seq) }), v);
  assert.deepEqual(snapshotFromHash(SNAP, { ...snapshotHash(s), _seq: String(s.seq) }), s);
  assert.deepEqual(groupFromHash(GRP, { ...groupHash(g), _seq: String(g.seq) }), g);
});

test("hash: the layout of a volume record is ceph-csi's omap fields, as before the fold", () => {
  const e = events();
  const s = foldOne({ kind: "volume", uuid: VOL }, undefined, [e.volReserved({ source: { kind: "snapshot", uuid: SNAP } }), e.volCreated(), e.claimed("n1")]);
  const v = liveRecord(s, "volume");
  assert.ok(v);
  assert.deepEqual(volumeHash(v), {
    "csi.volname": "pvc",
    "csi.pool": "default",
    "csi.poolid": "1",
    "csi.digest": "d",
    "csi.created": T0,
    "csi.imagename": `csi-vol-${VOL}`,
    "csi.imageid": "1a",
    "csi.size": "1048576",
    "csi.parameters": "{}",
    "csi.capabilities": "[]",
    "csi.source": JSON.stringify({ kind: "snapshot", uuid: SNAP }),
    "claim.n1": JSON.stringify({ nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }),
  });
});

test("plan: replayed in batches of any size, the writes leave exactly the projection of the fold (foreign records among the events too)", () => {
  for (const evs of [life(), lifeWithGarbage()]) {
    for (let cut = 1; cut <= evs.length; cut++) {
      for (let upTo = 1; upTo <= evs.length; upTo++) {
        const part = evs.slice(0, upTo);
        const model = new ProjectionModel();
        replay(model, part, cut);
        assert.deepEqual(diffProjection(projectionOf(k, fold(part).values()), live(model.dump())), [], `batches of ${cut}, up to ${upTo}`);
      }
    }
  }
});

test("plan: a foreign record on a name's subject writes the name's fence (its sequence field), nothing else", () => {
  const e = events();
  const reserved = e.nameReserved("volume", "pvc", VOL);
  const garbage = e.foreign({ kind: "name", of: "volume", name: "pvc" });
  const model = new ProjectionModel();
  replay(model, [reserved, garbage], 1);
  const seqs = model.dump().get(k.dirSeq("volume"));
  const dir = model.dump().get(k.dir("volume"));
  assert.deepEqual(seqs && "hash" in seqs ? seqs.hash : undefined, { pvc: String(garbage.seq) });
  assert.deepEqual(dir && "hash" in dir ? dir.hash : undefined, { [k.dirField("volume", "pvc")]: VOL });
});

test("plan: a catch-up that reads its befores from Redis (not a cache) leaves the same", () => {
  for (const evs of [life(), lifeWithGarbage()]) catchUpFromEveryWatermark(evs);
});

function catchUpFromEveryWatermark(evs: LogRecord[]) {
  for (let w = 0; w < evs.length; w++) {
    const model = new ProjectionModel();
    replay(model, evs.slice(0, w), 3);
    // Catch up from the watermark w: record befores read from the model, names from the fold (their fields).
    const rest = evs.slice(w);
    const needed = beforesNeeded(rest, new Map());
    const foldedSoFar = fold(evs.slice(0, w));
    const known: States = new Map();
    for (const a of needed) {
      const s = a.kind === "name" ? foldedSoFar.get(addressKey(a)) : readFromModel(model, a);
      if (s) known.set(addressKey(a), s);
    }
    replay(model, rest, 4, known);
    assert.deepEqual(diffProjection(projectionOf(k, fold(evs).values()), live(model.dump())), [], `from ${w}`);
  }
}

test("plan: applying again, or an older batch after newer ones, changes nothing (the guard)", () => {
  const evs = life();
  const model = new ProjectionModel();
  const plans = replay(model, evs, 5);
  const once = model.dump();
  for (const p of plans) model.apply(p);
  model.apply(plans[1] ?? []);
  assert.deepEqual(model.dump(), once);
});

test("plan: Redis between the before and the after — a claim added then released leaves no node entry behind", () => {
  const e = events();
  const made = [e.volReserved(), e.volCreated()];
  const claim = e.claimed("n1");
  const release = e.unclaimed("n1");
  const model = new ProjectionModel();
  replay(model, made, 10);
  const before = fold(made);
  replay(model, [claim], 10, new Map(before)); // a writer applied the claim
  // A catch-up planned from the state before the claim applies both as one write.
  model.apply(planWrites(k, (key) => before.get(key), [claim, release]).mutations);
  assert.equal(model.dump().has(k.nodeClaims("n1")), false);
  assert.deepEqual(diffProjection(projectionOf(k, fold([...made, claim, release]).values()), live(model.dump())), []);
});

test("plan: only aggregates whose first event does not start them afresh need a before", () => {
  const e = events();
  const evs = [e.nameReserved("volume", "pvc", VOL), e.volReserved(), e.volCreated(), e.snapCreated(), e.nameReleased("snapshot", "snap", SNAP)];
  assert.deepEqual(beforesNeeded(evs, new Map()), [
    { kind: "snapshot", uuid: SNAP },
    { kind: "name", of: "snapshot", name: "snap" },
  ]);
  assert.deepEqual(beforesNeeded(evs, new Map([[addressKey({ kind: "snapshot", uuid: SNAP }), undefined]])), [{ kind: "name", of: "snapshot", name: "snap" }]);
});

test("a reply and the projection agree: a snapshot completed from its reserved record shows its cut time both ways", () => {
  const e = events();
  const reserved = e.snapReserved({}, T0);
  const model = new ProjectionModel();
  replay(model, [reserved], 1);
  // The writer read the reserved record under the lock, then appended SnapshotCreated ("complete").
  const read = readFromModel(model, { kind: "snapshot", uuid: SNAP });
  const created = e.snapCreated(T1);
  const reply = liveRecord(foldOne({ kind: "snapshot", uuid: SNAP }, read, [created]), "snapshot");
  model.apply(planWrites(k, () => read, [created]).mutations);
  const stored = model.dump().get(k.record("snapshot", SNAP));
  assert.ok(reply && stored && "hash" in stored);
  assert.equal(reply.createdAt, T1);
  assert.equal(stored.hash["csi.created"], T1);
  assert.deepEqual(snapshotFromHash(SNAP, stored.hash), reply);
});

const OTHER = "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";

/** Two lives (one ends, one goes on: OTHER, claimed on n1), so shared keys (names, indexes, a node's claims) get several entries. */
function twoLives() {
  const e = events(100);
  const log = [
    ...lifeWithGarbage(),
    e.nameReserved("volume", "pvc-2", OTHER),
    e.volReserved({ uuid: OTHER, name: "pvc-2", imageName: `csi-vol-${OTHER}` }),
    e.at({ type: "VolumeClaimed", uuid: OTHER, nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }),
  ];
  return { e, log };
}

test("fresh writes (a rebuild's, into a wiped projection) leave exactly the projection of the fold, guards and tombstones included", () => {
  const { e, log } = twoLives();
  const states = fold(log);
  const model = new ProjectionModel();
  model.run(freshWrites(k, states.values()));
  assert.deepEqual(diffProjection(projectionOf(k, states.values()), model.dump()), []);
  const dump = model.dump();
  const tomb = dump.get(k.record("volume", VOL));
  assert.deepEqual(
    tomb && "hash" in tomb ? tomb.hash : undefined,
    { _seq: String(states.get(addressKey({ kind: "volume", uuid: VOL }))?.seq), _gone: "1" },
    "the ended volume leaves its tombstone",
  );
  const live = dump.get(k.record("volume", OTHER));
  assert.equal(live && "hash" in live ? live.hash._seq : undefined, String(e.seq), "a live record carries its guard (its last event)");
  // The guards hold: the batches the projector replays over it again change nothing.
  model.apply(planWrites(k, () => undefined, log).mutations);
  assert.deepEqual(diffProjection(projectionOf(k, states.values()), model.dump()), []);
});

test("a rebuild that writes while it reads: aggregates written, changed, written again leave exactly the projection of the whole fold", () => {
  const { e, log } = twoLives();
  log.push(e.at({ type: "VolumeUnclaimed", uuid: OTHER, nodeId: "n1" }));
  const final = fold(log);
  // Every way of writing: after each record, a pseudo-random part of what changed since it was last written.
  for (let seed = 1; seed <= 200; seed++) {
    let r = seed;
    const coin = () => {
      r = (r * 1103515245 + 12345) % 2147483648;
      return r / 2147483648 < 0.4;
    };
    const states: States = new Map();
    const pending = new Map<string, Aggregate | null>();
    const model = new ProjectionModel();
    const write = (keys: string[]) => {
      const written = new Map<string, Aggregate>();
      for (const key of keys) {
        const was = pending.get(key);
        if (was) written.set(key, was);
        pending.delete(key);
      }
      model.run(
        freshWrites(
          k,
          keys.map((key) => states.get(key) as Aggregate),
          written,
        ),
      );
    };
    for (const rec of log) {
      const before = new Map(states);
      foldInto(states, [rec]);
      for (const [key, s] of states) {
        if (s === before.get(key)) continue;
        if (!pending.has(key)) pending.set(key, before.get(key) ?? null);
      }
      write([...pending.keys()].filter(coin));
    }
    write([...pending.keys()]);
    assert.deepEqual(diffProjection(projectionOf(k, final.values()), model.dump()), [], `seed ${seed}`);
  }
});
