/**
 * `npm run bench`: throughput and latency figures (never asserted by a test).
 *
 * Two scenarios against fresh nats-server / redis-server processes, one journal process and one
 * controller process: N distinct-name creates then N deletes at concurrency 1, 16 and 64, and a
 * storm of 200 concurrent creates of one name (counting the images made: must be 1)
 *   1. through the journal's NATS commands;
 *   2. through the controller's CSI gRPC socket (CreateVolume / DeleteVolume).
 *   3. replay: rebuild, start-up check and point-in-time replay of a log of 200k events (bench/replay.ts).
 * Env: BENCH_N (default 2000), BENCH_CONCURRENCY (default "1,16,64"), BENCH_JOURNALS (journal
 * replicas in the queue group, default 1), BENCH_ONLY ("ops", "replay"; default both),
 * BENCH_REPLAY_EVENTS (default 200000).
 */
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, open, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { csiClient, JournalClient } from "@csi/runtime";
import { connect } from "@nats-io/transport-node";
import { startServer } from "../scripts/lib/local-servers.js";
import { spawnService, writeClustersFile } from "../scripts/lib/processes.js";
import { replayScenario } from "./replay.js";

const N = Number(process.env.BENCH_N ?? 2000);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number);
const REPLICAS = Number(process.env.BENCH_JOURNALS ?? 1);
const ONLY = (process.env.BENCH_ONLY ?? "ops,replay").split(",");
const MiB = 1024 * 1024;

export interface Figures {
  ops: number;
  seconds: number;
  opsPerSec: number;
  p50: number;
  p99: number;
  errors: number;
}

/** Run `n` calls of `op(i)` with `concurrency` in flight; latencies in ms. */
export async function measure(n: number, concurrency: number, op: (i: number) => Promise<unknown>): Promise<Figures> {
  const lat: number[] = [];
  let next = 0;
  let errors = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        try {
          await op(i);
        } catch {
          errors++;
        }
        lat.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  const pct = (p: number) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] ?? 0;
  return { ops: n, seconds, opsPerSec: n / seconds, p50: pct(50), p99: pct(99), errors };
}

export function row(label: string, f: Figures): string {
  return `${label.padEnd(34)} ${f.opsPerSec.toFixed(0).padStart(7)} ops/s   p50 ${f.p50.toFixed(2).padStart(6)} ms   p99 ${f.p99.toFixed(2).padStart(6)} ms   errors ${f.errors}`;
}

const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
const csiCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };

async function scenario(
  label: string,
  create: (name: string) => Promise<string>,
  remove: (id: string) => Promise<unknown>,
  countImages: () => Promise<number>,
) {
  console.log(`\n${label} (N=${N})`);
  for (const c of LEVELS) {
    const ids: string[] = [];
    const tag = randomUUID().slice(0, 8);
    const created = await measure(N, c, async (i) => {
      ids[i] = await create(`bench-${tag}-${i}`);
    });
    console.log(row(`create  c=${c}`, created));
    console.log(row(`delete  c=${c}`, await measure(N, c, (i) => remove(ids[i] as string))));
  }
  const before = await countImages();
  const stormName = `storm-${randomUUID().slice(0, 8)}`;
  const storm = await measure(200, 200, () => create(stormName));
  console.log(row("storm: 200 x one name, c=200", storm), `  images created: ${(await countImages()) - before}`);
}

/** What the disk under the pool charges for one file create (it varies a lot on shared VMs). */
async function fileCreateMicros(dir: string): Promise<number> {
  const probe = path.join(dir, "probe");
  await mkdir(probe, { recursive: true });
  const t = performance.now();
  for (let i = 0; i < 200; i++) {
    const fh = await open(path.join(probe, `f${i}`), "wx");
    await fh.truncate(MiB);
    await fh.close();
  }
  const us = ((performance.now() - t) * 1000) / 200;
  await rm(probe, { recursive: true, force: true });
  return us;
}

async function main(dir: string) {
  const nats = await startServer("nats", path.join(dir, "nats"));
  const redis = await startServer("redis", path.join(dir, "redis"));
  const clustersFile = await writeClustersFile(dir, [{ clusterID: "bench", pools: ["default"] }]);
  const base = { NATS_URL: nats.url, REDIS_URL: redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: dir, CATCHUP_EVERY_MS: "0" };
  const journals = await Promise.all(Array.from({ length: REPLICAS }, () => spawnService("journal", base)));
  const sock = `unix://${path.join(dir, "controller.sock")}`;
  const controller = await spawnService("controller", base, { args: ["--endpoint", sock] });
  const nc = await connect({ servers: nats.url });
  const client = new JournalClient(nc, 30_000);
  const ctrl = csiClient(sock, "Controller");
  const poolDir = path.join(dir, "pools", "bench", "default");
  const countImages = async () => (await readdir(poolDir)).filter((f) => f.endsWith(".img")).length;
  try {
    console.log(
      `${REPLICAS} journal process(es), one controller process, nats-server and redis-server on this machine (${os.cpus().length} cores); file pool in ${os.tmpdir()}`,
    );
    console.log(`this disk right now: ${(await fileCreateMicros(dir)).toFixed(0)} µs to create, size and close one file (the pool's per-create cost)`);
    await scenario(
      "journal commands over NATS",
      async (name) => (await client.call("bench", "volume.create", { requestId: name, name, sizeBytes: MiB, capabilities: cap })).uuid,
      (uuid) => client.call("bench", "volume.delete", { requestId: uuid, uuid }),
      countImages,
    );
    await scenario(
      "CSI CreateVolume/DeleteVolume through the controller's gRPC socket",
      async (name) =>
        (await ctrl.CreateVolume({ name, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(MiB) } })).volume?.volume_id ?? "",
      (id) => ctrl.DeleteVolume({ volume_id: id }),
      countImages,
    );
  } finally {
    ctrl.close();
    await nc.close();
    await Promise.all([...journals.map((j) => j.stop()), controller.stop()]);
    await Promise.all([nats.stop(), redis.stop()]);
  }
}

const dir = await mkdtemp(path.join(os.tmpdir(), "csi-bench-"));
try {
  if (ONLY.includes("ops")) await main(dir);
  if (ONLY.includes("replay")) await replayScenario(dir);
} finally {
  await rm(dir, { recursive: true, force: true });
}
