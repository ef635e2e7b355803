/**
 * The fault injector of the chaos run. Faults are planned up front (every kind of the run's mode
 * `perKind` times, in a seeded random order) and injected one at a time, each at its point of the
 * operation stream; whatever a fault took down comes back after a short random delay, before the
 * next fault. The kinds of each mode are data (KINDS_BY_MODE), each kind's injection one entry of
 * INJECT.
 *
 * Both modes: journal / controller / node-agent SIGKILL (a journal kill waits, ≤ 5 s, until a
 * replica has a create in flight, and kills that one), Redis FLUSHALL, and a FLUSHALL during a
 * rebuild (a second flush as soon as a replica starts replaying into the flushed Redis). With
 * `--ha` FLUSHALL goes to the primary the sentinels name and replicates.
 * One server (issue 10): Redis restart, nats-server restart.
 * Replicated (`--ha`, issue 24): SIGKILL of the NATS node leading the cluster's event stream,
 * SIGKILL of the Redis primary, SIGSTOP of one NATS node for longer than a Raft election.
 * On hosts (`--hosts`, issue 39): partitions made with the hosts' packet filters (partitions.ts).
 */
import type { LocalServer, Sample } from "@csi/testkit";
import type { Redis } from "ioredis";
import { type HaServers, redisReplicaInSync, streamLeaderOf, until } from "../ha-servers.js";
import type { Random } from "../random.js";
import type { Stack, StackService } from "../stack.js";
import { PARTITION_KINDS, type PartitionKind, type Partitions } from "./partitions.js";

export const FAULT_KINDS = [
  "journal-kill",
  "controller-kill",
  "node-agent-kill",
  "redis-flush",
  "redis-restart",
  "redis-flush-during-rebuild",
  "nats-restart",
  "nats-leader-kill",
  "redis-primary-kill",
  "nats-partition",
  "power-cut",
  ...PARTITION_KINDS,
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The stack a run uses: one nats-server and one redis-server, the replicated servers (`--ha`), or those on three hosts (`--hosts`). */
export type StackMode = "single" | "ha" | "hosts";
export const modeOf = (ha: boolean, hosts = false): StackMode => (hosts ? "hosts" : ha ? "ha" : "single");

/**
 * The kinds each mode injects. With `--ha` a restart of "the" Redis or "the" nats-server has no
 * meaning: they are replaced by the kill of the Redis primary and of the event stream's NATS
 * leader (the replicated counterparts: the server that matters goes away and another takes over),
 * and the freeze of a NATS node is added. FLUSHALL keeps its meaning (an operator's mistake on the
 * primary, replicated to the replica), so both flush kinds stay (docs/chaos.md, "--ha").
 */
export const KINDS_BY_MODE: Readonly<Record<StackMode, readonly FaultKind[]>> = {
  single: ["journal-kill", "controller-kill", "node-agent-kill", "redis-flush", "redis-restart", "redis-flush-during-rebuild", "nats-restart"],
  ha: [
    "journal-kill",
    "controller-kill",
    "node-agent-kill",
    "redis-flush",
    "redis-flush-during-rebuild",
    "nats-leader-kill",
    "redis-primary-kill",
    "nats-partition",
  ],
  // Partitions between hosts (partitions.ts); the process faults stay --ha's (docs/chaos.md, "Hosts, not processes").
  hosts: PARTITION_KINDS,
};

/** The kinds of a `--power-cut` run (single or `--ha`): the cut of the whole stack only (power-cut.ts). */
export const POWER_CUT_KINDS: readonly FaultKind[] = ["power-cut"];

/** Which faults an operation depends on: node-agent faults only matter to node operations. */
export const NODE_FAULTS: ReadonlySet<FaultKind> = new Set(["node-agent-kill"]);

/** The journal commands that count as creates in flight (csi_journal_commands_in_flight{command}). */
export const CREATE_COMMANDS: readonly string[] = ["volume.create", "snapshot.create"];

export interface FaultRecord {
  kind: FaultKind;
  /** ms since the run started: the moment of the kill (flush, stop, freeze). */
  at: number;
  /** When what it took down was back (ms since the run started). */
  restoredAt: number;
  /** The replica or server it hit. */
  target: string;
  /** Journal replicas still running right after a journal SIGKILL. */
  journalsUp?: number;
  /** Journal SIGKILL: what the killed replica had in flight at the last look before the kill, and how long the kill waited for it. */
  inFlight?: { creates: number; commands: number; waitedMs: number };
  /** NATS leader kill, freeze of the leader, Redis primary kill: from the fault until another node led the stream / was named master. */
  tookOverMs?: number;
  /** NATS freeze: whether the frozen node led the event stream. */
  ledStream?: boolean;
  note?: string;
}

/** Every kind of `kinds` `perKind` times, in a seeded random order. Pure. */
export function planFaults(kinds: readonly FaultKind[], perKind: number, random: Random): FaultKind[] {
  return random.shuffle(kinds.flatMap((k) => Array.from({ length: perKind }, () => k)));
}

/** The operation number at which fault i (of n) is due: evenly spread over the first 90 % of `ops`. Pure. */
export function faultDueAt(i: number, n: number, ops: number): number {
  return Math.floor(((i + 1) * ops * 0.9) / (n + 1));
}

/** What a journal replica has in flight (its csi_journal_commands_in_flight). */
export interface JournalLoad {
  name: string;
  creates: number;
  /** Every command in flight, creates included. */
  commands: number;
}

/** A replica's load from its metrics: the samples of csi_journal_commands_in_flight. Pure. */
export function loadOf(name: string, samples: readonly Sample[]): JournalLoad {
  const mine = samples.filter((x) => x.name === "csi_journal_commands_in_flight");
  const sum = (xs: readonly Sample[]) => xs.reduce((n, x) => n + x.value, 0);
  return { name, creates: sum(mine.filter((x) => CREATE_COMMANDS.includes(x.labels.command ?? ""))), commands: sum(mine) };
}

/** A replica with creates (or, with `what` "commands", any command) in flight, picked at random among them; undefined if none. Pure. */
export function loadedReplica(loads: readonly JournalLoad[], what: "creates" | "commands", random: Random): JournalLoad | undefined {
  const busy = loads.filter((l) => l[what] > 0);
  return busy.length > 0 ? random.pick(busy) : undefined;
}

export interface FaultDeps {
  stack: Stack;
  /** A connection of the injector's own (FLUSHALL; with `--ha` it follows the sentinels' master). */
  redis: Redis;
  /** Keys whose appearance shows a replay in progress after a flush. */
  replayMarkers: string[];
  /** The cluster's event stream (the NATS leader kill and freeze look at its leader). */
  stream: string;
  /** What each running journal replica has in flight now (a replica that cannot be read is left out). */
  journalLoad: () => Promise<JournalLoad[]>;
  /** Told when a journal kill starts (true) and stops (false) waiting for work in flight: the operations should not wait then. */
  waitingForWork?: (on: boolean) => void;
  random: Random;
  clock: () => number;
  /** Down time before a restart: [min, max] ms. */
  downMs?: [number, number];
  /** How long a journal kill waits for a create in flight before it takes any command, or none. */
  inFlightWaitMs?: number;
  /** How long a NATS node stays frozen: [min, max] ms (longer than the Raft election timeout, 4–9 s). */
  freezeMs?: [number, number];
  /** `--power-cut`: cuts the power of the whole stack and brings it back (power-cut.ts); what it says goes in the record's note. */
  powerCut?: () => Promise<string>;
  /** `--hosts`: the partitions between the hosts (partitions.ts). */
  partitions?: Partitions;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const IN_FLIGHT_POLL_MS = 10;
/** A new stream leader or Redis master, or a healed stream / replica, must come within this. */
const TAKEOVER_MS = 60_000;
const s1 = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** One injection: `hit()` marks the moment of the fault; the result is the record without kind/at/restoredAt. */
type Injection = (d: FaultDeps, hit: () => void) => Promise<Omit<FaultRecord, "kind" | "at" | "restoredAt">>;

/** Injects one fault and restores what it took down; resolves when the system is whole again. */
export async function injectFault(kind: FaultKind, d: FaultDeps): Promise<FaultRecord> {
  let at = d.clock();
  const rest = await INJECT[kind](d, () => {
    at = d.clock();
  });
  return { kind, at, restoredAt: d.clock(), ...rest };
}

const downTime = (d: FaultDeps) => sleep(d.random.int(...(d.downMs ?? [200, 1500])));

/** Starts attempts at a service that is not ready in time or exits before it is (as a kubelet restarts a container). */
export const START_ATTEMPTS = 3;
const START_PAUSE_MS = 2000;

/**
 * Starts `s` (unless it runs), up to START_ATTEMPTS times with a pause between: the errors of
 * the attempts that failed (all of them, and the last one rejected, if it never started).
 */
export async function startService(s: StackService): Promise<string[]> {
  const failed: string[] = [];
  for (;;) {
    try {
      await s.start();
      return failed;
    } catch (err) {
      failed.push(String((err as Error)?.message ?? err));
      if (failed.length >= START_ATTEMPTS) throw new Error(`${s.name} did not start in ${START_ATTEMPTS} attempts: ${failed.join(" / ").slice(0, 1500)}`);
      await sleep(START_PAUSE_MS);
    }
  }
}

/** SIGKILL a service, start it again after the down time. */
async function crash(d: FaultDeps, hit: () => void, s: StackService, more: Partial<FaultRecord> = {}) {
  hit();
  await s.kill();
  const journalsUp = d.stack.journals.filter((j) => j.running).length;
  await downTime(d);
  const failed = await startService(s);
  const note = failed.length > 0 ? { note: `started again on attempt ${failed.length + 1}; before: ${failed.join(" / ").slice(0, 800)}` } : {};
  return { target: s.name, ...more, ...note, ...(s.name.startsWith("journal") ? { journalsUp } : {}) };
}

/** Waits (≤ inFlightWaitMs) until a journal replica has a create in flight and kills that one (else one with any command in flight, else any). */
async function journalKill(d: FaultDeps, hit: () => void) {
  const started = Date.now();
  const waitMs = d.inFlightWaitMs ?? 5000;
  let load: JournalLoad | undefined;
  d.waitingForWork?.(true);
  try {
    for (;;) {
      const late = Date.now() - started >= waitMs;
      load = loadedReplica(await d.journalLoad(), late ? "commands" : "creates", d.random);
      if (load || late) break;
      await sleep(IN_FLIGHT_POLL_MS);
    }
  } finally {
    d.waitingForWork?.(false);
  }
  const up = d.stack.journals.filter((j) => j.running);
  const target = up.find((j) => j.name === load?.name) ?? d.random.pick(up.length > 0 ? up : d.stack.journals);
  const inFlight = { creates: load?.creates ?? 0, commands: load?.commands ?? 0, waitedMs: Date.now() - started };
  return crash(d, hit, target, { inFlight });
}

function singleServer(d: FaultDeps, kind: "nats" | "redis"): LocalServer {
  const s = d.stack.servers[kind];
  if (!s) throw new Error(`the chaos stack has no ${kind}-server of its own`);
  return s;
}

async function restartServer(d: FaultDeps, hit: () => void, s: LocalServer) {
  hit();
  await s.stop();
  await downTime(d);
  await s.restart();
  return { target: `${s.kind}-server` };
}

function haOf(d: FaultDeps): HaServers {
  const ha = d.stack.servers.ha;
  if (!ha) throw new Error("this fault needs the replicated servers (--ha)");
  return ha;
}

const nameOf = (ha: HaServers, s: LocalServer) => ha.named().find((n) => n.server === s)?.name ?? `:${s.port}`;

/** SIGKILL the stream's leader; wait for a new one; restart it after the down time; wait until every replica is current. */
async function natsLeaderKill(d: FaultDeps, hit: () => void) {
  const ha = haOf(d);
  const leader = await ha.streamLeader(d.stream);
  const t0 = d.clock();
  hit();
  await leader.kill();
  await until("a new leader of the event stream", async () => (await ha.streamLeader(d.stream)) !== leader, TAKEOVER_MS);
  const tookOverMs = d.clock() - t0;
  await downTime(d);
  await leader.restart();
  await ha.streamsHealed(TAKEOVER_MS);
  return {
    target: nameOf(ha, leader),
    tookOverMs,
    note: `new leader after ${s1(tookOverMs)}, every replica of every stream current after ${s1(d.clock() - t0)}`,
  };
}

/** SIGKILL the primary the sentinels name; wait for another; restart the old one; wait until it is a replica in sync. */
async function redisPrimaryKill(d: FaultDeps, hit: () => void) {
  const ha = haOf(d);
  const primary = await ha.redisPrimary();
  const t0 = d.clock();
  hit();
  await primary.kill();
  await ha.promotedAway(primary, TAKEOVER_MS);
  const tookOverMs = d.clock() - t0;
  await downTime(d);
  await primary.restart(); // the sentinels make it a replica of the new master
  await redisReplicaInSync(primary, TAKEOVER_MS);
  return { target: nameOf(ha, primary), tookOverMs, note: `new master after ${s1(tookOverMs)}, old one a replica in sync after ${s1(d.clock() - t0)}` };
}

/**
 * SIGSTOP one NATS node (any of the three) for 10–12 s — past the Raft election timeout, so a frozen
 * leader is replaced — then SIGCONT, and wait until every replica of the stream is current.
 */
async function natsPartition(d: FaultDeps, hit: () => void) {
  const ha = haOf(d);
  const node = d.random.pick(ha.nats);
  const pid = node.pid;
  if (pid === undefined) throw new Error(`${nameOf(ha, node)} does not run`);
  const ledStream = (await ha.streamLeader(d.stream)) === node;
  const freezeMs = d.random.int(...(d.freezeMs ?? [10_000, 12_000]));
  const t0 = d.clock();
  const thawAt = Date.now() + freezeMs;
  let tookOverMs: number | undefined;
  hit();
  process.kill(pid, "SIGSTOP");
  try {
    // A frozen leader: when do the others elect a new one (asked through them, never the frozen node)?
    while (ledStream && tookOverMs === undefined && Date.now() < thawAt) {
      const leader = await streamLeaderOf(ha.nats, d.stream, node).catch(() => undefined);
      if (leader && leader !== node) tookOverMs = d.clock() - t0;
      else await sleep(200);
    }
    await sleep(thawAt - Date.now());
  } finally {
    process.kill(pid, "SIGCONT");
  }
  await ha.streamsHealed(TAKEOVER_MS);
  const led = ledStream
    ? `led the stream, ${tookOverMs === undefined ? "no new leader while frozen" : `new leader after ${s1(tookOverMs)}`}`
    : "did not lead the stream";
  return {
    target: nameOf(ha, node),
    ledStream,
    ...(tookOverMs === undefined ? {} : { tookOverMs }),
    note: `frozen ${s1(freezeMs)}, ${led}; every replica of every stream current ${s1(d.clock() - t0 - freezeMs)} after SIGCONT`,
  };
}

const INJECT: Record<FaultKind, Injection> = {
  "journal-kill": journalKill,
  "controller-kill": (d, hit) => crash(d, hit, d.stack.controller),
  "node-agent-kill": (d, hit) => crash(d, hit, d.stack.nodeAgent),
  "redis-flush": async (d, hit) => {
    hit();
    await d.redis.flushall();
    return { target: "redis" };
  },
  "redis-flush-during-rebuild": async (d, hit) => {
    hit();
    await d.redis.flushall();
    const seen = await waitForReplay(d);
    await sleep(d.random.int(0, 20));
    await d.redis.flushall();
    return { target: "redis", note: seen ? "second flush while a replay was writing" : "no replay seen within 3 s; flushed again anyway" };
  },
  "redis-restart": (d, hit) => restartServer(d, hit, singleServer(d, "redis")),
  "nats-restart": (d, hit) => restartServer(d, hit, singleServer(d, "nats")),
  "nats-leader-kill": natsLeaderKill,
  "redis-primary-kill": redisPrimaryKill,
  "nats-partition": natsPartition,
  "power-cut": async (d, hit) => {
    if (!d.powerCut) throw new Error("a power cut needs the stack's data on the power-cut harness (--power-cut)");
    hit();
    return { target: "the whole stack", note: await d.powerCut() };
  },
  ...(Object.fromEntries(PARTITION_KINDS.map((k) => [k, (d: FaultDeps, hit: () => void) => partition(d, k, hit)])) as Record<PartitionKind, Injection>),
};

function partition(d: FaultDeps, kind: PartitionKind, hit: () => void) {
  if (!d.partitions) throw new Error("a partition needs the stack on hosts (--hosts)");
  return d.partitions.inject(kind, d.random, hit);
}

/** After a flush: wait (≤ 3 s) until a replica has started writing the projection again. */
async function waitForReplay(d: FaultDeps): Promise<boolean> {
  const until = Date.now() + 3000;
  while (Date.now() < until) {
    if ((await d.redis.exists(...d.replayMarkers)) > 0) return true;
    await sleep(5);
  }
  return false;
}
