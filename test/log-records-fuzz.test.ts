/**
 * The as-is check (packages/contracts/src/as-is.ts) is a shortcut past zod for records a journal
 * wrote, never another verdict: classifyRecord with it and with zod alone (the reader before it)
 * must agree on every record — event or foreign, reason, detail, the event itself — for valid
 * events of every type (with and without their optional fields) and for thousands of mutations of
 * them (a key removed or added, a value replaced by another of any JSON type, an element added or
 * removed, a key `__proto__`), on their subject or another. Seeded: a failure names its seed and
 * record; AS_IS_SEED and AS_IS_RECORDS run others, and more.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { asIsCheck, JournalEvent, subjects } from "@csi/contracts";
import { classifyRecord, isForeign } from "@csi/journal/operator";
import { eventSubject, events, GRP, oneOfEachType, SNAP, VOL } from "@csi/journal/testing";
import { seeded } from "../scripts/lib/random.js";

const LOG = { cluster: "c1", instance: "default" };
const OTHER = "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";

/** Every type, plainest form, and the events with the most optional fields filled in. */
function samples(): JournalEvent[] {
  const e = events();
  const rich = [
    e.nameReleased("groupsnapshot", "g.r p", GRP),
    e.volReserved({
      capabilities: [{ accessType: "block", accessMode: "MULTI_NODE_MULTI_WRITER", fsType: "xfs", mountFlags: ["noatime"] }],
      parameters: { tier: "gold", "x/y": "" },
      source: { kind: "snapshot", uuid: SNAP },
      mutableParameters: { readIOPS: "100", writeBytesPerSecond: "4096" },
      kubernetes: { pvcNamespace: "ns", pvcName: "claim", pvName: "pv-1" },
    }),
    e.at({ type: "VolumeModified", uuid: VOL, mutableParameters: { readBytesPerSecond: "8192" } }),
    e.at({
      type: "DeviceStateReported",
      uuid: VOL,
      nodeId: "n1",
      state: "attached",
      via: "healer",
      at: "t",
      device: "/dev/loop3",
      path: "/p",
      reason: "r",
      mapping: "rbd-nbd",
      pod: { namespace: "ns", name: "pod-1", uid: "abc-1", serviceAccount: "sa", ephemeral: false },
    }),
    e.snapReserved({ groupSnapshotUuid: GRP, kubernetes: { volumeSnapshotNamespace: "ns", volumeSnapshotName: "s", volumeSnapshotContentName: "c" } }),
  ];
  return [...oneOfEachType(e), ...rich].map((x) => x.event);
}

test("the as-is check never changes a verdict: classifyRecord agrees with zod alone on valid and mutated records", () => {
  const valid = samples();
  const eventAsIs = asIsCheck(JournalEvent);
  for (const v of valid) assert.ok(eventAsIs(JSON.parse(JSON.stringify(v))), `${v.type} as a journal writes it takes the fast path`);

  const seed = Number(process.env.AS_IS_SEED ?? 20261126);
  const r = seeded(seed);
  const scalars: unknown[] = [
    ...["", "x", VOL, OTHER, VOL.toUpperCase(), "0100", "100", "volume", "snapshot", "mount", "SINGLE_NODE_WRITER", "staged", "NameReserved", "VolumeCreated"],
    ...[0, -1, 1, 1.5, 2 ** 53, 1048576, Number.POSITIVE_INFINITY, true, false, null],
  ];
  const anyValue = (depth = 0): unknown => {
    const x = r.next();
    if (depth > 1 || x < 0.7) return r.pick(scalars);
    if (x < 0.85) return [anyValue(depth + 1)];
    return { [r.pick(["a", "kind", "uuid", "type"])]: anyValue(depth + 1) };
  };
  /** Every container (object or array) in `v`, with `v` itself. */
  const containers = (v: unknown, out: (Record<string, unknown> | unknown[])[] = []) => {
    if (v !== null && typeof v === "object") {
      out.push(v as Record<string, unknown>);
      for (const x of Object.values(v)) containers(x, out);
    }
    return out;
  };
  const mutate = (root: Record<string, unknown>) => {
    const c = r.pick(containers(root));
    const x = r.next();
    if (Array.isArray(c)) {
      if (x < 0.3 && c.length > 0) c.splice(r.int(0, c.length - 1), 1);
      else if (x < 0.6) c.push(c.length > 0 && r.chance(0.5) ? structuredClone(r.pick(c)) : anyValue());
      else if (c.length > 0) c[r.int(0, c.length - 1)] = anyValue();
      return;
    }
    const keys = Object.keys(c);
    if (x < 0.25 && keys.length > 0) delete c[r.pick(keys)];
    else if (x < 0.4) c[r.pick(["extra", "v", "type", "kind", "mutableParameters", "source", "kubernetes"])] = anyValue();
    else if (x < 0.45) Object.defineProperty(c, "__proto__", { value: anyValue(), enumerable: true, writable: true, configurable: true });
    else if (keys.length > 0) c[r.pick(keys)] = anyValue();
  };
  const otherSubjects = (v: JournalEvent) => [
    subjects.volumeEvents("c1", VOL),
    subjects.nameEvents("c1", "vol", "default", "pvc"),
    subjects.volumeEvents("c1", OTHER),
    subjects.deviceEvents("c1", VOL),
    `${eventSubject(LOG, v)}.x`,
  ];

  const counts = { events: 0, foreign: 0, fastPath: 0 };
  const records = Number(process.env.AS_IS_RECORDS ?? 20_000);
  for (let i = 0; i < records; i++) {
    const base = i < valid.length ? (valid[i] as JournalEvent) : r.pick(valid);
    const value = JSON.parse(JSON.stringify(base)) as Record<string, unknown>;
    const mutations = i < valid.length ? 0 : 1 + Math.floor(r.next() * r.next() * 3);
    for (let m = 0; m < mutations; m++) mutate(value);
    const text = JSON.stringify(value);
    const subject = i < valid.length || r.chance(0.8) ? (eventSubject(LOG, base) as string) : r.pick(otherSubjects(base));
    const raw = { seq: i + 1, subject, data: new TextEncoder().encode(text) };
    const fast = classifyRecord(LOG, raw);
    assert.deepEqual(
      fast,
      classifyRecord(LOG, raw, () => false),
      `seed ${seed}, record ${i}: ${text} on ${subject}`,
    );
    if (isForeign(fast)) counts.foreign++;
    else {
      counts.events++;
      if (eventAsIs(JSON.parse(text))) counts.fastPath++;
    }
  }
  // The fuzz reached both sides: mutated records that are still events (many through the fast path), and foreign ones.
  assert.ok(counts.events > records / 10 && counts.foreign > records / 10, JSON.stringify(counts));
  assert.ok(counts.fastPath > counts.events / 3, JSON.stringify(counts));
  if (process.env.AS_IS_RECORDS) console.log(`seed ${seed}: ${JSON.stringify(counts)}`);
});
