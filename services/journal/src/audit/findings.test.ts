/** Audit, pure: replay to a point, what verify finds, what gc may do. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { events, SNAP, T0, VOL } from "../../test-support/fixtures.js";
import { addressKey, foldInto, type RecordState } from "../fold/evolve.js";
import { imageOwner } from "../fold/kinds.js";
import { pointOf, replayAt } from "../fold/replay.js";
import { foreignWhy, gcPlan, inspect, type LeakProof, mayCollect, mayRemoveImage, replayEntries, whyKeepLeak } from "./findings.js";

const T1 = "2026-01-01T00:00:05.000Z";
const T2 = "2026-01-01T00:00:09.000Z";
const img = (name: string) => ({ name, id: "1", sizeBytes: 1, readOnly: false });
const now = Date.parse("2026-01-01T02:00:00.000Z");

test("replay: up to a sequence, or the longest prefix not later than a time; entries by uuid", () => {
  const e = events();
  const log = [e.volReserved({}, T0), e.volCreated(T0), e.at({ type: "VolumeExpanded", uuid: VOL, sizeBytes: 2097152 }, T1), e.snapReserved({}, T2)];
  const bySeq = replayAt(log, { seq: 2 });
  assert.deepEqual(bySeq.upTo, { seq: 2, time: T0 });
  assert.equal(replayEntries(bySeq.states, {})[0]?.volume?.sizeBytes, 1048576);
  const byTime = replayAt(log, pointOf(T1));
  assert.equal(byTime.upTo.seq, 3);
  assert.deepEqual(
    replayEntries(byTime.states, {}).map((x) => [x.kind, x.volume?.sizeBytes]),
    [["volume", 2097152]],
  );
  const all = replayAt(log, { seq: 99 });
  assert.deepEqual(
    replayEntries(all.states, {}).map((x) => x.uuid),
    [VOL, SNAP].sort(),
  );
  assert.deepEqual(
    replayEntries(all.states, { after: [VOL, SNAP].sort()[0] }).map((x) => x.uuid),
    [[VOL, SNAP].sort()[1]],
  );
  assert.deepEqual(replayAt(log, { seq: 0 }).upTo, { seq: 0 });
});

test("verify: leaked images, orphaned (old) reservations, missing images, drift, stale claims", () => {
  const e = events();
  const states = foldInto(new Map(), [
    e.volReserved({}, "2026-01-01T00:00:00.000Z"), // reserved 2 h before `now`, no image: orphaned
    e.snapReserved({}, "2026-01-01T01:59:00.000Z"), // reserved a minute ago: too young
  ]);
  const base = { states, drift: ["{c}:csi.volume.x"], heartbeats: new Map(), now, olderThanMs: 3600_000 };
  const found = inspect({ ...base, images: new Map([["default", [img("stray")]]]) });
  assert.deepEqual(
    found.map((f) => f.type),
    ["leakedImage", "orphanedReservation", "projectionDrift"],
  );
  // Made, claimed by a node silent for longer than 3 heartbeats, its image gone.
  const made = foldInto(new Map(), [e.volReserved(), e.volCreated(), e.claimed("n1"), e.claimed("n2")]);
  const hb = new Map([
    ["n1", { time: new Date(now - 10_000).toISOString(), heartbeatMs: 1000 }],
    ["n2", { time: new Date(now - 1_000).toISOString(), heartbeatMs: 1000 }],
  ]);
  const found2 = inspect({ ...base, states: made, drift: [], heartbeats: hb, images: new Map([["default", []]]) });
  assert.deepEqual(
    found2.map((f) => [f.type, "nodeId" in f ? f.nodeId : ""]),
    [
      ["missingImage", ""],
      ["staleClaim", "n1"],
    ],
  );
  assert.deepEqual(inspect({ ...base, states: made, drift: [], heartbeats: hb, images: new Map() }).length, 1, "pools not listed are not judged");
});

test("gc: plans only leaked images and orphaned reservations; re-checks refuse live owners, claims, young or imaged reservations", () => {
  const e = events();
  const plan = gcPlan([
    { type: "leakedImage", pool: "default", imageName: `csi-vol-${VOL}`, imageId: "1", sizeBytes: 1 },
    { type: "missingImage", kind: "volume", uuid: VOL, name: "n", pool: "default", imageName: "x" },
    { type: "staleClaim", uuid: VOL, nodeId: "n1" },
  ]);
  assert.deepEqual(plan, [{ type: "removeLeakedImage", pool: "default", imageName: `csi-vol-${VOL}`, kind: "volume", uuid: VOL, outcome: "planned" }]);
  assert.deepEqual(imageOwner(`csi-snap-${SNAP}`), { kind: "snapshot", uuid: SNAP });
  assert.equal(imageOwner("left-by-hand"), undefined);
  assert.equal(imageOwner(`csi-vol-${VOL}x`), undefined);

  const live = foldInto(new Map(), [e.volReserved({}, T0), e.volCreated(), e.claimed()]).get(addressKey({ kind: "volume", uuid: VOL })) as RecordState;
  assert.match(mayRemoveImage(live, img("x")) ?? "", /owns it now/);
  assert.equal(mayRemoveImage(undefined, undefined), "the image is gone");
  // gc removes only with proof that the log never named the uuid: an ended volume's image is kept (reported).
  assert.match(mayRemoveImage({ kind: "volume", uuid: VOL, seq: 9 }, img("x")) ?? "", /the log names volume/, "an ended volume's image is kept");
  assert.equal(mayRemoveImage(undefined, img("x")), undefined, "a uuid the log never named: its image may go");

  const o = { now, olderThanMs: 3600_000 };
  const reserved = foldInto(new Map(), [e.volReserved({}, T0)]).get(addressKey({ kind: "volume", uuid: VOL })) as RecordState;
  assert.equal(mayCollect(reserved, o), undefined, "never recorded (its image never made, or made by a journal that died before recording it)");
  assert.equal(mayCollect(reserved, { now, olderThanMs: 3 * 3600_000 }), "it is younger than the threshold");
  assert.equal(mayCollect(live, o), "its image was made");
  assert.equal(mayCollect(undefined, o), "the reservation is gone");
});

test("verify on a pool whose images carry their owner (RBD): foreign images apart, leaked ones traced back, made-but-unrecorded reservations, trash, temporaries", () => {
  const e = events();
  const states = foldInto(new Map(), [e.volReserved({}, "2026-01-01T00:00:00.000Z")]); // reserved 2 h ago, never recorded
  const ours = { kind: "volume" as const, uuid: SNAP, name: "pvc-gone", clusterID: "c1" };
  const images = new Map([
    [
      "ceph",
      [
        { ...img(`csi-vol-${VOL}`) }, // its reservation's image: made, never recorded
        { ...img(`csi-vol-${SNAP}`), owner: ours }, // ours, no record: leaked
        img("someone-elses"), // no owner metadata: foreign
        { ...img("csi-vol-other"), owner: { ...ours, clusterID: "c2" } }, // another cluster's
      ],
    ],
  ]);
  const young = now - 60_000;
  const leftovers = new Map([
    [
      "ceph",
      [
        { kind: "trash" as const, name: "csi-vol-a", id: "t1", sizeBytes: 1, since: young, owner: ours },
        { kind: "trash" as const, name: "csi-vol-b", id: "t2", sizeBytes: 1, since: young, owner: ours, neededByClones: true },
        {
          kind: "temp" as const,
          name: `.tmp-csi-snap-${SNAP}-0123456789ab`,
          id: "x1",
          sizeBytes: 1,
          since: now - 7200_000,
          owner: { ...ours, kind: "snapshot" as const },
        },
        { kind: "temp" as const, name: `.tmp-csi-vol-${VOL}-0123456789ab`, id: "x2", sizeBytes: 1, since: now - 7200_000, owner: { ...ours, uuid: VOL } },
        { kind: "temp" as const, name: ".tmp-csi-vol-c-0123456789ab", id: "x3", sizeBytes: 1, since: young, owner: ours },
      ],
    ],
  ]);
  const found = inspect({
    states: new Map([...states].map(([k, s]) => [k, s.kind === "volume" && s.record ? { ...s, record: { ...s.record, pool: "ceph" } } : s])) as typeof states,
    images,
    drift: [],
    heartbeats: new Map(),
    now,
    olderThanMs: 3600_000,
    clusterID: "c1",
    marksOwners: new Set(["ceph"]),
    leftovers,
  });
  assert.deepEqual(
    found.map((f) => [f.type, "imageName" in f ? f.imageName : ""]),
    [
      ["leakedImage", `csi-vol-${SNAP}`],
      ["orphanedReservation", `csi-vol-${VOL}`],
      ["foreignImage", "csi-vol-other"],
      ["foreignImage", "someone-elses"],
      ["tempImage", `.tmp-csi-snap-${SNAP}-0123456789ab`],
      ["tempImage", `.tmp-csi-vol-${VOL}-0123456789ab`],
      ["trashedImage", "csi-vol-a"],
    ],
    "the trash entry clones still need and the young temporary are not findings",
  );
  const leaked = found[0];
  assert.deepEqual(
    leaked?.type === "leakedImage" && leaked.owner,
    { kind: "volume", uuid: SNAP, name: "pvc-gone", cluster: "c1" },
    "traced back by its metadata",
  );
  assert.equal(found[1]?.type === "orphanedReservation" && found[1].imageMade, true);
  const plan = gcPlan(found, states);
  assert.deepEqual(
    plan.map((a) => [a.type, a.imageName]),
    [
      ["removeLeakedImage", `csi-vol-${SNAP}`],
      ["collectReservation", `csi-vol-${VOL}`],
      ["removeTempImage", `.tmp-csi-snap-${SNAP}-0123456789ab`],
      ["purgeTrash", "csi-vol-a"],
    ],
    "never a foreign image; a temporary of a reservation still being built goes with that reservation",
  );
  assert.equal(
    foreignWhy(undefined, { marksOwners: false, clusterID: "c1" }),
    undefined,
    "a pool without owner metadata (files): every image is judged by its name",
  );
  const bound = { marksOwners: true, clusterID: "c1", log: "L1" };
  assert.equal(foreignWhy({ ...ours, log: "L1" }, bound), undefined, "made under this pool's log");
  assert.equal(foreignWhy(ours, bound), undefined, "made before images carried a log: judged by its cluster");
  assert.match(foreignWhy({ ...ours, log: "L0" }, bound) ?? "", /names event log "L0", not this pool's/, "made under another log: never removed");
  assert.match(mayRemoveImage(undefined, { ...img("x"), owner: { ...ours, log: "L0" } }, bound) ?? "", /not this cluster's: .*event log/);
  assert.match(mayRemoveImage(undefined, img("x"), { marksOwners: true, clusterID: "c1" }) ?? "", /not this cluster's/);
  assert.equal(mayRemoveImage(undefined, { ...img("x"), owner: ours }, { marksOwners: true, clusterID: "c1" }), undefined);
});

test("gc's proof: a leaked image goes only when ours, never named by the log, made after its pool's binding and any restore, past the grace, never reported by a node", () => {
  const now = Date.parse("2026-06-01T12:00:00Z");
  const name = `csi-vol-${VOL}`;
  const proof = (over: Partial<LeakProof> = {}): LeakProof => ({
    createdAt: new Map([[`default/${name}`, now - 3_600_000]]),
    trustedSince: new Map([["default", now - 7_200_000]]),
    reported: new Set(),
    now,
    graceMs: 900_000,
    ...over,
  });
  const leak = { pool: "default", imageName: name };
  assert.equal(whyKeepLeak(leak, new Map(), proof()), undefined, "proven: it may go");
  assert.match(whyKeepLeak({ pool: "default", imageName: "left-by-hand" }, new Map(), proof()) ?? "", /not named after/);
  const ended = foldInto(new Map(), [events().volReserved({}, T0), events().volCreated()]);
  assert.match(whyKeepLeak(leak, ended, proof()) ?? "", /the log names volume/);
  assert.match(whyKeepLeak(leak, new Map(), proof({ createdAt: new Map() })) ?? "", /does not tell when/);
  assert.match(
    whyKeepLeak(leak, new Map(), proof({ trustedSince: new Map([["default", now - 60_000]]) })) ?? "",
    /made before .* bound to this log or the log restored/,
  );
  assert.match(whyKeepLeak(leak, new Map(), proof({ trustedSince: new Map() })) ?? "", /made before/, "a pool of unknown binding trusts nothing");
  assert.match(whyKeepLeak(leak, new Map(), proof({ graceMs: 7_200_000 })) ?? "", /younger than the grace/);
  assert.match(whyKeepLeak(leak, new Map(), proof({ reported: new Set([VOL]) })) ?? "", /a node reported/);
  assert.deepEqual(
    gcPlan([{ type: "leakedImage", pool: "default", imageName: name, imageId: "1", sizeBytes: 1 }], new Map(), proof({ reported: new Set([VOL]) })).map((a) => [
      a.outcome,
      a.reason,
    ]),
    [["skipped", "kept: a node reported a device of it"]],
  );
});

test("verify: an image of another size than its record (an older log restored), and a node holding a volume the log has none of (stray device)", () => {
  const e = events();
  const made = foldInto(new Map(), [e.volReserved(), e.volCreated()]);
  const record = made.get(addressKey({ kind: "volume", uuid: VOL })) as RecordState<"volume">;
  const name = record.record?.imageName ?? "";
  const base = { states: made, drift: [], heartbeats: new Map(), now, olderThanMs: 3600_000, clusterID: "c1" };
  const grown = { ...img(name), sizeBytes: 2 * 1048576 };
  assert.deepEqual(
    inspect({ ...base, images: new Map([["default", [grown]]]) }).map((f) =>
      f.type === "imageSizeDiffers" ? [f.type, f.recordBytes, f.imageBytes] : [f.type],
    ),
    [["imageSizeDiffers", 1048576, 2 * 1048576]],
  );
  assert.deepEqual(inspect({ ...base, images: new Map([["default", [{ ...img(name), sizeBytes: 1048576 }]]]) }), [], "the size recorded: nothing");
  const gone = "0a0b0c0d-1111-4222-8333-444455556666";
  const holdings = [{ nodeId: "n1", time: T1, holding: [`c1/${VOL}`, `c1/${gone}`, `c2/${gone}`] }];
  assert.deepEqual(
    inspect({ ...base, images: new Map([["default", [{ ...img(name), sizeBytes: 1048576 }]]]), holdings }).map((f) =>
      f.type === "strayDevice" ? [f.type, f.nodeId, f.uuid] : [f.type],
    ),
    [["strayDevice", "n1", gone]],
    "the live volume is held rightly; another cluster's uuid is not this log's to judge",
  );
});
