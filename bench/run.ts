/**
 * `npm run bench`: throughput, latency and CPU per operation (never asserted by a test).
 *
 * Against fresh nats-server / redis-server processes, one journal process and one controller
 * process, with their data where `npm start` keeps its own (the repo's .data; BENCH_DIR elsewhere):
 *   0. floors: a bare grpc-js call, a NATS request, a JetStream publish+ack, a Redis PING;
 *   1. N distinct-name creates then N deletes at concurrency 1, 16, 64 through the journal's NATS
 *      commands, and a storm of 200 concurrent creates of one name (images made: must be 1);
 *   2. the same through the controller's CSI gRPC socket (CreateVolume / DeleteVolume);
 *   3. scale: create/delete, ControllerGetVolume and a ListVolumes page with 100 and then 100,000
 *      volumes in the journal; Redis memory and JetStream bytes per volume (bench/scale.ts);
 *   4. replay: rebuild, start-up check and point-in-time replay of 200k events (bench/replay.ts).
 * Every answer is checked; a scenario with errors is reported as FAILED and the bench exits 1.
 * CPU ms per operation is read from /proc for every process (bench = this load generator).
 * Env: BENCH_N (default 2000), BENCH_CONCURRENCY ("1,16,64"), BENCH_JOURNALS (replicas, 1),
 * BENCH_ONLY ("floors,ops,scale,replay"), BENCH_SCALE (100000), BENCH_REPLAY_EVENTS (200000),
 * BENCH_DIR, BENCH_PROFILE=<dir> (CPU profiles of journal and controller).
 */
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, open, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { connectNats, csiClient, JournalClient } from "@csi/runtime";
import { type LocalServer, startServer } from "../scripts/lib/local-servers.js";
import { cpuLine, cpuMeter, type Processes } from "./lib/cpu.js";
import { check, csiCap, type Figures, measure, row } from "./lib/measure.js";
import { type Floors, measureFloors } from "./lib/primitives.js";
import { startServices } from "./lib/services.js";
import { replayScenario } from "./replay.js";
import { scaleScenario } from "./scale.js";

const N = Number(process.env.BENCH_N ?? 2000);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number);
const REPLICAS = Number(process.env.BENCH_JOURNALS ?? 1);
const ONLY = (process.env.BENCH_ONLY ?? "floors,ops,scale,replay").split(",");
const MiB = 1024 * 1024;

const failures: string[] = [];

/** Print a measured step: figures, CPU ms per op of each process, and the latency ratio to its floor. */
export function report(label: string, f: Figures, cpu: Record<string, number>, floorMs?: number): void {
  const ratio = floorMs ? `   p50 = ${(f.p50 / floorMs).toFixed(1)}× floor` : "";
  console.log(`${row(label, f)}${ratio}\n${"".padEnd(32)}cpu ms/op: ${cpuLine(cpu)}`);
  if (f.errors > 0) {
    failures.push(`${label}: ${f.errors} errors (${f.firstErrors.join("; ")})`);
    console.log(`${"".padEnd(32)}FAILED: ${f.firstErrors.join("; ")}`);
  }
}

interface Scenario {
  create(name: string): Promise<string>;
  remove(id: string): Promise<unknown>;
  countImages(): Promise<number>;
}

async function scenario(label: string, s: Scenario, procs: Processes, floorMs: number | undefined) {
  console.log(`\n${label} (N=${N})`);
  for (const c of LEVELS) {
    const ids: string[] = [];
    const tag = randomUUID().slice(0, 8);
    let cpu = cpuMeter(procs);
    const created = await measure(N, c, async (i) => {
      ids[i] = await s.create(`bench-${tag}-${i}`);
    });
    report(`create  c=${c}`, created, cpu.perOp(N), c === 1 ? floorMs : undefined);
    cpu = cpuMeter(procs);
    const deleted = await measure(N, c, (i) => s.remove(ids[i] as string));
    report(`delete  c=${c}`, deleted, cpu.perOp(N));
  }
  const before = await s.countImages();
  const stormName = `storm-${randomUUID().slice(0, 8)}`;
  const ids = new Set<string>();
  const cpu = cpuMeter(procs);
  const storm = await measure(200, 200, async () => ids.add(await s.create(stormName)));
  report("storm: 200 × one name, c=200", storm, cpu.perOp(200));
  const made = (await s.countImages()) - before;
  console.log(`${"".padEnd(32)}images created: ${made}, distinct volumes answered: ${ids.size}`);
  if (made !== 1 || ids.size !== 1) failures.push(`storm: ${made} images, ${ids.size} distinct answers (must be 1 and 1)`);
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

const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];

async function opsScenarios(dir: string, nats: LocalServer, redis: LocalServer, floors: Floors | undefined) {
  const svc = await startServices(dir, nats, redis, REPLICAS);
  const nc = await connectNats({ servers: nats.url, noAsyncTraces: true }); // as the controller connects
  const client = new JournalClient(nc, 30_000);
  const ctrl = csiClient(svc.sock, "Controller");
  const procs: Processes = {
    bench: process.pid,
    ctl: svc.controller.child.pid,
    ...Object.fromEntries(svc.journals.map((j, i) => [svc.journals.length > 1 ? `jrn${i + 1}` : "jrn", j.child.pid])),
    nats: nats.pid,
    redis: redis.pid,
  };
  // The floor of each path: its serial chain of bare calls at c=1 (p50): lock+read and
  // apply+unlock in Redis, the reservation and the created event acked by JetStream.
  const journalFloor = floors && floors.nats.p50 + 2 * floors.jetstream.p50 + 2 * floors.redis.p50;
  try {
    console.log(`this disk right now: ${(await fileCreateMicros(dir)).toFixed(0)} µs to create, size and close one file (the pool's per-create cost)`);
    await scenario(
      "journal commands over NATS",
      {
        create: async (name) => {
          const v = await client.call("bench", "volume.create", { requestId: name, name, sizeBytes: MiB, capabilities: cap });
          check(v.name === name && v.sizeBytes === MiB, `volume.create ${name} answered ${JSON.stringify(v).slice(0, 200)}`);
          return v.uuid;
        },
        remove: async (uuid) => check((await client.call("bench", "volume.delete", { requestId: uuid, uuid })).deleted === true, `volume.delete ${uuid}`),
        countImages: svc.countImages,
      },
      procs,
      journalFloor,
    );
    await scenario(
      "CSI CreateVolume/DeleteVolume through the controller's gRPC socket",
      {
        create: async (name) => {
          const v = (await ctrl.CreateVolume({ name, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(MiB) } })).volume;
          check(!!v?.volume_id && Number(v.capacity_bytes) === MiB, `CreateVolume ${name} answered ${JSON.stringify(v).slice(0, 200)}`);
          return v?.volume_id ?? "";
        },
        remove: (id) => ctrl.DeleteVolume({ volume_id: id }),
        countImages: svc.countImages,
      },
      procs,
      journalFloor && floors && journalFloor + floors.grpc.p50,
    );
  } finally {
    ctrl.close();
    await nc.close();
    await svc.stop();
  }
}

async function main(dir: string) {
  console.log(
    `${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; node ${process.version}; data (JetStream, Redis AOF, file pool) in ${dir}`,
  );
  const nats = await startServer("nats", path.join(dir, "nats"));
  const redis = await startServer("redis", path.join(dir, "redis"));
  try {
    const floors = ONLY.includes("floors") || ONLY.includes("ops") ? await measureFloors(nats, redis, N) : undefined;
    if (ONLY.includes("ops")) await opsScenarios(dir, nats, redis, floors);
  } finally {
    await Promise.all([nats.stop(), redis.stop()]);
  }
  if (ONLY.includes("scale")) await scaleScenario(dir, report);
  if (ONLY.includes("replay")) await replayScenario(dir);
}

// Where `npm start` keeps its data (the repo's .data): file creation costs differ a lot between
// directories on this VM (~1 ms under /tmp, ~35 µs under /work); BENCH_DIR picks another.
const benchRoot = process.env.BENCH_DIR ?? path.resolve(import.meta.dirname, "..", ".data");
await mkdir(benchRoot, { recursive: true });
const dir = await mkdtemp(path.join(benchRoot, "bench-"));
try {
  await main(dir);
} catch (err) {
  failures.push((err as Error).message);
} finally {
  await rm(dir, { recursive: true, force: true });
}
if (failures.length > 0) {
  console.log(`\nBENCH FAILED:\n  ${failures.join("\n  ")}`);
  process.exit(1);
}
