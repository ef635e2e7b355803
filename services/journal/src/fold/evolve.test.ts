/**
 * evolve, as specifications: given these events, when this one, expect this state. Every event
 * type of packages/contracts/src/events.ts has its case (the last test checks that).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { JournalEvent, type StoredEvent } from "@csi/contracts";
import { events, GRP, SNAP, T0, VOL } from "../../test-support/fixtures.js";
import { type Aggregate, addressKey, addressOf, endsAggregate, evolve, foldInto, foldOne, type States, statusOf } from "./evolve.js";

const T1 = "2026-01-01T00:00:05.000Z";

/** given(events).when(event).expect(state of the event's aggregate) */
function given(history: StoredEvent[]) {
  return {
    when(e: StoredEvent) {
      const a = addressOf(e.event);
      const before = a ? foldOne(a, undefined, history) : undefined;
      const after = a ? evolve(before, e) : undefined;
      return {
        expect(check: (after: Aggregate | undefined, before: Aggregate | undefined) => void) {
          check(after, before);
        },
      };
    },
  };
}

const record = (s: Aggregate | undefined) => (s && s.kind !== "name" ? s.record : undefined) as Record<string, unknown> | undefined;

test("NameReserved: given nothing, the name points at the uuid", () => {
  const e = events();
  given([])
    .when(e.nameReserved("volume", "pvc", VOL))
    .expect((s) => assert.deepEqual(s, { kind: "name", of: "volume", name: "pvc", seq: 1, uuid: VOL }));
});

test("NameReleased: given the name points at the uuid, it points nowhere; at another uuid, it stays", () => {
  const e = events();
  const reserved = e.nameReserved("volume", "pvc", VOL);
  given([reserved])
    .when(e.nameReleased("volume", "pvc", VOL))
    .expect((s) => assert.deepEqual(s, { kind: "name", of: "volume", name: "pvc", seq: 2 }));
  given([reserved])
    .when(e.nameReleased("volume", "pvc", SNAP))
    .expect((s) => assert.deepEqual(s, { kind: "name", of: "volume", name: "pvc", seq: 3, uuid: VOL }));
});

test("VolumeReserved: given nothing, a reserved volume (no image id, created at the reservation, no claims)", () => {
  const e = events();
  given([])
    .when(e.volReserved({ parameters: { a: "b" }, source: { kind: "snapshot", uuid: SNAP }, mutableParameters: { readIOPS: "5" } }))
    .expect((s) => {
      assert.equal(s?.kind, "volume");
      assert.deepEqual(record(s), {
        uuid: VOL,
        name: "pvc",
        pool: "default",
        poolId: 1,
        digest: "d",
        createdAt: T0,
        seq: 1,
        imageName: `csi-vol-${VOL}`,
        imageId: "",
        sizeBytes: 1048576,
        parameters: { a: "b" },
        capabilities: [],
        source: { kind: "snapshot", uuid: SNAP },
        claims: [],
        mutableParameters: { readIOPS: "5" },
      });
      assert.equal(statusOf(s as never), "reserved");
    });
});

test("VolumeCreated: given a reservation, the image id and size are set, the creation time stays the reservation's", () => {
  const e = events();
  given([e.volReserved()])
    .when(e.volCreated(T1))
    .expect((s) => {
      assert.deepEqual([record(s)?.imageId, record(s)?.sizeBytes, record(s)?.createdAt, record(s)?.seq, s?.seq], ["1a", 1048576, T0, 2, 2]);
      assert.equal(statusOf(s as never), "ready");
    });
});

test("VolumeExpanded and VolumeModified: the size, the whole set of limits", () => {
  const e = events();
  const made = [e.volReserved({ mutableParameters: { readIOPS: "5" } }), e.volCreated()];
  given(made)
    .when(e.at({ type: "VolumeExpanded", uuid: VOL, sizeBytes: 2097152 }))
    .expect((s) => assert.equal(record(s)?.sizeBytes, 2097152));
  given(made)
    .when(e.at({ type: "VolumeModified", uuid: VOL, mutableParameters: { writeIOPS: "100" } }))
    .expect((s) => assert.deepEqual(record(s)?.mutableParameters, { writeIOPS: "100" }));
});

test("VolumeClaimed / VolumeUnclaimed: claims by node, sorted; a re-claim replaces; unclaim removes only that node", () => {
  const e = events();
  const made = [e.volReserved(), e.volCreated(), e.claimed("n2")];
  given(made)
    .when(e.claimed("n1"))
    .expect((s) =>
      assert.deepEqual(
        ((record(s)?.claims ?? []) as { nodeId: string }[]).map((c) => c.nodeId),
        ["n1", "n2"],
      ),
    );
  given([...made, e.claimed("n1")])
    .when(e.unclaimed("n2"))
    .expect((s) => assert.deepEqual(record(s)?.claims, [{ nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }]));
});

test("VolumeDeleted, ReservationUndone, ReservationCollected: a tombstone with the end's sequence", () => {
  const e = events();
  const made = [e.volReserved(), e.volCreated()];
  for (const end of [
    e.at({ type: "VolumeDeleted", uuid: VOL }),
    e.at({ type: "ReservationUndone", kind: "volume", uuid: VOL, reason: "x" }),
    e.at({ type: "ReservationCollected", kind: "volume", uuid: VOL, reason: "gc" }),
  ]) {
    given(made)
      .when(end)
      .expect((s) => {
        assert.deepEqual(s, { kind: "volume", uuid: VOL, seq: end.seq });
        assert.equal(statusOf(s as never), "deleted");
        assert.ok(endsAggregate(end));
      });
  }
});

test("SnapshotReserved / SnapshotCreated: a snapshot's creation time is when it was cut (a completed crash too)", () => {
  const e = events();
  given([])
    .when(e.snapReserved({ groupSnapshotUuid: GRP }))
    .expect((s) => assert.deepEqual([record(s)?.sourceUuid, record(s)?.sizeBytes, record(s)?.groupSnapshotUuid, record(s)?.imageId], [VOL, 0, GRP, ""]));
  given([e.snapReserved()])
    .when(e.snapCreated(T1))
    .expect((s) => assert.deepEqual([record(s)?.imageId, record(s)?.createdAt, record(s)?.sizeBytes], ["2b", T1, 1048576]));
});

test("SnapshotDeleted: a tombstone", () => {
  const e = events();
  const made = [e.snapReserved(), e.snapCreated()];
  const end = e.at({ type: "SnapshotDeleted", uuid: SNAP });
  given(made)
    .when(end)
    .expect((s) => assert.deepEqual(s, { kind: "snapshot", uuid: SNAP, seq: end.seq }));
});

test("GroupSnapshotReserved / Created / Deleted: members, ready at the time its members were recorded, then a tombstone", () => {
  const e = events();
  given([])
    .when(e.groupReserved())
    .expect((s) => {
      assert.deepEqual([record(s)?.members, record(s)?.ready, record(s)?.createdAt], [[{ volumeUuid: VOL, snapshotUuid: SNAP }], false, T0]);
      assert.equal(statusOf(s as never), "reserved");
    });
  given([e.groupReserved()])
    .when(e.at({ type: "GroupSnapshotCreated", uuid: GRP }, T1))
    .expect((s) => {
      assert.deepEqual([record(s)?.ready, record(s)?.createdAt], [true, T1]);
      assert.equal(statusOf(s as never), "ready");
    });
  const reserved = e.groupReserved();
  const end = e.at({ type: "GroupSnapshotDeleted", uuid: GRP });
  given([reserved])
    .when(end)
    .expect((s) => assert.deepEqual(s, { kind: "groupsnapshot", uuid: GRP, seq: end.seq }));
});

test("DeviceStateReported and ImageLeakCollected change no aggregate", () => {
  const e = events();
  const reserved = e.volReserved();
  const report = e.at({ type: "DeviceStateReported", uuid: VOL, nodeId: "n1", state: "staged", via: "grpc", at: T0 });
  const leak = e.at({ type: "ImageLeakCollected", pool: "default", imageName: "x", imageId: "1", sizeBytes: 1, reason: "gc" });
  for (const x of [report, leak]) {
    assert.equal(addressOf(x.event), undefined);
    const states: States = new Map();
    foldInto(states, [reserved, x]);
    assert.equal(states.size, 1);
    const s = states.get(addressKey({ kind: "volume", uuid: VOL }));
    assert.ok(s && s.seq < x.seq, "the volume did not move");
  }
});

test("an event at or below the state's sequence changes nothing (idempotent); one on an unknown aggregate makes nothing up", () => {
  const e = events();
  const reserved = e.volReserved();
  const created = e.volCreated();
  const s = foldOne({ kind: "volume", uuid: VOL }, undefined, [reserved, created]);
  assert.equal(evolve(s, created), s);
  assert.equal(evolve(s, reserved), s);
  assert.equal(evolve(undefined, e.volCreated()), undefined);
  const gone = evolve(s, e.at({ type: "VolumeDeleted", uuid: VOL }));
  const late = e.volCreated();
  assert.deepEqual(evolve(gone, late), { kind: "volume", uuid: VOL, seq: late.seq }, "an ended volume stays ended");
});

// ------------------------------------------------------------------ foreign records (log/records.ts)

const VOLUME = { kind: "volume", uuid: VOL } as const;
const NAME = { kind: "name", of: "volume", name: "pvc" } as const;

test("a foreign record on a live volume's subject: the same record, its sequence (the fence) moved past the record", () => {
  const e = events();
  const s = foldOne(VOLUME, undefined, [e.volReserved(), e.volCreated()]);
  const garbage = e.foreign(VOLUME);
  const after = evolve(s, garbage);
  assert.equal(after?.seq, garbage.seq);
  assert.deepEqual(record(after), { ...record(s), seq: garbage.seq });
});

test("a foreign record on an ended volume's subject: still ended, its sequence moved", () => {
  const e = events();
  const gone = foldOne(VOLUME, undefined, [e.volReserved(), e.at({ type: "VolumeDeleted", uuid: VOL })]);
  const garbage = e.foreign(VOLUME, "unknown-type");
  assert.deepEqual(evolve(gone, garbage), { kind: "volume", uuid: VOL, seq: garbage.seq });
});

test("a foreign record on a volume subject never seen makes nothing up (its first event will expect a fresh uuid's 0)", () => {
  const e = events();
  assert.equal(evolve(undefined, e.foreign(VOLUME)), undefined);
  const states: States = new Map();
  foldInto(states, [e.foreign(VOLUME, "schema")]);
  assert.equal(states.size, 0);
});

test("a foreign record on a request name's subject: the name keeps what it points at, its sequence moves; a name never seen gets one", () => {
  const e = events();
  const reserved = e.nameReserved("volume", "pvc", VOL);
  const g1 = e.foreign(NAME);
  assert.deepEqual(evolve(foldOne(NAME, undefined, [reserved]), g1), { kind: "name", of: "volume", name: "pvc", seq: g1.seq, uuid: VOL });
  const g2 = e.foreign(NAME, "wrong-subject");
  assert.deepEqual(evolve(undefined, g2), { kind: "name", of: "volume", name: "pvc", seq: g2.seq }, "free, on the subject's last sequence");
  // The next reservation of the name (expecting g2's sequence) starts it afresh.
  const again = e.nameReserved("volume", "pvc", SNAP);
  assert.deepEqual(evolve(evolve(undefined, g2), again), { kind: "name", of: "volume", name: "pvc", seq: again.seq, uuid: SNAP });
});

test("a foreign record on no aggregate's subject (device, pool, anything else) changes nothing; one at or below the sequence neither", () => {
  const e = events();
  const garbage = e.foreign();
  const s = foldOne(VOLUME, undefined, [e.volReserved(), e.volCreated()]);
  assert.equal(evolve(s, garbage), s);
  const states: States = new Map();
  foldInto(states, [e.foreign()]);
  assert.equal(states.size, 0);
  const late = foldOne(VOLUME, undefined, [e.volReserved(), e.volCreated()]);
  assert.equal(evolve(late, garbage), late, "older than the state: applied already");
});

test("a fold over a log with foreign records gives the records of the log without them, every fence on its subject's last sequence", () => {
  const e = events();
  const log = [e.nameReserved("volume", "pvc", VOL), e.foreign(NAME), e.volReserved(), e.foreign(VOLUME), e.volCreated(), e.foreign(VOLUME), e.foreign()];
  const clean = foldInto(
    new Map(),
    log.filter((r) => !("foreign" in r)),
  );
  const dirty = foldInto(new Map(), log);
  assert.deepEqual(record(dirty.get(addressKey(VOLUME))), { ...record(clean.get(addressKey(VOLUME))), seq: 6 });
  assert.equal(dirty.get(addressKey(NAME))?.seq, 2);
  assert.equal((dirty.get(addressKey(NAME)) as { uuid?: string }).uuid, VOL);
});

test("every event type of the contract has a case above", async () => {
  const types = JournalEvent.options.map((o) => o.shape.type.value);
  const src = await import("node:fs/promises").then((fs) => fs.readFile(new URL(import.meta.url), "utf8"));
  for (const t of types) assert.ok(src.includes(`${t}:`) || src.includes(`${t} `) || src.includes(`"${t}"`), `no specification for ${t}`);
});
