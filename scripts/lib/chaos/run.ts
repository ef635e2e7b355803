/**
 * The chaos run (`npm run chaos`, test/chaos.test.ts): a fresh stack in a temporary directory
 * (own nats-server and redis-server — or with `--ha` 3 NATS nodes and a Redis primary + replica
 * behind 3 Sentinels — N journal replicas, controller, node-agent), mixed CSI operations from a
 * CO-like client while faults are injected, then
 *
 *   settle     everything restarted and healthy; given-up operations retried to a final answer
 *   check      invariants against the system (pool, projection vs a replay of the log, locks,
 *              node state, mounts, loop devices, listings)
 *   teardown   unpublish/unstage what was published, delete every snapshot and volume
 *   check      the same invariants again (now everything must be gone)
 *
 * Whatever happens — failure, exception, SIGINT — the services and servers are stopped, what is
 * mounted or attached under the temporary directory is released, and the directory is removed.
 */
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir, mkdtemp, realpath } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { subjects } from "@csi/contracts";
import { keysFor } from "@csi/journal/redis";
import { csiClient, loadClusters, natsConnectOptions, redisConnectOptions, SentinelSafeRedis, within } from "@csi/runtime";
import { cleanupUnder, scrape } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Redis } from "ioredis";
import { streamCopiesOf } from "../ha-servers.js";
import { sweepHosts } from "../hosts/netns.js";
import type { HostServers } from "../hosts/servers.js";
import { startHostStack } from "../hosts/stack.js";
import { seeded } from "../random.js";
import { type Stack, type StackService, startStack, writeLocalClusters } from "../stack.js";
import { copiesDisagree } from "../stream-copies.js";
import { judgeAfterCut, observeAfterCut, patientJournal } from "./after-cut.js";
import { checkFindings, checkObservation, type Invariant, mergeInvariants, type Observation } from "./check.js";
import { CoClient, CoStats } from "./co-client.js";
import {
  type FaultDeps,
  type FaultKind,
  type FaultRecord,
  faultDueAt,
  injectFault,
  type JournalLoad,
  KINDS_BY_MODE,
  loadOf,
  modeOf,
  POWER_CUT_KINDS,
  planFaults,
  startService,
} from "./faults.js";
import { type Failover, type FaultFigures, faultFigures, journalFailovers, slowestOp } from "./figures.js";
import { nodeStateFileOf, observe } from "./observe.js";
import type { ChaosOptions } from "./options.js";
import { Partitions } from "./partitions.js";
import { OpGate, PowerCuts, powerCutRound } from "./power-cut.js";
import { type OpRecord, Workload } from "./workload.js";

/** Calm before a journal kill, so that its failover is not measured together with the fault before it. */
const FAILOVER_CALM_MS = 1500;
/** How many due faults the operations may run ahead of. */
const FAULTS_BEHIND = 3;
/** Ahead of the faults, one worker goes on, with this pause between its operations. */
const TRICKLE_PAUSE_MS = 200;

export interface ChaosResult {
  options: ChaosOptions;
  invariants: Invariant[];
  faults: FaultRecord[];
  faultFigures: FaultFigures[];
  failovers: Failover[];
  /** Images the operator's gc removed after settle: creates' leftovers of journals killed between an image and its events. */
  leakedRemoved: string[];
  ops: OpRecord[];
  stats: CoStats;
  slowest: OpRecord | undefined;
  durationMs: number;
  /** No invariant was violated. */
  ok: boolean;
}

export interface ChaosHooks {
  signal?: AbortSignal;
  /** Progress lines. */
  say?: (msg: string) => void;
}

/** Environment of the chaos stack's services: node heartbeats every second, catch-up every 3 s (the settle phase waits for one). */
export const CHAOS_ENV = { HEARTBEAT_MS: "1000", CATCHUP_EVERY_MS: "3000" };
const CATCH_UP_WAIT_MS = 4000;
/** Locks of a killed holder live for their TTL (10 s by default): the check waits that long for them to go. */
const LOCK_GRACE_MS = 15_000;
const NODE_ID = "chaos-node";
/** A service that does not serve within this after a (re)start counts as not coming back. */
const READY_TIMEOUT_MS = 60_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What a run holds that must be released whatever happens (runChaos's finally). */
interface Held {
  logStream?: WriteStream;
  stack?: Stack;
  co?: CoClient;
  nc?: NatsConnection;
  redis?: Redis;
  power?: PowerCuts;
}

/** A run's fixed facts: its options, its directories, its clock. */
interface RunBase {
  opts: ChaosOptions;
  say: (msg: string) => void;
  signal: AbortSignal | undefined;
  clock: () => number;
  root: string;
  dataDir: string;
  kubeletDir: string;
  held: Held;
}

/** A run with its stack up: what the load, the faults and the checks use. */
interface Live extends RunBase {
  stack: Stack;
  clusterID: string;
  poolRoot: string;
  keys: ReturnType<typeof keysFor>;
  redis: Redis;
  stats: CoStats;
  co: CoClient;
  workload: Workload;
  kinds: readonly FaultKind[];
  stream: string;
  faults: FaultRecord[];
  afterCuts: Invariant;
  /** Services that exited by themselves (run.ts, crashesOf), each found after a fault or at settle. */
  crashes: Invariant;
  gate: OpGate;
  partitions: Partitions | undefined;
}

export async function runChaos(opts: ChaosOptions, hooks: ChaosHooks = {}): Promise<ChaosResult> {
  const t0 = Date.now();
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "csi-chaos-")));
  const base: RunBase = {
    opts,
    say: hooks.say ?? (() => {}),
    signal: hooks.signal,
    clock: () => Date.now() - t0,
    root,
    dataDir: path.join(root, "data"),
    kubeletDir: path.join(root, "kubelet"),
    held: {},
  };
  const { held } = base;
  try {
    const live = await setUp(base);
    await runLoad(live);
    base.signal?.throwIfAborted();
    return await settleAndCheck(live);
  } finally {
    held.co?.close();
    await held.nc?.close().catch(() => {});
    held.redis?.disconnect();
    await held.stack?.stop();
    await held.power?.end(base.kubeletDir);
    await cleanupUnder(root);
    await new Promise<void>((resolve) => (held.logStream ? held.logStream.end(resolve) : resolve()));
  }
}

/** The stack of the run's mode: one machine's (startStack, with `--ha` replicated) or three hosts' (`--hosts`). */
async function startChaosStack(b: RunBase, runDir: string, clustersFile: string): Promise<Stack> {
  const { opts, held, signal } = b;
  const onLine = held.logStream ? (line: string) => held.logStream?.write(`${line}\n`) : undefined;
  const common = { dataDir: b.dataDir, runDir, nodeId: NODE_ID, readyTimeoutMs: READY_TIMEOUT_MS, onLine, ...(signal ? { signal } : {}) };
  const servers = opts.hosts
    ? "3 hosts (network namespaces), on each a NATS node (streams at 3 replicas), a sentinel, a journal and a node-agent; Redis primary on a, replica on b; the controller on a"
    : opts.ha
      ? `3 NATS nodes (streams at 3 replicas), Redis primary + replica behind 3 sentinels, ${opts.replicas} journal replicas, controller, node-agent`
      : `nats-server, redis-server, ${opts.replicas} journal replicas, controller, node-agent`;
  b.say(`starting a stack in ${b.root}: ${servers}`);
  if (opts.hosts) {
    const swept = sweepHosts();
    if (swept.length > 0) b.say(`removed what earlier runs left: ${swept.join(", ")}`);
    return startHostStack({ ...common, clustersFile, env: CHAOS_ENV });
  }
  return startStack({ ...common, ha: opts.ha, journalReplicas: opts.replicas, env: { ...CHAOS_ENV, CLUSTERS_FILE: clustersFile } });
}

/** Directories, the stack, the injector's Redis connection, the CO client and the workload. */
async function setUp(b: RunBase): Promise<Live> {
  const { opts, held, signal } = b;
  const runDir = path.join(b.root, "run");
  // --power-cut: the data directory is the harness's mount, cut and put back at the same path.
  if (opts.powerCut) held.power = await PowerCuts.start(b.root, b.dataDir);
  if (opts.logFile) held.logStream = createWriteStream(opts.logFile, { flags: "w" });
  await mkdir(b.kubeletDir, { recursive: true });
  await mkdir(runDir, { recursive: true });
  // Our own clusters file (whatever CLUSTERS_FILE says): the pool must live under the temporary directory.
  const clustersFile = writeLocalClusters(runDir, NODE_ID);
  const stack = await startChaosStack(b, runDir, clustersFile);
  held.stack = stack;
  const clusters = loadClusters(clustersFile, b.dataDir);
  const cluster = clusters.get(clusters.defaultCluster);
  const poolRoot = cluster?.pools[0]?.root;
  if (!cluster || poolRoot === undefined) throw new Error("the chaos stack has no default cluster with a file pool");
  const redis = new SentinelSafeRedis(stack.redisUrl, { ...redisConnectOptions(stack.redisAccess), maxRetriesPerRequest: 3 });
  held.redis = redis;
  redis.on("error", () => {}); // the injector restarts it
  const stats = new CoStats();
  const co = new CoClient({
    controllerEndpoint: stack.controllerEndpoint,
    nodeEndpoint: stack.nodeEndpoint,
    random: seeded(opts.seed + 2),
    stats,
    ...(signal ? { signal } : {}),
  });
  held.co = co;
  const stream = subjects.streamName(cluster.clusterID);
  const ha = stack.servers.ha;
  return {
    ...b,
    stack,
    clusterID: cluster.clusterID,
    poolRoot,
    keys: keysFor(cluster.clusterID, cluster.instance),
    redis,
    stats,
    co,
    workload: new Workload({ co, random: seeded(opts.seed), nodeId: NODE_ID, kubeletDir: b.kubeletDir, clock: b.clock, namePrefix: `chaos${opts.seed}` }),
    kinds: opts.powerCut ? POWER_CUT_KINDS : KINDS_BY_MODE[modeOf(opts.ha, opts.hosts)],
    stream,
    faults: [],
    afterCuts: { name: "after every power cut: what the CO was told is there", violations: [] },
    crashes: { name: "no service exits by itself", violations: [] },
    gate: new OpGate(),
    partitions: opts.hosts && ha && "hosts" in ha ? new Partitions(ha as HostServers, stream) : undefined,
  };
}

/** How the operations keep pace with the faults (shared by the injector and the workers). */
interface Pace {
  plan: FaultKind[];
  started: number;
  /** The last operation: `--ops`, or more so that the last 5 % run after the last fault. */
  endAt: number;
  /** A journal kill is waiting for a create in flight. */
  waitingForWork: boolean;
}

/** Operations from `concurrency` workers while the planned faults are injected. */
async function runLoad(l: Live): Promise<void> {
  const pace: Pace = { plan: planFaults(l.kinds, l.opts.faultsPerKind, seeded(l.opts.seed + 1)), started: 0, endAt: l.opts.ops, waitingForWork: false };
  await Promise.all([...Array.from({ length: l.opts.concurrency }, (_, w) => worker(l, pace, w)), injector(l, pace)]);
}

async function injector(l: Live, pace: Pace): Promise<void> {
  const { plan } = pace;
  const { opts, faults, signal } = l;
  for (const [i, kind] of plan.entries()) {
    while (pace.started < faultDueAt(i, plan.length, opts.ops) && !signal?.aborted) await sleep(20);
    // A journal kill is measured alone (the 2 s failover bound): the system has been calm for a moment.
    if (kind === "journal-kill") await sleep(Math.max(0, (faults.at(-1)?.restoredAt ?? 0) + FAILOVER_CALM_MS - l.clock()));
    if (signal?.aborted) return;
    try {
      faults.push(await injectFault(kind, faultDeps(l, pace, i)));
    } catch (err) {
      const at = l.clock();
      faults.push({ kind, at, restoredAt: at, target: "?", note: `injection failed: ${String((err as Error)?.message ?? err).slice(0, 1500)}` });
      await makeWhole(l.stack, l.workload, l.say);
    }
    const f = faults.at(-1);
    l.say(`fault ${faults.length}/${plan.length}: ${kind} (${f?.target}) at op ${pace.started}${f?.note ? `: ${f.note}` : ""}`);
    await restartCrashed(l, `after fault ${faults.length} (${kind})`);
  }
  pace.endAt = Math.max(opts.ops, pace.started + Math.ceil(opts.ops * 0.05));
}

function faultDeps(l: Live, pace: Pace, i: number): FaultDeps {
  const power = l.held.power;
  return {
    stack: l.stack,
    redis: l.redis,
    replayMarkers: [l.keys.projection, l.keys.index("volume")],
    stream: l.stream,
    journalLoad: () => journalLoad(l.stack),
    waitingForWork: (on) => {
      pace.waitingForWork = on;
    },
    random: seeded(l.opts.seed + 3 + i),
    clock: l.clock,
    ...(power ? { powerCut: () => cutRound(l, power) } : {}),
    ...(l.partitions ? { partitions: l.partitions } : {}),
  };
}

async function worker(l: Live, pace: Pace, w: number): Promise<void> {
  const { opts, faults, signal, stats } = l;
  const dueBy = (n: number) => pace.plan.filter((_, i) => faultDueAt(i, pace.plan.length, opts.ops) <= n).length;
  for (;;) {
    const faultsLeft = faults.length < pace.plan.length;
    if (signal?.aborted || (pace.started >= pace.endAt && !faultsLeft)) return;
    // Faults keep pace with the operations: when the operations are more than a few due points
    // ahead of the faults done (a fault may take 15 s with --ha), or past 95 % with faults left,
    // all workers but the first wait and the first pauses between operations, so that
    // operations still run through every fault without running far ahead of them; while a
    // journal kill waits for work in flight, all run.
    const ahead = faults.length < dueBy(pace.started) - FAULTS_BEHIND || (pace.started >= opts.ops * 0.95 && faultsLeft);
    if (ahead && !pace.waitingForWork) {
      await sleep(w > 0 ? 20 : TRICKLE_PAUSE_MS);
      if (w > 0) continue;
    }
    await l.gate.enter();
    pace.started++;
    if (pace.started % 100 === 0) l.say(`op ${pace.started}/${opts.ops} (${faults.length}/${pace.plan.length} faults, ${stats.retries} retries)`);
    await l.workload.run(l.workload.choose()).finally(() => l.gate.leave());
  }
}

/** What each running journal replica has in flight (its /metrics, read within 1 s). */
async function journalLoad(s: Stack): Promise<JournalLoad[]> {
  const loads = await Promise.all(
    s.journals.map(async (j) => {
      const url = j.running ? j.metricsUrl : undefined;
      if (!url) return undefined;
      const samples = await within(
        scrape(url).catch(() => undefined),
        1000,
        () => undefined,
      );
      return samples ? loadOf(j.name, samples) : undefined;
    }),
  );
  return loads.filter((l): l is JournalLoad => l !== undefined);
}

const modelOf = (l: Live) => ({
  volumes: [...l.workload.volumes.values()],
  snapshots: [...l.workload.snapshots.values()],
  findings: l.workload.findings,
  nodeId: NODE_ID,
  keys: l.keys,
});

function cutRound(l: Live, pc: PowerCuts) {
  return powerCutRound({
    power: pc,
    stack: l.stack,
    kubeletDir: l.kubeletDir,
    gate: l.gate,
    startService,
    ready: () => waitReady(l.stack, l.signal),
    violations: l.afterCuts.violations,
    check: async () => {
      const m = modelOf(l);
      const c = await connect(natsConnectOptions({ natsUrl: l.stack.natsUrl }, { maxReconnectAttempts: -1 }));
      try {
        return judgeAfterCut(m, await observeAfterCut(c, l.clusterID, m));
      } finally {
        await c.close();
      }
    },
  });
}

/** The invariants as the system shows them now. */
async function look(l: Live, nc: NatsConnection, label: string): Promise<Invariant[]> {
  const deps = { label, redis: l.stack.redisAccess, nc, cluster: l.clusterID, keys: l.keys, poolRoot: l.poolRoot, kubeletDir: l.kubeletDir, co: l.co };
  const nodeStateFile = nodeStateFileOf(l.dataDir, NODE_ID);
  let o: Observation = await observe({ ...deps, nodeStateFile, lockGraceMs: LOCK_GRACE_MS });
  // A writer killed between its append and its projection update leaves the projection behind
  // the log until the next catch-up: give the periodic catch-up its chance before comparing.
  for (let i = 0; i < 2 && checkObservation(o, modelOf(l)).some((x) => x.name === "projection == replay of the log" && x.violations.length > 0); i++) {
    await sleep(CATCH_UP_WAIT_MS);
    o = await observe({ ...deps, nodeStateFile, lockGraceMs: 0 });
  }
  return checkObservation(o, modelOf(l));
}

/** Settle, gc, check, teardown, check again; the result. */
async function settleAndCheck(l: Live): Promise<ChaosResult> {
  const { opts, stack, workload, say, faults } = l;
  say("settling: every service up, given-up operations retried");
  await restartCrashed(l, "at settle");
  await makeWhole(stack, workload, say);
  await waitReady(stack, l.signal);
  await workload.settle();
  const nc = await connect(natsConnectOptions({ natsUrl: stack.natsUrl }, { maxReconnectAttempts: -1 }));
  l.held.nc = nc;
  // A journal killed between an image and its create's one write leaves an image no record names
  // (docs/journal.md, "A create in three round trips"): the operator's gc removes it. Every
  // image gc removes must be such a leftover: of a uuid the log holds nothing of.
  say("gc, as an operator runs it after faults: leaked images removed");
  const leaked = await collectLeaks(nc, l.clusterID, opts.seed);
  say("checking the invariants after settle");
  const afterSettle = await look(l, nc, "after settle");
  say("teardown: unpublish, unstage, delete everything");
  await workload.teardown();
  say("checking the invariants after teardown");
  const afterTeardown = await look(l, nc, "after teardown");
  const failovers = journalFailovers(faults, workload.records);
  // With --ha, last (it moves the stream's leadership around): does every node hold the same log?
  const ha = stack.servers.ha;
  if (ha) say("reading each NATS node's copy of the event stream");
  const copies = ha ? (await streamCopiesOf(ha.nats, l.stream)).map((copy, i) => ({ name: `nats-n${i + 1}`, copy })) : [];
  const replicas: Invariant = { name: "the log's replicas hold the same records", violations: copiesDisagree(copies) };
  const extra = [failoverBound(failovers, opts.failoverBoundMs), replicas, leaked.invariant, l.crashes, ...(l.held.power ? [l.afterCuts] : [])];
  const invariants = mergeInvariants(afterSettle, afterTeardown, checkFindings(modelOf(l)), extra);
  return {
    options: opts,
    invariants,
    faults,
    faultFigures: faultFigures(l.kinds, faults, workload.records),
    failovers,
    leakedRemoved: leaked.removed,
    ops: workload.records,
    stats: l.stats,
    slowest: slowestOp(workload.records),
    durationMs: l.clock(),
    ok: invariants.every((i) => i.violations.length === 0),
  };
}

/**
 * The services that exited by themselves (their process ended, not by the injector's kill or stop:
 * those forget the process) with their exit and the first error line they printed; none is
 * expected whatever the fault (a service waits for what it depends on to come back).
 */
export function crashesOf(services: readonly StackService[]): string[] {
  return services.flatMap((s) => {
    const p = s.process;
    if (!p || s.running) return [];
    const why = p.logs.find((line) => /^\w*Error\b/.test(line)) ?? p.logs.at(-1) ?? "";
    return [`${s.name} exited by itself (${p.child.exitCode ?? p.child.signalCode}): ${why.slice(0, 300)}`];
  });
}

/** Each crashed service a violation (with `when`), then started again, as a kubelet restarts a container. */
async function restartCrashed(l: Live, when: string): Promise<void> {
  const crashed = crashesOf([...l.stack.journals, l.stack.controller, l.stack.nodeAgent]);
  if (crashed.length === 0) return;
  l.crashes.violations.push(...crashed.map((c) => `${c} [${when}]`));
  l.say(`${crashed.join("; ")} [${when}]: started again`);
  await makeWhole(l.stack, l.workload, l.say);
}

/** After a journal SIGKILL with ≥ 2 replicas up, creates answered within the bound, none failed. */
function failoverBound(failovers: Failover[], boundMs: number): Invariant {
  return {
    name: "journal failover within the bound",
    violations: failovers
      .filter((f) => f.failed > 0 || (f.ms > boundMs && !f.during))
      .map((f) => `SIGKILL of ${f.fault.target} at ${f.fault.at} ms: ${f.creates} creates answered after ${f.ms} ms (${f.failed} failed), bound ${boundMs} ms`),
  };
}

/**
 * Starts whatever is down (servers first; with `--ha` also waits until every replica of every NATS
 * stream is current); a service that will not come back (START_ATTEMPTS starts) is a finding.
 */
async function makeWhole(stack: Stack, workload: Workload, say: (m: string) => void): Promise<void> {
  const { nats, redis, ha } = stack.servers;
  for (const srv of [nats, redis, ...(ha?.named().map((n) => n.server) ?? [])]) if (srv && !srv.running) await srv.restart();
  await ha?.streamsHealed(READY_TIMEOUT_MS).catch((err: Error) => {
    workload.findings.push({ what: "service did not come back", example: `the NATS streams' replicas: ${err.message.slice(0, 200)}` });
  });
  for (const svc of [...stack.journals, stack.controller, stack.nodeAgent]) {
    await startService(svc).catch((err: Error) => {
      workload.findings.push({ what: "service did not come back", example: err.message.slice(0, 600) });
      say(err.message.slice(0, 600));
    });
  }
}

/** Both sockets answer Probe with ready (up to a minute). */
async function waitReady(stack: Stack, signal?: AbortSignal): Promise<void> {
  for (const endpoint of [stack.controllerEndpoint, stack.nodeEndpoint]) {
    const until = Date.now() + 60_000;
    for (;;) {
      signal?.throwIfAborted();
      const id = csiClient(endpoint, "Identity");
      const ready = await id
        .Probe({}, undefined, { deadline: Date.now() + 5000 })
        .then((p) => p.ready?.value !== false)
        .catch(() => false)
        .finally(() => id.close());
      if (ready) break;
      if (Date.now() > until) throw new Error(`${endpoint} not ready after a minute`);
      await sleep(250);
    }
  }
}

/**
 * `csictl gc --apply --older-than 0` over NATS: the leaked images it removes, and the invariant that
 * each was a create's leftover (an image whose uuid the log holds nothing of) and nothing else was
 * touched but an interrupted build's temporaries.
 */
async function collectLeaks(nc: NatsConnection, cluster: string, seed: number): Promise<{ removed: string[]; invariant: Invariant }> {
  const journal = patientJournal(nc, 120_000);
  const gc = await journal.call(cluster, "audit.gc", { requestId: `chaos-gc-${seed}`, apply: true, olderThanMs: 0, maxActions: 1000 });
  const violations: string[] = [];
  const removed: string[] = [];
  for (const a of gc.actions) {
    if (a.type === "removeTempImage") continue;
    if (a.type !== "removeLeakedImage") {
      violations.push(`gc ${a.type} ${a.pool}/${a.imageName} (${a.outcome}): not a create's leftover`);
      continue;
    }
    const history = a.uuid ? await journal.call(cluster, "volume.history", { uuid: a.uuid, maxEntries: 0 }) : undefined;
    const named = history?.events.filter((e) => "event" in e) ?? []; // the uuid's own subjects (a leak's collection is on its pool's)
    if (!a.uuid || named.length > 0) violations.push(`gc removed ${a.pool}/${a.imageName}, whose uuid the log names (${named.length} events)`);
    else removed.push(a.imageName);
  }
  return { removed, invariant: { name: "gc removes only images of uuids the log never named", violations } };
}
