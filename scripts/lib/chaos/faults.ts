/**
 * The fault injector of the chaos run. Faults are planned up front (every kind `perKind` times,
 * in a seeded random order) and injected one at a time, each at its point of the operation
 * stream; whatever a fault took down comes back after a short random delay, before the next
 * fault. Kinds (issue 10): journal / controller / node-agent SIGKILL, Redis FLUSHALL, Redis
 * restart, a FLUSHALL during a rebuild (a second flush as soon as a replica starts replaying
 * into the flushed Redis), nats-server restart.
 */
import type { Redis } from "ioredis";
import type { Random } from "../random.js";
import type { Stack, StackService } from "../stack.js";

export const FAULT_KINDS = [
  "journal-kill",
  "controller-kill",
  "node-agent-kill",
  "redis-flush",
  "redis-restart",
  "redis-flush-during-rebuild",
  "nats-restart",
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Which faults an operation depends on: node-agent faults only matter to node operations. */
export const NODE_FAULTS: ReadonlySet<FaultKind> = new Set(["node-agent-kill"]);

export interface FaultRecord {
  kind: FaultKind;
  /** ms since the run started. */
  at: number;
  /** When what it took down was back (ms since the run started). */
  restoredAt: number;
  /** The replica or server it hit. */
  target: string;
  /** Journal replicas still running right after a journal SIGKILL. */
  journalsUp?: number;
  note?: string;
}

/** Every kind `perKind` times, in a seeded random order. Pure. */
export function planFaults(perKind: number, random: Random): FaultKind[] {
  return random.shuffle(FAULT_KINDS.flatMap((k) => Array.from({ length: perKind }, () => k)));
}

/** The operation number at which fault i (of n) is due: evenly spread over the first 90 % of `ops`. Pure. */
export function faultDueAt(i: number, n: number, ops: number): number {
  return Math.floor(((i + 1) * ops * 0.9) / (n + 1));
}

export interface FaultDeps {
  stack: Stack;
  /** A connection of the injector's own (FLUSHALL). */
  redis: Redis;
  /** Keys whose appearance shows a replay in progress after a flush. */
  replayMarkers: string[];
  random: Random;
  clock: () => number;
  /** Down time before a restart: [min, max] ms. */
  downMs?: [number, number];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Injects one fault and restores what it took down; resolves when the system is whole again. */
export async function injectFault(kind: FaultKind, d: FaultDeps): Promise<FaultRecord> {
  const { stack, random, clock } = d;
  const [minDown, maxDown] = d.downMs ?? [200, 1500];
  const down = () => sleep(random.int(minDown, maxDown));
  const at = clock();
  const record = (target: string, more: Partial<FaultRecord> = {}): FaultRecord => ({ kind, at, restoredAt: clock(), target, ...more });
  const crash = async (s: StackService, more: Partial<FaultRecord> = {}) => {
    await s.kill();
    const journalsUp = stack.journals.filter((j) => j.running).length;
    await down();
    await s.start();
    return record(s.name, { ...more, ...(s.name.startsWith("journal") ? { journalsUp } : {}) });
  };
  const server = (kind: "nats" | "redis") => {
    const s = stack.servers[kind];
    if (!s) throw new Error(`the chaos stack has no ${kind}-server of its own`);
    return s;
  };
  switch (kind) {
    case "journal-kill": {
      const up = stack.journals.filter((j) => j.running);
      return crash(random.pick(up.length > 0 ? up : stack.journals));
    }
    case "controller-kill":
      return crash(stack.controller);
    case "node-agent-kill":
      return crash(stack.nodeAgent);
    case "redis-flush":
      await d.redis.flushall();
      return record("redis");
    case "redis-flush-during-rebuild": {
      await d.redis.flushall();
      const seen = await waitForReplay(d);
      await sleep(random.int(0, 20));
      await d.redis.flushall();
      return record("redis", { note: seen ? "second flush while a replay was writing" : "no replay seen within 3 s; flushed again anyway" });
    }
    case "redis-restart":
    case "nats-restart": {
      const s = server(kind === "redis-restart" ? "redis" : "nats");
      await s.stop();
      await down();
      await s.restart();
      return record(`${s.kind}-server`);
    }
    default: {
      const never: never = kind;
      throw new Error(`unknown fault ${never}`);
    }
  }
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
