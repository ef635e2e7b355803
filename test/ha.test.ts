/**
 * Issue 14: the replicated system on real servers (scripts/lib/ha-servers.ts through startStack's
 * `ha`, as `npm start -- --ha` runs it): a 3-node NATS cluster with every stream at 3 replicas, a
 * Redis primary + replica behind 3 Sentinels, 2 journal replicas, the controller and a node-agent.
 * Under a steady create / snapshot / delete load through the controller's CSI socket (a client that
 * retries as a CO does), three faults:
 *
 *   (a) SIGKILL the NATS node that leads the cluster's event stream, restart it later;
 *   (b) SIGKILL the Redis primary: the sentinels promote the replica; the old one comes back as a replica;
 *   (c) both at once.
 *
 * After each: every acknowledged create is listed exactly once, every acknowledged delete is gone,
 * the pool holds exactly the live images, and the journal's own audit (audit.verify: leaked images,
 * orphaned reservations, missing images, projection ≠ log) finds nothing. The longest window in
 * which calls failed and the throughput before / during / after are printed (README, docs/operations.md);
 * they are figures, not asserted.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { readdir, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { isDeepStrictEqual } from "node:util";
import { DriverError, decomposeVolumeId, nodeWorkStream, resolveClusters, snapshotImageName, subjects, volumeImageName } from "@csi/contracts";
import { JetStreamLog } from "@csi/journal/log";
import { JournalClient } from "@csi/runtime";
import { type LocalServer, tempDir, whyNoReplicatedStreams } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { CoClient, CoStats } from "../scripts/lib/chaos/co-client.js";
import { listed } from "../scripts/lib/chaos/observe.js";
import { type HaServers, redisReplicaInSync, untilSeen } from "../scripts/lib/ha-servers.js";
import { type LeaderElection, watchLeaderElections } from "../scripts/lib/ha-watch.js";
import { type AttemptMark, attemptsIn, longestFailureWindow, throughput } from "../scripts/lib/load-figures.js";
import { healedOrRestarted, plannedRedisFailover, rollingNatsRestart } from "../scripts/lib/planned-restarts.js";
import { seeded } from "../scripts/lib/random.js";
import { type Stack, startStack } from "../scripts/lib/stack.js";

const MiB = 1024 * 1024;
const CLUSTER = "local";
const STREAM = subjects.streamName(CLUSTER);
/**
 * The load's CO retries within 12–150 ms (25 ms doubling to 100 ms, ±50 %; not external-provisioner's
 * doubling to minutes): the first success after an election or a promotion then measures our side
 * (client re-route, the journal's probe and catch-up), not the CO's back-off.
 */
const PROBING_CO = { baseMs: 25, capMs: 100 };
/** Issue 39: our first success at most this long after the new leader's election (or the switch): a figure, printed, not asserted. */
const FIRST_OK_MS = 1000;
/** Operations the load completes before a fault and after the servers are back (at least). */
const OPS_AROUND = 6;
/** A uuid anywhere in a text (the ids audit.verify's findings carry). */
const UUID_IN_TEXT = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] as string[] } };

describe("load figures (pure)", () => {
  test("the longest failure window runs from the first failure after a success to the next success", () => {
    const m = (at: number, ok: boolean) => ({ at, ok });
    assert.deepEqual(longestFailureWindow([]), { ms: 0 });
    assert.deepEqual(longestFailureWindow([m(1, true), m(2, true)]), { ms: 0 });
    assert.deepEqual(longestFailureWindow([m(10, true), m(20, false), m(25, false), m(70, true), m(80, false), m(90, true)]), { ms: 50, from: 20 });
    // out of order marks are sorted; a failure still open at the end counts up to `end`
    assert.deepEqual(longestFailureWindow([m(30, false), m(10, true)], 200), { ms: 170, from: 30 });
    assert.deepEqual(longestFailureWindow([m(30, false)]), { ms: 0 });
  });
  test("a window's story: the attempts that ran in it, by start, with times from its origin", () => {
    const marks = [
      { at: 150, ok: true, startedAt: 40, what: "CreateVolume" },
      { at: 120, ok: false, startedAt: 100, what: "CreateSnapshot UNAVAILABLE: x" },
      { at: 90, ok: true, startedAt: 80, what: "before" },
      { at: 400, ok: true, startedAt: 300, what: "after" },
    ];
    assert.deepEqual(attemptsIn(marks, 100, 200, 100), ["  -60..50 ms ok CreateVolume", "  0..20 ms failed CreateSnapshot UNAVAILABLE: x"]);
  });
  test("throughput counts completions in [from, to)", () => {
    assert.equal(throughput([0, 500, 999, 1000, 1500], 0, 1000), 3);
    assert.equal(throughput([0, 500, 1000, 1500], 1000, 2000), 2);
    assert.equal(throughput([1], 5, 5), 0);
  });
});

/** What the CO was told, over every case. */
interface Acked {
  /** Acknowledged creates not deleted since: name → volume id. */
  volumes: Map<string, string>;
  deletedVolumes: Set<string>;
  snapshots: Map<string, string>;
  deletedSnapshots: Set<string>;
}

interface CaseFigures {
  fault: string;
  /** NATS kills: from the kill to the new stream leader's election (the server's LEADER_ELECTED advisory). */
  electedAfterMs?: number;
  /** Redis failovers: from the kill (or the ask) to the replica's promotion (the leader sentinel's +failover-state-wait-promotion: SLAVEOF NO ONE sent). */
  promotedAfterMs?: number;
  /** Redis failovers: from the kill (or the ask) to the sentinels' +switch-master (the promotion seen and announced). */
  switchedAfterMs?: number;
  /** NATS kills: every stream-leader election heard from the kill to the first success ("n2 +5212 ms"): more than one is the engine electing again. */
  elections?: string[];
  /** From that election (or promotion) to the first call that succeeded after it: what we add to the engine. */
  firstOkAfterMs?: number;
  /** Longest window (ms) in which attempts failed and none succeeded. */
  failureWindowMs: number;
  failedAttempts: number;
  /** The slowest operation that succeeded (its retries included). */
  slowestOpMs: number;
  ops: { before: number; during: number; after: number };
  /** Operations per second before the fault, while it lasted (until the servers were back), after. */
  opsPerSec: { before: number; during: number; after: number };
}

let dir: string;
let stack: Stack;
let ha: HaServers;
let nc: NatsConnection;
const acked: Acked = { volumes: new Map(), deletedVolumes: new Set(), snapshots: new Map(), deletedSnapshots: new Set() };
const figures: CaseFigures[] = [];
/** The services' last log lines (LOG_LEVEL warn), printed when a case fails. */
const recentLines: string[] = [];
/** The lines that tell a failover's story (a connection lost or back, a catch-up, a warning), not each operation's. */
const NOTABLE = /"level":"(warn|error|fatal)"|"level":[456]0|caught up|back|lost|leader|distrust/;
const keepLine = (line: string) => {
  recentLines.push(line);
  if (recentLines.length > 3000) recentLines.splice(0, recentLines.length - 3000);
};

/**
 * A steady load from `workers` loops until stopped: create a volume; every other one a snapshot of
 * it (deleted again every other time); every third volume deleted. Every acknowledged answer is
 * recorded in `acked`; every attempt's outcome in `marks`, every completed operation's time in `done`.
 */
function startLoad(prefix: string, workers = 2) {
  const marks: AttemptMark[] = [];
  const done: number[] = [];
  let slowestMs = 0;
  const co = new CoClient({
    controllerEndpoint: stack.controllerEndpoint,
    nodeEndpoint: stack.nodeEndpoint,
    random: seeded(prefix.length),
    stats: new CoStats(),
    deadlineMs: 10_000,
    budgetMs: 120_000,
    backoff: PROBING_CO,
    onAttempt: (at, ok, about) => marks.push({ at, ok, startedAt: about.startedAt, what: about.error ? `${about.method} ${about.error}` : about.method }),
  });
  let running = true;
  const op = async <T>(call: () => Promise<T>): Promise<T> => {
    const start = Date.now();
    const r = await call();
    done.push(Date.now());
    slowestMs = Math.max(slowestMs, Date.now() - start);
    return r;
  };
  const loops = Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const name = `${prefix}-${w}-${i}`;
      const v = await op(() => co.controller("CreateVolume", { name, capacity_range: { required_bytes: String(4 * MiB) }, volume_capabilities: [cap] }));
      const id = v.volume?.volume_id ?? "";
      assert.ok(id, `${name}: a volume id`);
      acked.volumes.set(name, id);
      if (i % 2 === 0) {
        const sname = `${name}-snap`;
        const s = await op(() => co.controller("CreateSnapshot", { name: sname, source_volume_id: id }));
        const sid = s.snapshot?.snapshot_id ?? "";
        assert.ok(sid, `${sname}: a snapshot id`);
        acked.snapshots.set(sname, sid);
        if (i % 4 === 0) {
          await op(() => co.controller("DeleteSnapshot", { snapshot_id: sid }));
          acked.snapshots.delete(sname);
          acked.deletedSnapshots.add(sid);
        }
      }
      if (i % 3 === 0) {
        await op(() => co.controller("DeleteVolume", { volume_id: id }));
        acked.volumes.delete(name);
        acked.deletedVolumes.add(id);
      }
    }
  });
  const all = Promise.all(loops);
  /** Why a worker stopped before it was told to (an answer a CO does not retry, a lost id): the case fails with it. */
  let died: Error | undefined;
  all.catch((err: Error) => {
    died ??= err;
  });
  return {
    marks,
    done,
    died: () => died,
    slowestMs: () => slowestMs,
    stop: async () => {
      running = false;
      await all;
      co.close();
    },
  };
}

/** The checks after a fault: no acknowledged operation lost, no duplicate, no leak, projection == log. */
async function checkState(label: string): Promise<void> {
  const co = new CoClient({ controllerEndpoint: stack.controllerEndpoint, nodeEndpoint: stack.nodeEndpoint, random: seeded(1), stats: new CoStats() });
  try {
    const list = await listed(co);
    if ("error" in list) assert.fail(`${label}: the controller could not list: ${list.error}`);
    const { volumes, snapshots } = list;
    const count = (ids: string[], id: string) => ids.filter((x) => x === id).length;
    for (const [name, id] of acked.volumes) assert.equal(count(volumes, id), 1, `${label}: acknowledged volume ${name} (${id}) listed exactly once`);
    for (const id of acked.deletedVolumes) assert.equal(count(volumes, id), 0, `${label}: acknowledged delete of ${id} is gone`);
    for (const [name, id] of acked.snapshots) assert.equal(count(snapshots, id), 1, `${label}: acknowledged snapshot ${name} (${id}) listed exactly once`);
    for (const id of acked.deletedSnapshots) assert.equal(count(snapshots, id), 0, `${label}: acknowledged snapshot delete of ${id} is gone`);
    const journal = new JournalClient(nc, 30_000);
    /** The journal's history of an aggregate (volume, snapshot, group), cut short: what went wrong, if something did. */
    const historyOf = async (uuid: string, label: string) =>
      `${label}: ${JSON.stringify(await journal.call(CLUSTER, "volume.history", { uuid, maxEntries: 0 }).catch((e: Error) => e.message)).slice(0, 3000)}`;
    /** The history of ids the CO was not told of, and every record of the request names in it (another uuid under the same name shows there). */
    const unknown = async (ids: string[], known: Iterable<string>) => {
      const told = new Set(known);
      const extra = ids.filter((id) => !told.has(id));
      const histories = await Promise.all(extra.slice(0, 5).map((id) => historyOf(decomposeVolumeId(id).uuid, id)));
      const names = [...new Set(histories.flatMap((h) => h.match(/csi\.[a-z0-9-]+\.evt\.name\.[a-z]+\.[^"]+/g) ?? []))];
      const records = await new JetStreamLog(nc, { cluster: CLUSTER }).history(names).catch((e: Error) => [e.message]);
      return `${histories.join("\n")}\nthe names' records:\n${records.map((r) => JSON.stringify(r).slice(0, 400)).join("\n")}`;
    };
    if (volumes.length !== acked.volumes.size) assert.fail(`${label}: volumes the CO was not told of:\n${await unknown(volumes, acked.volumes.values())}`);
    if (snapshots.length !== acked.snapshots.size)
      assert.fail(`${label}: snapshots the CO was not told of:\n${await unknown(snapshots, acked.snapshots.values())}`);
    // The pool holds exactly the live images: none leaked, none lost.
    const pool = resolveClusters(JSON.parse(readFileSync(stack.clustersFile, "utf8")), path.join(dir, "data"))
      .get(CLUSTER)
      ?.pools.find((p) => p.name === "default");
    assert.ok(pool?.root, "the default pool, a file pool");
    const files = (await readdir(pool.root)).filter((f) => !f.startsWith(".")).sort();
    // The file pool keeps an image as <name>.img (services/journal/src/pools/file.ts).
    const expected = [
      ...[...acked.volumes.values()].map((id) => volumeImageName(decomposeVolumeId(id).uuid)),
      ...[...acked.snapshots.values()].map((id) => snapshotImageName(decomposeVolumeId(id).uuid)),
    ]
      .map((name) => `${name}.img`)
      .sort();
    assert.deepEqual(files, expected, `${label}: the pool holds exactly the live images`);
    // The journal's own audit: log vs projection vs pool. A replica may still be reconnecting to
    // the Redis the sentinels promoted (Unavailable: a CO would retry), which a busy machine makes
    // slow: asked again while the reason it gives changes.
    let verify: Awaited<ReturnType<typeof journal.call<"audit.verify">>> | undefined;
    let fatal: unknown;
    await untilSeen(`${label}: audit.verify answers`, async () => {
      let why = "";
      verify = await journal.call(CLUSTER, "audit.verify", { olderThanMs: 0 }).catch((err: unknown) => {
        if (err instanceof DriverError && err.code === "Unavailable") why = err.message;
        else fatal = err;
        return undefined;
      });
      return { done: verify !== undefined || fatal !== undefined, seen: `${why}; sentinels: ${ha.sentinelEvents.last()}` };
    });
    if (fatal !== undefined) throw fatal;
    assert.ok(verify);
    const clean = { leakedImages: 0, orphanedReservations: 0, missingImages: 0, projectionDrift: 0, staleClaims: 0, foreignRecords: 0 };
    // Not clean: the histories of the aggregates the findings name, for the report (issue 24's open
    // case: an acknowledged delete missing from the log or the projection after a leader kill).
    const named = isDeepStrictEqual(verify.counts, clean) ? [] : [...new Set(JSON.stringify(verify.findings).match(UUID_IN_TEXT) ?? [])].slice(0, 5);
    const histories = (await Promise.all(named.map((u) => historyOf(u, u)))).join("\n");
    assert.deepEqual(verify.counts, clean, `${label}: audit.verify\n${JSON.stringify(verify.findings, null, 1).slice(0, 2000)}\nhistories:\n${histories}`);
  } finally {
    co.close();
  }
}

/** What a fault's injection can ask of the load around it. */
interface FaultContext {
  /** Waits for a call that succeeded at or after `t` (epoch ms) and resolves with when it ended. */
  okAfter(t: number): Promise<number>;
  /** Figures the injection measured (election, switch, first success). */
  note(f: Partial<CaseFigures>): void;
}

/** Runs the load around one fault: `inject` does the kill and returns once the killed servers run again. */
async function faultCase(fault: string, prefix: string, inject: (ctx: FaultContext) => Promise<void>): Promise<void> {
  try {
    await runFaultCase(fault, prefix, inject);
  } catch (err) {
    process.stderr.write(`\n${fault} failed; the services' last log lines:\n${recentLines.slice(-300).join("\n")}\n`);
    throw err;
  }
}

/**
 * Waits for `done` unless a worker died (then the case fails at once with its error: a retrying CO
 * would never see that operation done). Progress is the load's attempts: a wait is given up only
 * when no call has ended for QUIET_MS.
 */
function loadWaiter(fault: string, load: ReturnType<typeof startLoad>) {
  return async (what: string, done: () => boolean): Promise<void> => {
    await untilSeen(`${fault}: ${what}`, async () => ({
      done: done() || load.died() !== undefined,
      seen: `${load.marks.length} attempts (${load.marks.filter((m) => !m.ok).length} failed), ${load.done.length} done`,
    }));
    const died = load.died();
    if (died) throw new Error(`${fault}: the load stopped while waiting for ${what}: ${died.message}`, { cause: died });
  };
}

async function runFaultCase(fault: string, prefix: string, inject: (ctx: FaultContext) => Promise<void>): Promise<void> {
  const load = startLoad(prefix);
  const waitFor = loadWaiter(fault, load);
  const noted: Partial<CaseFigures> = {};
  const ctx: FaultContext = {
    okAfter: async (t) => {
      await waitFor(`a call that succeeded after ${new Date(t).toISOString()}`, () => load.marks.some((m) => m.ok && m.at >= t));
      return Math.min(...load.marks.filter((m) => m.ok && m.at >= t).map((m) => m.at));
    },
    note: (f) => Object.assign(noted, f),
  };
  const t0 = Date.now();
  let tFault: number;
  let tBack: number;
  try {
    // Load before the fault and after the servers are back: OPS_AROUND operations each (events, not seconds).
    await waitFor("operations done before the fault", () => load.done.length >= OPS_AROUND);
    tFault = Date.now();
    await inject(ctx);
    tBack = Date.now();
    await waitFor("operations done after the fault", () => load.done.filter((t) => t >= tBack).length >= OPS_AROUND);
  } catch (err) {
    void load.stop().catch(() => {}); // the workers end after their operation in flight; the next case starts its own
    throw err;
  }
  const tEnd = Date.now();
  await load.stop();
  const window = longestFailureWindow(load.marks, tEnd);
  const ops = {
    before: load.done.filter((t) => t < tFault).length,
    during: load.done.filter((t) => t >= tFault && t < tBack).length,
    after: load.done.filter((t) => t >= tBack && t < tEnd).length,
  };
  figures.push({
    fault,
    ...noted,
    failureWindowMs: window.ms,
    failedAttempts: load.marks.filter((m) => !m.ok).length,
    slowestOpMs: load.slowestMs(),
    ops,
    opsPerSec: { before: throughput(load.done, t0, tFault), during: throughput(load.done, tFault, tBack), after: throughput(load.done, tBack, tEnd) },
  });
  // A window over the second (or HA_WINDOW_STORY_MS): every attempt that ran in it (and the second before), to see what held the calls.
  if (window.ms > Number(process.env.HA_WINDOW_STORY_MS ?? FIRST_OK_MS) && window.from !== undefined)
    process.stderr.write(
      `\n${fault}: failure window ${window.ms} ms; the attempts in it (from its first failure):\n${attemptsIn(load.marks, window.from - 1000, window.from + window.ms, window.from).join("\n")}\n`,
    );
  // What we add was over the issue's second: the services' lines since the fault, to see where it went.
  if ((noted.firstOkAfterMs ?? 0) > FIRST_OK_MS)
    process.stderr.write(
      `\n${fault}: first success ${noted.firstOkAfterMs} ms after the engine's event; the services' last lines of note:\n${recentLines
        .filter((l) => NOTABLE.test(l))
        .slice(-80)
        .join("\n")}\n`,
    );
  assert.ok(ops.before > 0 && ops.after > 0, `${fault}: the load ran before and after the fault (${JSON.stringify(ops)})`);
  await checkState(fault);
}

/** The node's name in the cluster (n1, n2, n3: the advisory names the leader so). */
const nodeName = (s: LocalServer) => `n${ha.nats.indexOf(s) + 1}`;

/**
 * SIGKILLs the leader of the event stream and waits for JetStream's LEADER_ELECTED advisory naming
 * another node; resolves with the kill's time and that election. `elections` must be watched
 * before the call.
 */
async function killStreamLeader(elections: LeaderElection[]): Promise<{ leader: LocalServer; killedAt: number; elected: LeaderElection }> {
  const leader = await ha.streamLeader(STREAM);
  const killedAt = Date.now();
  await leader.kill();
  const newLeader = () => elections.find((e) => e.serverAt >= killedAt - 50 && e.leader !== nodeName(leader));
  await untilSeen("a new leader of the event stream elected", async () => ({
    done: newLeader() !== undefined,
    seen: `${elections.length} elections heard; ${JSON.stringify(await ha.streamLeader(STREAM).then(nodeName, (e: Error) => e.message))}`,
  }));
  return { leader, killedAt, elected: newLeader() as LeaderElection };
}

/**
 * When the failover begun at `t` promoted the replica: the leader sentinel's
 * +failover-state-wait-promotion (it has sent SLAVEOF NO ONE), or the switch if that was not heard.
 */
const promotedAfter = (t: number, switchedAt: number) => Math.min(ha.sentinelEvents.after(t, "+failover-state-wait-promotion")?.at ?? switchedAt, switchedAt);

/** The stream-leader elections heard from `from` to `to`, each as "n2 +5212 ms" (from `from`). */
const electionsBetween = (elections: LeaderElection[], from: number, to: number) =>
  elections.filter((e) => e.serverAt >= from - 50 && e.serverAt <= to).map((e) => `${e.leader} +${e.serverAt - from} ms`);

/** SIGKILLs the Redis primary and waits for the sentinels' +switch-master; resolves with the kill's time, the promotion's and the switch's. */
async function killRedisPrimary(): Promise<{ primary: LocalServer; killedAt: number; promotedAt: number; switchedAt: number }> {
  const primary = await ha.redisPrimary();
  const killedAt = Date.now();
  await primary.kill();
  await ha.promotedAway(primary);
  await untilSeen("the sentinels' +switch-master", async () => ({
    done: ha.sentinelEvents.after(killedAt, "+switch-master") !== undefined,
    seen: ha.sentinelEvents.last(),
  }));
  const switchedAt = ha.sentinelEvents.after(killedAt, "+switch-master")?.at ?? Date.now();
  return { primary, killedAt, promotedAt: promotedAfter(killedAt, switchedAt), switchedAt };
}

// Leader kills under load on a nats-server whose stream replicas diverge after one lose acknowledged
// events in the server itself (docs/operations.md): skipped there; .ci/run runs this file with 2.10.
/** The engine's part and ours: "; new leader elected 5123 ms after the kill; first success 210 ms after it". */
const engineFigures = (f: CaseFigures) => {
  const origin = f.fault.includes("planned") ? "the ask" : "the kill";
  return [
    f.switchedAfterMs === undefined ? "" : `; +switch-master ${f.switchedAfterMs} ms after ${origin}`,
    f.electedAfterMs === undefined ? "" : `; new leader elected ${f.electedAfterMs} ms after the kill`,
    f.promotedAfterMs === undefined ? "" : `; replica promoted ${f.promotedAfterMs} ms after ${origin}`,
    (f.elections?.length ?? 0) > 1 ? `; elections heard until the first success: ${f.elections?.join(", ")}` : "",
    f.firstOkAfterMs === undefined
      ? ""
      : `; first success ${f.firstOkAfterMs} ms after ${f.electedAfterMs !== undefined && f.promotedAfterMs !== undefined ? "the later" : "it"}`,
  ].join("");
};

describe("HA: NATS cluster + Redis Sentinel under load", { timeout: 600_000, skip: whyNoReplicatedStreams() }, () => {
  before(async () => {
    dir = await tempDir("csi-ha-");
    stack = await startStack({
      dataDir: path.join(dir, "data"),
      runDir: path.join(dir, "run"),
      ha: true,
      readyTimeoutMs: 120_000,
      // HA_LOG_LEVEL=info shows the journals' "event log answers again" and Redis reconnects (printed for a slow first success).
      env: { LOG_LEVEL: process.env.HA_LOG_LEVEL ?? "warn" },
      onLine: keepLine,
    });
    assert.ok(stack.servers.ha, "the HA servers");
    ha = stack.servers.ha;
    nc = await connect({ servers: ha.natsUrl.split(","), maxReconnectAttempts: -1 });
  });

  after(async () => {
    if (figures.length > 0) {
      const row = (f: CaseFigures) =>
        `${f.fault.padEnd(24)} longest failure window ${String(f.failureWindowMs).padStart(6)} ms, ${String(f.failedAttempts).padStart(3)} failed attempts, slowest op ${f.slowestOpMs} ms; ops/s before ${f.opsPerSec.before.toFixed(1)}, during ${f.opsPerSec.during.toFixed(1)}, after ${f.opsPerSec.after.toFixed(1)} (${f.ops.before}/${f.ops.during}/${f.ops.after} ops)${engineFigures(f)}`;
      process.stdout.write(`\nHA figures (this machine):\n${figures.map(row).join("\n")}\n`);
    }
    await nc?.close();
    await stack?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test("every stream the services made has 3 replicas, on a 3-node cluster", async () => {
    const jsm = await jetstreamManager(nc);
    // A node's own work stream is made once it registers (by its agent, or a journal seeing it): wait for it.
    await untilSeen("the node's own work stream", async () => {
      const names: string[] = [];
      for await (const name of jsm.streams.names()) names.push(name);
      return { done: names.includes(nodeWorkStream(stack.nodeId)), seen: names.sort().join(", ") };
    });
    // By name, each read on its own (the paged list of a clustered server repeated one stream and left one out).
    const names: string[] = [];
    for await (const name of jsm.streams.names()) names.push(name);
    for (const name of names) {
      const s = await jsm.streams.info(name);
      assert.equal(s.config.num_replicas, 3, `${s.config.name}: 3 replicas`);
      assert.equal(s.cluster?.name, "csi", `${s.config.name}: on cluster csi`);
    }
    // The node's own work stream (one per node: docs/security.md, "Node work and reports").
    for (const want of [STREAM, "CSI_NODES", nodeWorkStream(stack.nodeId)]) assert.ok(names.includes(want), `${want} made (${names.join(", ")})`);
  });

  test("(a) SIGKILL the NATS node leading the event stream, restart it later", async () => {
    const watch = watchLeaderElections(nc, STREAM);
    try {
      await faultCase("NATS stream leader kill", "ha-a", async (ctx) => {
        const { leader, killedAt, elected } = await killStreamLeader(watch.elections);
        const okAt = await ctx.okAfter(elected.serverAt);
        ctx.note({
          electedAfterMs: elected.serverAt - killedAt,
          firstOkAfterMs: okAt - elected.serverAt,
          elections: electionsBetween(watch.elections, killedAt, okAt),
        });
        await leader.restart();
        await healedOrRestarted(ha, leader);
      });
    } finally {
      watch.stop();
    }
  });

  test("(b) SIGKILL the Redis primary: the sentinels promote the replica", async () => {
    await faultCase("Redis primary kill", "ha-b", async (ctx) => {
      const { primary, killedAt, promotedAt, switchedAt } = await killRedisPrimary();
      const okAt = await ctx.okAfter(promotedAt);
      ctx.note({ promotedAfterMs: promotedAt - killedAt, switchedAfterMs: switchedAt - killedAt, firstOkAfterMs: okAt - promotedAt });
      await primary.restart(); // comes back as a replica of the new master (the sentinels reconfigure it)
      await redisReplicaInSync(primary);
    });
  });

  test("(c) both at once", async () => {
    const watch = watchLeaderElections(nc, STREAM);
    try {
      await faultCase("both at once", "ha-c", async (ctx) => {
        const [nats, redis] = await Promise.all([killStreamLeader(watch.elections), killRedisPrimary()]);
        const last = Math.max(nats.elected.serverAt, redis.promotedAt);
        const okAt = await ctx.okAfter(last);
        ctx.note({
          electedAfterMs: nats.elected.serverAt - nats.killedAt,
          promotedAfterMs: redis.promotedAt - redis.killedAt,
          switchedAfterMs: redis.switchedAt - redis.killedAt,
          firstOkAfterMs: okAt - last,
          elections: electionsBetween(watch.elections, nats.killedAt, okAt),
        });
        await Promise.all([nats.leader.restart(), redis.primary.restart()]);
        await Promise.all([healedOrRestarted(ha, nats.leader), redisReplicaInSync(redis.primary)]);
      });
    } finally {
      watch.stop();
    }
  });

  test("(d) a rolling restart of every NATS node: step-downs, lame-duck mode, restart", async () => {
    await faultCase("NATS rolling restart", "ha-d", () => rollingNatsRestart(ha));
  });

  test("(e) the Redis primary handed over: SENTINEL FAILOVER", async () => {
    await faultCase("Redis planned failover", "ha-e", async (ctx) => {
      const { old, asked, switchedAt } = await plannedRedisFailover(ha);
      const promotedAt = promotedAfter(asked, switchedAt);
      const okAt = await ctx.okAfter(promotedAt);
      ctx.note({ promotedAfterMs: promotedAt - asked, switchedAfterMs: switchedAt - asked, firstOkAfterMs: okAt - promotedAt });
      await redisReplicaInSync(old);
    });
  });
});
