/**
 * The chaos harness (scripts/lib/chaos/): its pure parts (retry policy, fault plan, invariant
 * rules, figures, table) against fixed inputs, and a short real run (~200 operations, one fault
 * of every kind) against a fresh stack with 3 journal replicas, which must end with every
 * invariant holding. `npm run chaos` is the long run.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { keysFor } from "@csi/journal/operator";
import { whyNoDevices } from "@csi/testkit";
import { checkFindings, checkObservation, type Keyspace, mergeInvariants, type Observation } from "../scripts/lib/chaos/check.js";
import { backoffMs, isRetryable } from "../scripts/lib/chaos/co-client.js";
import { FAULT_KINDS, type FaultRecord, faultDueAt, planFaults } from "../scripts/lib/chaos/faults.js";
import { journalFailovers, recoveryMs } from "../scripts/lib/chaos/figures.js";
import { parseChaosArgs } from "../scripts/lib/chaos/options.js";
import { formatReport } from "../scripts/lib/chaos/report.js";
import { runChaos } from "../scripts/lib/chaos/run.js";
import { formatTable } from "../scripts/lib/chaos/table.js";
import type { ModelVolume, OpRecord } from "../scripts/lib/chaos/workload.js";
import { seeded } from "../scripts/lib/random.js";

test("CO retry policy: transient codes and connection errors are retried with capped exponential backoff", () => {
  for (const code of [14, 10, 4, undefined]) assert.equal(isRetryable(code), true, String(code));
  for (const code of [3, 5, 6, 9, 13]) assert.equal(isRetryable(code), false, String(code));
  assert.equal(backoffMs(1, 0.5), 100);
  assert.equal(backoffMs(2, 0.5), 200);
  assert.equal(backoffMs(10, 0.5), 2000, "capped at 2 s");
  assert.equal(backoffMs(3, 0), 200, "jitter: half");
  assert.equal(backoffMs(3, 0.99), 596, "jitter: up to one and a half");
});

test("options: defaults meet issue 10 (2,000 ops, 20 faults of every kind, 3 replicas); bad values are refused", () => {
  const d = parseChaosArgs([]);
  assert.deepEqual([d.ops, d.faultsPerKind, d.replicas], [2000, 20, 3]);
  assert.equal(parseChaosArgs(["--ops", "200", "--seed", "9"]).ops, 200);
  assert.throws(() => parseChaosArgs(["--ops=-1"]), /--ops must be an integer/);
  assert.throws(() => parseChaosArgs(["--bogus"]), /Unknown option/);
});

test("fault plan: every kind the asked number of times, same order for the same seed, due points spread over the run", () => {
  const plan = planFaults(3, seeded(5));
  assert.equal(plan.length, 3 * FAULT_KINDS.length);
  for (const k of FAULT_KINDS) assert.equal(plan.filter((x) => x === k).length, 3);
  assert.deepEqual(planFaults(3, seeded(5)), plan);
  const due = plan.map((_, i) => faultDueAt(i, plan.length, 1000));
  assert.deepEqual(
    due,
    [...due].sort((a, b) => a - b),
  );
  assert.ok((due[0] ?? 0) > 0 && (due.at(-1) ?? 0) <= 900);
});

const keys = keysFor("local", "default");
const MiB = 1024 * 1024;
const UUID_A = "aaaaaaaa-0000-4000-8000-000000000001";
const UUID_B = "bbbbbbbb-0000-4000-8000-000000000002";

function volume(name: string, uuid: string, more: Partial<ModelVolume> = {}): ModelVolume {
  return {
    name,
    request: { name },
    id: `0001-0005-local-0000000000000001-${uuid}`,
    uuid,
    sizeBytes: 32 * MiB,
    state: "created",
    busy: false,
    claimed: "no",
    staged: "no",
    published: "no",
    stagingPath: `/k/staging/${name}`,
    targetPath: `/k/pods/${name}/mount`,
    ...more,
  };
}

/** A consistent system holding volume `a` (uuid A), as observed. */
function healthy(): Observation {
  const projection: Keyspace = new Map([
    [keys.dir("volume"), { type: "hash", fields: { [keys.dirField("volume", "a")]: UUID_A } }],
    [
      keys.record("volume", UUID_A),
      { type: "hash", fields: { "csi.volname": "a", "csi.imagename": `csi-vol-${UUID_A}`, "csi.imageid": "1f", _seq: "3", _gone: "0" } },
    ],
  ]);
  return {
    label: "t",
    poolFiles: [`csi-vol-${UUID_A}.img`],
    projection,
    replayed: new Map(projection),
    locks: [],
    node: [],
    mounts: [],
    loops: [],
    listed: { volumes: [volume("a", UUID_A).id as string], snapshots: [] },
  };
}
const model = (volumes: ModelVolume[]) => ({ volumes, snapshots: [], findings: [], nodeId: "n1", keys });
const violated = (o: Observation, volumes: ModelVolume[]) =>
  Object.fromEntries(
    checkObservation(o, model(volumes))
      .filter((i) => i.violations.length > 0)
      .map((i) => [i.name, i.violations.length]),
  );

test("invariants: a consistent system violates nothing", () => {
  assert.deepEqual(violated(healthy(), [volume("a", UUID_A)]), {});
});

test("invariants: each kind of damage is caught by its rule", () => {
  const a = volume("a", UUID_A);
  // The image of an acknowledged volume is gone.
  assert.deepEqual(violated({ ...healthy(), poolFiles: [] }, [a]), {
    "acknowledged create → one image + one reservation": 1,
    "no reservation without an image": 1,
  });
  // An image nobody reserved, and a temp file.
  assert.deepEqual(violated({ ...healthy(), poolFiles: [`csi-vol-${UUID_A}.img`, `csi-vol-${UUID_B}.img`, ".tmp-csi-snap-x-1a"] }, [a]), {
    "no image without a reservation": 1,
    "no temp files in the pool": 1,
  });
  // The projection lost a key the log replays to (a half-rebuilt projection).
  const o = healthy();
  o.projection = new Map([...o.projection].filter(([k]) => k !== keys.dir("volume")));
  assert.deepEqual(violated(o, [a]), { "projection == replay of the log": 1, "acknowledged create → one image + one reservation": 1 });
  // An acknowledged delete whose record and image are still there, and still listed.
  assert.deepEqual(violated(healthy(), [volume("a", UUID_A, { state: "deleted" })]), { "acknowledged delete is gone": 4 });
  // A reservation of a create that ended in an error (the CO will never delete it).
  assert.deepEqual(violated(healthy(), [volume("a", UUID_A, { state: "failed" })]), { "no reservation the CO was not told of": 1 });
  // A lock left behind.
  assert.deepEqual(violated({ ...healthy(), locks: ["{local}:lock.volume.x (ttl -1 ms)"] }, [a]), { "no lock held after settle": 1 });
});

test("invariants: node state, claims and mounts must agree with what the CO was told", () => {
  const o = healthy();
  const rec = o.projection.get(keys.record("volume", UUID_A));
  assert.ok(rec?.type === "hash");
  const staged = { uuid: UUID_A, imagePath: `/pool/csi-vol-${UUID_A}.img`, stagingPath: "/k/staging/a", publishes: ["/k/pods/a/mount"] };
  // Staged and published on the node without a claim, and the CO thinks it was unpublished.
  assert.deepEqual(
    violated({ ...o, node: [staged], mounts: staged.publishes.concat(staged.stagingPath), loops: [{ device: "/dev/loop9", backingFile: staged.imagePath }] }, [
      volume("a", UUID_A),
    ]),
    {
      "node state == claims == CO's view": 3,
    },
  );
  // A leftover mount and loop device of a volume nobody stages.
  assert.deepEqual(violated({ ...o, mounts: ["/k/staging/a"], loops: [{ device: "/dev/loop9", backingFile: staged.imagePath }] }, [volume("a", UUID_A)]), {
    "no loop device / mount left over": 2,
  });
  // All consistent: claimed, staged, published; "maybe" accepts either way.
  rec.fields["claim.n1"] = "{}";
  o.projection.set(keys.nodeClaims("n1"), { type: "set", members: [UUID_A] });
  o.replayed = new Map(o.projection);
  const v = volume("a", UUID_A, { claimed: "yes", staged: "maybe", published: "yes" });
  assert.deepEqual(
    violated({ ...o, node: [staged], mounts: ["/k/staging/a", "/k/pods/a/mount"], loops: [{ device: "/dev/loop9", backingFile: staged.imagePath }] }, [v]),
    {},
  );
});

test("invariants: the client's findings and the merge of several checks", () => {
  const m = {
    volumes: [volume("x", UUID_B, { state: "unknown" })],
    snapshots: [],
    findings: [{ what: "create-retry answered another volume" as const, example: "a: 1 then 2" }],
  };
  const merged = mergeInvariants(checkFindings(m), checkFindings(m));
  const count = (name: string) => merged.find((i) => i.name === name)?.violations.length;
  assert.equal(count("create retries answer the same volume"), 2);
  assert.equal(count("no unexpected final error"), 2);
});

const op = (kind: OpRecord["kind"], start: number, end: number, ok = true): OpRecord => ({ kind, start, end, ok, phase: "run" });

test("figures: recovery is the first dependent success after a fault; failover covers in-flight and new creates", () => {
  const ops = [op("create", 0, 5000), op("publish", 1100, 1900), op("create", 1200, 1300), op("create", 1500, 1600, false)];
  const kill: FaultRecord = { kind: "journal-kill", at: 1000, restoredAt: 1500, target: "journal-1", journalsUp: 2 };
  assert.equal(recoveryMs(kill, ops), 300);
  assert.equal(recoveryMs({ ...kill, kind: "node-agent-kill" }, ops), 900, "node faults wait for a node operation");
  const [f] = journalFailovers([kill, { ...kill, at: 3000, restoredAt: 3500, journalsUp: 1 }], ops);
  assert.deepEqual([f?.ms, f?.creates, f?.failed], [4000, 3, 1]);
  const flush: FaultRecord = { kind: "redis-flush", at: 200, restoredAt: 210, target: "redis" };
  assert.equal(journalFailovers([flush, kill], ops)[0]?.during, flush, "a kill 790 ms after a flush lands in its recovery");
  assert.equal(journalFailovers([{ ...flush, at: -2000, restoredAt: -1990 }, kill], ops)[0]?.during, undefined, "3 s later it stands alone");
  const lateFault: FaultRecord = { kind: "nats-restart", at: -500, restoredAt: 100, target: "nats-server" };
  assert.equal(journalFailovers([lateFault, kill], ops)[0]?.creates, 2, "the create that started during the nats restart measures that restart: left out");
});

test("table: columns padded, numbers right-aligned", () => {
  assert.equal(
    formatTable(
      ["name", "n"],
      [
        ["ab", 1],
        ["c", 10],
      ],
    ),
    "name   n\n----  --\nab     1\nc     10",
  );
});

const noDevices = whyNoDevices();
test("a short chaos run: ~200 operations, one fault of every kind, 3 journal replicas — every invariant holds", {
  skip: noDevices,
  timeout: 300_000,
}, async () => {
  const result = await runChaos({ ops: 200, faultsPerKind: 1, seed: 10, concurrency: 4, replicas: 3, failoverBoundMs: 10_000 });
  const report = formatReport(result);
  assert.equal(result.ops.filter((o) => o.phase === "run").length, 200);
  for (const k of FAULT_KINDS) assert.equal(result.faults.filter((f) => f.kind === k).length, 1, `${k}\n${report}`);
  assert.ok(result.ok, report);
});
