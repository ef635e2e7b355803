/**
 * The replay scenario of `npm run bench`: a fresh stream of BENCH_REPLAY_EVENTS events (default
 * 200,000: volumes created, claimed, expanded, some deleted — the journal's own event shapes,
 * appended straight to JetStream in the setup), then, in this process against the real servers:
 *   - rebuild: the projector's forced rebuild into an empty Redis (wipe, replay, complete mark);
 *   - check:   the start-up check (the log folded in memory, compared with every Redis key);
 *   - replay:  audit.replay's whole-cluster fold at the log's end (no Redis);
 *   - backup:  `csictl log export` of the whole log to a file (sealed with a key), then `log import`
 *              of it (checked whole, staged, then written on the same sequences) into the deleted stream.
 * Reported: events/s and CPU µs per event of each process (journal = this process, nats-server,
 * redis-server). Every rebuild is checked against the log key by key. BENCH_PROFILE=<dir>: a CPU
 * profile of this process per step.
 */
import { randomBytes } from "node:crypto";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { Session } from "node:inspector";
import path from "node:path";
import { type EventBody, JournalEvent, subjects } from "@csi/contracts";
import { BackupKey, exportLogToFile, importLog } from "@csi/journal/backup";
import { emptyReplay, replayInto } from "@csi/journal/fold";
import { JetStreamLog as EventLog, FOLD_BATCH } from "@csi/journal/log";
import { differenceName, Projector } from "@csi/journal/projection";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { volumeReservedBody } from "@csi/journal/test-support";
import { createLogger, redisConnectOptions } from "@csi/runtime";
import { startServer } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { cpuMeter } from "./lib/cpu.js";

const EVENTS = Number(process.env.BENCH_REPLAY_EVENTS ?? 200_000);
const CLUSTER = "replay";
const MiB = 1024 * 1024;

const hex = (n: number, width: number) => n.toString(16).padStart(width, "0");
const uuidOf = (i: number) => `${hex(i, 8)}-0000-4000-8000-${hex(i, 12)}`;

/** The events of volume i: reserved and created; every 3rd claimed, every 5th expanded, every 7th deleted. */
function* volumeLife(i: number): Generator<[string, EventBody]> {
  const uuid = uuidOf(i);
  const name = `pvc-${i}`;
  const vol = subjects.volumeEvents(CLUSTER, uuid);
  const nameSubject = subjects.nameEvents(CLUSTER, "vol", "default", name);
  yield [nameSubject, { type: "NameReserved", kind: "volume", name, uuid }];
  yield [
    vol,
    volumeReservedBody(uuid, name, {
      digest: "0123456789abcdef0123456789abcdef",
      parameters: { tier: "bench" },
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER", fsType: "ext4" }],
    }),
  ];
  yield [vol, { type: "VolumeCreated", uuid, imageId: hex(i, 6), sizeBytes: MiB }];
  if (i % 3 === 0)
    yield [vol, { type: "VolumeClaimed", uuid, nodeId: `node-${i % 10}`, accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }];
  if (i % 5 === 0) yield [vol, { type: "VolumeExpanded", uuid, sizeBytes: 2 * MiB }];
  if (i % 7 === 0) {
    if (i % 3 === 0) yield [vol, { type: "VolumeUnclaimed", uuid, nodeId: `node-${i % 10}` }];
    yield [vol, { type: "VolumeDeleted", uuid }];
    yield [nameSubject, { type: "NameReleased", kind: "volume", name, uuid }];
  }
}

function* logOf(n: number): Generator<[string, EventBody]> {
  let made = 0;
  for (let i = 1; made < n; i++) {
    for (const e of volumeLife(i)) {
      if (made++ >= n) return;
      yield e;
    }
  }
}

/** Append `n` events of the bench's volumes straight to the stream (acks awaited 2,000 at a time). */
export async function appendLog(nc: NatsConnection, n: number): Promise<void> {
  const js = jetstream(nc);
  const meta = { v: 1 as const, time: new Date().toISOString(), requestId: "bench", actor: { service: "bench", replica: "1" } };
  let pending: Promise<unknown>[] = [];
  for (const [subject, body] of logOf(n)) {
    pending.push(js.publish(subject, JSON.stringify(JournalEvent.parse({ ...body, ...meta }))));
    if (pending.length >= 2000) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
}

/** With BENCH_PROFILE=<dir>: a CPU profile of this process for one step (`<dir>/replay-<step>.cpuprofile`). */
async function profile(label: string): Promise<() => Promise<void>> {
  const dir = process.env.BENCH_PROFILE;
  if (!dir) return async () => {};
  const session = new Session();
  session.connect();
  const post = (method: string) => new Promise<unknown>((resolve, reject) => session.post(method, (err, res) => (err ? reject(err) : resolve(res))));
  await post("Profiler.enable");
  await post("Profiler.start");
  return async () => {
    const { profile: p } = (await post("Profiler.stop")) as { profile: unknown };
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, `replay-${label.replace(/[^a-z]+/gi, "-")}.cpuprofile`), JSON.stringify(p));
    session.disconnect();
  };
}

export async function replayScenario(dir: string): Promise<void> {
  const nats = await startServer("nats", path.join(dir, "replay-nats"));
  const redisServer = await startServer("redis", path.join(dir, "replay-redis"));
  const nc = await connect({ servers: nats.url });
  const redis = new Redis(redisServer.url, { ...redisConnectOptions({ redisUrl: redisServer.url }), enableAutoPipelining: true });
  try {
    const log = new EventLog(nc, { cluster: CLUSTER });
    await log.ensureStream();
    console.log(`\nreplay (${EVENTS} events of ${CLUSTER}'s log, appended straight to a fresh stream)`);
    let t = performance.now();
    await appendLog(nc, EVENTS);
    const appendS = (performance.now() - t) / 1000;
    console.log(`${"setup: append".padEnd(34)} ${(EVENTS / appendS).toFixed(0).padStart(7)} events/s`);

    const store = new RedisStore(redis, keysFor(CLUSTER, "default"));
    const projector = new Projector(log, store, createLogger("bench", "warn", 2), { batch: Number(process.env.JOURNAL_REPLAY_BATCH ?? 512) });
    const measure = async (label: string, f: () => Promise<unknown>) => {
      const cpu = cpuMeter({ journal: process.pid, nats: nats.pid, redis: redisServer.pid });
      const stopProfile = await profile(label);
      t = performance.now();
      await f();
      const s = (performance.now() - t) / 1000;
      await stopProfile();
      const us = Object.entries(cpu.perOp(EVENTS / 1000))
        .map(([k, v]) => `${k} ${v.toFixed(1)}`)
        .join(", ");
      console.log(`${label.padEnd(34)} ${(EVENTS / s).toFixed(0).padStart(7)} events/s   ${s.toFixed(2).padStart(6)} s   CPU µs/event: ${us}`);
    };
    /** Every answer checked: the projection a rebuild left equals the log's fold, key by key. */
    const checkProjection = async () => {
      const { differ } = await projector.compare();
      if (differ.length)
        throw new Error(`the rebuilt projection differs from the log in ${differ.length} places (${differ.slice(0, 3).map(differenceName).join(", ")})`);
    };
    await measure("rebuild (empty Redis)", () => projector.rebuild("bench"));
    await checkProjection();
    await measure("rebuild (forced, over the last)", () => projector.rebuild("bench"));
    await measure("start-up check (fold + compare)", checkProjection);
    await measure("replay --at <end> (fold only)", async () => {
      const r = emptyReplay();
      await log.read(1, async (b) => replayInto(r, b, { seq: Number.MAX_SAFE_INTEGER }), { batch: FOLD_BATCH });
      if (r.upTo.seq !== EVENTS) throw new Error(`replay folded up to ${r.upTo.seq}, not ${EVENTS}`);
    });
    console.log(`keys in the projection: ${(await store.projectionKeys()).length}`);

    // Backup and restore of the log (csictl log export / import): the whole stream to a file, the
    // stream deleted, the file checked and restored on the same sequences.
    const backup = path.join(dir, `replay-backup-${Date.now()}.jsonl`);
    const key = BackupKey.fromFile(randomBytes(32), "bench key");
    await measure("log export (to a file)", async () => {
      const r = await exportLogToFile(nc, CLUSTER, backup, { key });
      if (r.messages !== EVENTS) throw new Error(`exported ${r.messages} messages, not ${EVENTS}`);
    });
    const before = await log.info();
    await (await jetstreamManager(nc)).streams.delete(log.stream);
    const steps: string[] = [];
    await measure("log import (check, stage, write)", async () => {
      let at = performance.now();
      const r = await importLog(nc, CLUSTER, backup, {
        key,
        onStep: async (step) => {
          const s = (performance.now() - at) / 1000;
          steps.push(`${step} after ${s.toFixed(2)} s (${(EVENTS / s).toFixed(0)} events/s)`);
          at = performance.now();
        },
      });
      const after = await log.info();
      if (r.lastSeq !== before.last || after.last !== before.last) throw new Error(`restored up to ${after.last}, the log had ${before.last}`);
    });
    console.log(`  its steps: ${steps.join("; ")}`);
    console.log(`backup file: ${((await stat(backup)).size / EVENTS).toFixed(0)} bytes per event`);
    await rm(backup, { force: true });
  } finally {
    await nc.close();
    redis.disconnect();
    await Promise.all([nats.stop(), redisServer.stop()]);
  }
}
