/**
 * `npm run bench`: throughput and latency figures (never asserted by a test).
 *
 * Journal scenario: N distinct-name creates, then N deletes, through the journal's NATS
 * commands at concurrency 1, 16 and 64, against fresh nats-server / redis-server processes and
 * one journal process. Env: BENCH_N (default 2000), BENCH_CONCURRENCY (default "1,16,64").
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { JournalClient } from "@csi/contracts";
import { connect } from "@nats-io/transport-node";
import { startServer } from "../scripts/lib/local-servers.js";
import { spawnService, writeClustersFile } from "../scripts/lib/processes.js";

const N = Number(process.env.BENCH_N ?? 2000);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number);
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

async function journalScenario(dir: string) {
  const nats = await startServer("nats", path.join(dir, "nats"));
  const redis = await startServer("redis", path.join(dir, "redis"));
  const clustersFile = await writeClustersFile(dir, [{ clusterID: "bench", pools: ["default"] }]);
  const journal = await spawnService("journal", { NATS_URL: nats.url, REDIS_URL: redis.url, CLUSTERS_FILE: clustersFile, LOG_LEVEL: "warn", CATCHUP_EVERY_MS: "0" }, { readyLine: /serving/, waitReady: false });
  // LOG_LEVEL=warn hides the ready line: wait for the service to answer instead.
  const nc = await connect({ servers: nats.url });
  const client = new JournalClient(nc, 30_000);
  for (let i = 0; i < 200; i++) {
    try {
      await nc.request("$SRV.PING.csi-journal-bench", "", { timeout: 200 });
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
  console.log(`\njournal over NATS (N=${N}, one journal process, file pool on ${os.tmpdir()})`);
  for (const c of LEVELS) {
    const uuids: string[] = [];
    const tag = randomUUID().slice(0, 8);
    const created = await measure(N, c, async (i) => {
      const v = await client.call("bench", "volume.create", { requestId: `b-${i}`, name: `bench-${tag}-${i}`, sizeBytes: MiB, capabilities: cap });
      uuids[i] = v.uuid;
    });
    console.log(row(`create  c=${c}`, created));
    const deleted = await measure(N, c, (i) => client.call("bench", "volume.delete", { requestId: `d-${i}`, uuid: uuids[i] as string }));
    console.log(row(`delete  c=${c}`, deleted));
  }
  const storm = await measure(200, 200, () => client.call("bench", "volume.create", { requestId: "storm", name: "storm", sizeBytes: MiB, capabilities: cap }));
  const imgs = (await readdir(path.join(dir, "pools", "bench", "default"))).filter((f) => f.endsWith(".img"));
  console.log(row("storm: 200 x one name, c=200", storm), `  images: ${imgs.length}`);
  await nc.close();
  await journal.stop();
  await Promise.all([nats.stop(), redis.stop()]);
}

const dir = await mkdtemp(path.join(os.tmpdir(), "csi-bench-"));
try {
  await journalScenario(dir);
} finally {
  await rm(dir, { recursive: true, force: true });
}
