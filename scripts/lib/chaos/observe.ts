/**
 * What the chaos checker looks at, read from the real system: the pool directory, the Redis
 * projection and its locks, a replay of the JetStream log into an empty Redis database by the
 * journal's own projector (services/journal Projector + mutationsFor), the node-agent's state
 * file, mounts and loop devices, and the controller's listings.
 */
import { readdir } from "node:fs/promises";
import path from "node:path";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { Projector } from "@csi/journal/projection";
import type { Keys } from "@csi/journal/redis";
import { RedisStore } from "@csi/journal/redis";
import { NodeState, StateFile } from "@csi/node-agent/testing";
import { createLogger, type RedisAccess, redisConnectOptions, SentinelSafeRedis } from "@csi/runtime";
import { loopsUnder, mountsLeftUnder } from "@csi/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Redis } from "ioredis";
import type { Keyspace, KeyValue, NodeVolume, Observation } from "./check.js";
import type { CoClient } from "./co-client.js";

/** The Redis database the log is replayed into (the services use database 0). */
export const REPLAY_DB = 1;

export interface ObserveDeps {
  label: string;
  /** The stack's Redis (URL, or the sentinels: the checker follows the master they name through a failover). */
  redis: RedisAccess;
  nc: NatsConnection;
  cluster: string;
  keys: Keys;
  poolRoot: string;
  kubeletDir: string;
  nodeStateFile: string;
  co: CoClient;
  /** How long lock keys may take to go (their TTL) before they count as held. */
  lockGraceMs: number;
}

/** A checker's connection to database `db`: Sentinel-aware with `--ha` (a client that survives the failover, runtime's SentinelSafeRedis). */
const connectRedis = (a: RedisAccess, db: number): Redis => new SentinelSafeRedis(a.redisUrl, { ...redisConnectOptions(a), db, maxRetriesPerRequest: 2 });

/** Every key under `pattern` with its value. */
export async function dumpKeys(redis: Redis, pattern: string): Promise<Keyspace> {
  const out: Keyspace = new Map();
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", "500");
    cursor = next;
    for (const key of keys) {
      const v = await readKey(redis, key);
      if (v) out.set(key, v);
    }
  } while (cursor !== "0");
  return out;
}

async function readKey(redis: Redis, key: string): Promise<KeyValue | undefined> {
  const type = await redis.type(key);
  switch (type) {
    case "none":
      return undefined;
    case "hash":
      return { type, fields: await redis.hgetall(key) };
    case "set":
      return { type, members: await redis.smembers(key) };
    case "zset":
      return { type, members: await redis.zrange(key, "0", "-1") };
    case "string":
      return { type, value: (await redis.get(key)) ?? "" };
    default:
      return { type: "other", value: type };
  }
}

/** The projection's own keys: `{c}:csi.*` (locks and the replay watermark are not state). */
const projectionPattern = (k: Keys) => `${escapeGlob(k.prefix)}csi.*`;
const escapeGlob = (s: string) => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);

/** Replays the whole log into database REPLAY_DB (emptied first) with the journal's projector, and dumps it. */
export async function replayLog(d: Pick<ObserveDeps, "redis" | "nc" | "cluster" | "keys">): Promise<Keyspace> {
  const redis = connectRedis(d.redis, REPLAY_DB);
  try {
    await redis.flushdb();
    const log = new EventLog(d.nc, { cluster: d.cluster });
    await new Projector(log, new RedisStore(redis, d.keys), createLogger("chaos-replay", "warn", 2)).catchUp();
    return await dumpKeys(redis, projectionPattern(d.keys));
  } finally {
    await redis.flushdb().catch(() => {});
    redis.disconnect();
  }
}

/** Lock keys still there after waiting up to `graceMs` for them to expire or be released. */
async function heldLocks(redis: Redis, k: Keys, graceMs: number): Promise<string[]> {
  const pattern = `${escapeGlob(k.lock(""))}*`;
  const until = Date.now() + graceMs;
  for (;;) {
    // A request's served mark and kept answer (services/journal/src/commands/run-served.ts) stay by design: not locks anyone holds.
    const marks = [k.lock("served."), k.lock("answer.")];
    const keys = [...(await dumpKeys(redis, pattern)).keys()].filter((key) => !marks.some((m) => key.startsWith(m)));
    if (keys.length === 0 || Date.now() >= until) {
      return Promise.all(keys.map(async (key) => `${key} (ttl ${await redis.pttl(key)} ms)`));
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function nodeVolumes(file: string): Promise<NodeVolume[]> {
  const state = await new StateFile(file, NodeState).load();
  return Object.values(state?.volumes ?? {})
    .filter((v) => v.staging || v.publishes.length > 0)
    .map((v) => ({ uuid: v.uuid, imagePath: v.imagePath, stagingPath: v.staging?.path, publishes: v.publishes.map((p) => p.target) }));
}

/** Every id of a paged CSI listing. */
async function listAll(page: (token: string) => Promise<{ ids: string[]; next: string }>): Promise<string[]> {
  const ids: string[] = [];
  let token = "";
  for (let i = 0; i < 10_000; i++) {
    const p = await page(token);
    ids.push(...p.ids);
    token = p.next;
    if (!token) break;
  }
  return ids;
}

/** Every volume and snapshot id the controller lists (paged), or why it could not list. */
export async function listed(co: CoClient): Promise<Observation["listed"]> {
  try {
    const volumes = await listAll(async (starting_token) => {
      const r = await co.controller("ListVolumes", { max_entries: 200, starting_token });
      return { ids: r.entries.map((e) => e.volume?.volume_id ?? ""), next: r.next_token };
    });
    const snapshots = await listAll(async (starting_token) => {
      const r = await co.controller("ListSnapshots", { max_entries: 200, starting_token });
      return { ids: r.entries.map((e) => e.snapshot?.snapshot_id ?? ""), next: r.next_token };
    });
    return { volumes, snapshots };
  } catch (err) {
    return { error: String((err as Error)?.message ?? err).slice(0, 200) };
  }
}

export async function observe(d: ObserveDeps): Promise<Observation> {
  const redis = connectRedis(d.redis, 0);
  try {
    const locks = await heldLocks(redis, d.keys, d.lockGraceMs);
    const projection = await dumpKeys(redis, projectionPattern(d.keys));
    const replayed = await replayLog(d);
    return {
      label: d.label,
      poolFiles: await readdir(d.poolRoot).catch(() => []),
      projection,
      replayed,
      locks,
      node: await nodeVolumes(d.nodeStateFile),
      mounts: (await mountsLeftUnder(d.kubeletDir)).map((m) => m.mountPoint),
      loops: (await loopsUnder(d.poolRoot)).map((l) => ({ device: l.device, backingFile: l.backingFile ?? "" })),
      listed: await listed(d.co),
    };
  } finally {
    redis.disconnect();
  }
}

export const nodeStateFileOf = (dataDir: string, nodeId: string) => path.join(dataDir, "node", encodeURIComponent(nodeId), "state.json");
