/**
 * The chaos harness (scripts/lib/chaos/): its pure parts (retry policy, options, fault plan per
 * mode, the journal kill's choice of replica, invariant rules, figures, table) against fixed
 * inputs, and two short real runs against fresh stacks with 3 journal replicas — one nats-server
 * and one redis-server (~200 operations, one fault of every kind), and the replicated servers of
 * `--ha` (one fault of every HA kind; on nats-server ≥ 2.10 only, whose stream replicas do not
 * diverge after a leader kill: `.ci/run` runs this file again with 2.10) — which must end with
 * every invariant holding.
 * `npm run chaos` (`-- --ha`) is the long run.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { keysFor } from "@csi/journal/redis";
import { whyNoDevices, whyNoReplicatedStreams } from "@csi/testkit";
import { checkFindings, checkObservation, type Keyspace, mergeInvariants, type Observation } from "../scripts/lib/chaos/check.js";
import { backoffMs, isRetryable } from "../scripts/lib/chaos/co-client.js";
import {
  FAULT_KINDS,
  type FaultRecord,
  faultDueAt,
  KINDS_BY_MODE,
  loadedReplica,
  loadOf,
  modeOf,
  POWER_CUT_KINDS,
  planFaults,
} from "../scripts/lib/chaos/faults.js";
import { faultFigures, journalFailovers, journalKillFigures, recoveryMs } from "../scripts/lib/chaos/figures.js";
import { DEFAULTS, parseChaosArgs, repeatArgs } from "../scripts/lib/chaos/options.js";
import { formatReport } from "../scripts/lib/chaos/report.js";
import { runChaos } from "../scripts/lib/chaos/run.js";
import { formatTable } from "../scripts/lib/chaos/table.js";
import type { ModelVolume, OpRecord } from "../scripts/lib/chaos/workload.js";
import { seeded } from "../scripts/lib/random.js";
import { copiesDisagree, recordOf } from "../scripts/lib/stream-copies.js";

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

test("options: --ha picks the replicated stack (3 journal replicas unless --replicas); the repeat line gives the same options back", () => {
  assert.equal(parseChaosArgs([]).ha, false);
  const ha = parseChaosArgs(["--ha"]);
  assert.deepEqual([ha.ha, ha.replicas], [true, 3]);
  assert.equal(parseChaosArgs(["--ha", "--replicas", "2"]).replicas, 2);
  assert.throws(() => parseChaosArgs(["--ha=yes"]), /does not take an argument/);
  for (const o of [DEFAULTS, { ...ha, seed: 7, ops: 300, concurrency: 2, failoverBoundMs: 5000, logFile: "x.log" }]) {
    const { logFile: _, jsonFile: __, ...want } = o;
    assert.deepEqual(parseChaosArgs(repeatArgs(o)), { ...want, logFile: undefined, jsonFile: undefined });
  }
});

test("fault kinds per mode: each kind in a mode, none twice; --ha replaces the single servers' restarts by leader/primary kills and the freeze", () => {
  const all = [...KINDS_BY_MODE.single, ...KINDS_BY_MODE.ha, ...KINDS_BY_MODE.hosts, ...POWER_CUT_KINDS];
  assert.deepEqual(new Set(all), new Set(FAULT_KINDS), "every kind is injected in some mode");
  for (const kinds of Object.values(KINDS_BY_MODE)) assert.equal(new Set(kinds).size, kinds.length);
  assert.equal(KINDS_BY_MODE[modeOf(false)], KINDS_BY_MODE.single);
  const ha = KINDS_BY_MODE[modeOf(true)];
  for (const k of ["journal-kill", "controller-kill", "node-agent-kill", "nats-leader-kill", "redis-primary-kill", "nats-partition"] as const)
    assert.ok(ha.includes(k), k);
  for (const k of ["redis-restart", "nats-restart"] as const) assert.ok(!ha.includes(k), k);
  for (const k of ["nats-leader-kill", "redis-primary-kill", "nats-partition"] as const) assert.ok(!KINDS_BY_MODE.single.includes(k), k);
});

test("journal kill: the replica with a create in flight (read from csi_journal_commands_in_flight), else any command, else none", () => {
  const sample = (command: string, value: number) => ({ name: "csi_journal_commands_in_flight", labels: { command }, value });
  const other = { name: "csi_journal_command_seconds_count", labels: { command: "volume.create", outcome: "ok" }, value: 9 };
  assert.deepEqual(
    loadOf("journal-1", [sample("volume.create", 1), sample("snapshot.create", 2), sample("volume.get", 1), sample("volume.delete", 0), other]),
    {
      name: "journal-1",
      creates: 3,
      commands: 4,
    },
  );
  const loads = [
    { name: "journal-1", creates: 0, commands: 2 },
    { name: "journal-2", creates: 1, commands: 1 },
    { name: "journal-3", creates: 0, commands: 0 },
  ];
  for (let seed = 0; seed < 5; seed++) assert.equal(loadedReplica(loads, "creates", seeded(seed))?.name, "journal-2");
  assert.deepEqual(new Set([0, 1, 2, 3, 4, 5, 6, 7].map((seed) => loadedReplica(loads, "commands", seeded(seed))?.name)), new Set(["journal-1", "journal-2"]));
  assert.equal(loadedReplica([loads[2] as (typeof loads)[number]], "commands", seeded(1)), undefined);
});

test("fault plan: every kind the asked number of times, same order for the same seed, due points spread over the run", () => {
  for (const kinds of Object.values(KINDS_BY_MODE)) {
    const p = planFaults(kinds, 2, seeded(3));
    assert.equal(p.length, 2 * kinds.length);
    for (const k of kinds) assert.equal(p.filter((x) => x === k).length, 2);
  }
  const plan = planFaults(KINDS_BY_MODE.single, 3, seeded(5));
  assert.deepEqual(planFaults(KINDS_BY_MODE.single, 3, seeded(5)), plan);
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

test("figures: journal kills by what the killed replica had in flight; take-over times and frozen leaders per kind", () => {
  const kill = (at: number, creates: number, commands: number): FaultRecord => ({
    kind: "journal-kill",
    at,
    restoredAt: at + 500,
    target: "journal-1",
    journalsUp: 2,
    inFlight: { creates, commands, waitedMs: 10 },
  });
  const faults = [kill(1000, 1, 2), kill(5000, 0, 1), kill(9000, 0, 0), { ...kill(13_000, 2, 2), target: "?" }];
  const ops = [op("create", 900, 2400), op("create", 5100, 5200)];
  const k = journalKillFigures(faults, journalFailovers(faults, ops));
  assert.deepEqual(k, { kills: 3, withCreate: 1, withOtherCommand: 1, idle: 1, measured: 1, slowestMs: 1400 });
  const ha: FaultRecord[] = [
    { kind: "nats-partition", at: 0, restoredAt: 1, target: "nats-n1", ledStream: true, tookOverMs: 6000 },
    { kind: "nats-partition", at: 0, restoredAt: 1, target: "nats-n2", ledStream: false },
    { kind: "redis-primary-kill", at: 0, restoredAt: 1, target: "redis-1", tookOverMs: 3000 },
    { kind: "redis-primary-kill", at: 0, restoredAt: 1, target: "redis-2", tookOverMs: 2000 },
  ];
  const [partition, primary] = faultFigures(["nats-partition", "redis-primary-kill"], ha, []);
  assert.deepEqual([partition?.injected, partition?.ledStream, partition?.tookOverMs], [2, 1, [6000]]);
  assert.deepEqual([primary?.injected, primary?.tookOverMs, primary?.unrecovered], [2, [2000, 3000], 2]);
});

test("the log's replicas: each copy against the first readable one; a copy that could not be read is a violation too", () => {
  const copy = (...records: string[]) => new Map(records.map((r, i) => [i + 1, recordOf(r.split(" ")[0] ?? "", r)]));
  const a = copy("s.1 a", "s.2 b", "s.3 c");
  assert.deepEqual(
    copiesDisagree([
      { name: "n1", copy: a },
      { name: "n2", copy: copy("s.1 a", "s.2 b", "s.3 c") },
    ]),
    [],
  );
  // n2 kept a record of its own at 2: every later sequence is shifted.
  const [unread, shifted] = copiesDisagree([
    { name: "n1", copy: a },
    { name: "n2", copy: copy("s.1 a", "s.9 x", "s.2 b", "s.3 c") },
    { name: "n3", copy: undefined },
  ]);
  assert.match(unread ?? "", /^n3: its copy could not be read/);
  assert.match(shifted ?? "", /^n2 differs from n1 at 3 of 4 sequences \(last 3 vs 4\), from 2: s\.2 [0-9a-f]{16} vs s\.9 [0-9a-f]{16}$/);
  assert.equal(recordOf("s", "x"), recordOf("s", new TextEncoder().encode("x")), "the same digest for text and bytes");
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
const oldNats = whyNoReplicatedStreams();
test("a short chaos run: ~200 operations, one fault of every kind, 3 journal replicas — every invariant holds", {
  skip: noDevices,
  timeout: 300_000,
}, async () => {
  const result = await runChaos({ ops: 200, faultsPerKind: 1, seed: 10, concurrency: 4, replicas: 3, ha: false, powerCut: false, failoverBoundMs: 10_000 });
  const report = formatReport(result);
  assert.ok(result.ops.filter((o) => o.phase === "run").length >= 200, "at least --ops operations (more while the last faults run)");
  for (const k of KINDS_BY_MODE.single) assert.equal(result.faults.filter((f) => f.kind === k).length, 1, `${k}\n${report}`);
  assert.ok(result.ok, report);
});

test("a short --ha chaos run: 3 NATS nodes, Redis + Sentinel, 3 journal replicas, one fault of every HA kind — every invariant holds", {
  skip: noDevices ?? oldNats,
  timeout: 600_000,
}, async () => {
  const result = await runChaos({ ops: 120, faultsPerKind: 1, seed: 24, concurrency: 4, replicas: 3, ha: true, powerCut: false, failoverBoundMs: 10_000 });
  const report = formatReport(result);
  process.stdout.write(`${report}\n`);
  for (const k of KINDS_BY_MODE.ha) {
    const mine = result.faults.filter((f) => f.kind === k);
    assert.equal(mine.length, 1, `${k}\n${report}`);
    assert.ok(!mine[0]?.note?.startsWith("injection failed"), `${k}: ${mine[0]?.note}`);
  }
  for (const k of ["nats-leader-kill", "redis-primary-kill"])
    assert.ok((result.faults.find((f) => f.kind === k)?.tookOverMs ?? 0) > 0, `${k}: another node took over`);
  assert.ok(result.ok, report);
});
