/**
 * `npm run bench`: throughput, latency and CPU per operation (never asserted by a test).
 *
 * Against fresh nats-server / redis-server processes, one journal process and one controller
 * process, with their data under the repo's .data (BENCH_DIR elsewhere) on the disk BENCH_DISK
 * picks (benchDisk: by default, as root, a fresh journaled ext4 on a loop device):
 *   0. floors: a bare grpc-js call, a NATS request, a JetStream publish+ack, a Redis PING;
 *   1. at concurrency 1, 16, 64: N distinct-name creates through each path — the journal's NATS
 *      command, the controller's CSI gRPC socket (CreateVolume), and the bare chain (the same hops,
 *      round trips and file with no application code: bench/lib/bare-chain.ts) — then N deletes
 *      through each; then a storm of 200 concurrent creates of one name per path (images made:
 *      must be 1), and the CSI creates against the bare chain's, level by level;
 *   2. scale: create/delete, ControllerGetVolume and a ListVolumes page with 100 and then 100,000
 *      volumes in the journal; Redis memory and JetStream bytes per volume (bench/scale.ts);
 *   3. replay: rebuild, start-up check and point-in-time replay of 200k events (bench/replay.ts).
 * The services and the bare chain's processes run as the image runs them: plain node on what
 * `npm run build` made (`npm run bench` builds first and sets CSI_RUN_BUILT=1); run by hand
 * without it, they run from their sources through tsx, which costs ~0.3–1 ms of CPU per create.
 * Every answer is checked; a scenario with errors is reported as FAILED and the bench exits 1.
 * CPU ms and write system calls per operation are read from /proc for every process (bench =
 * this load generator).
 * Env: BENCH_N (default 2000), BENCH_CONCURRENCY ("1,16,64"), BENCH_JOURNALS (replicas, 1),
 * BENCH_ONLY ("floors,ops,scale,replay"), BENCH_PATHS ("journal,csi,bare"), BENCH_SCALE (100000),
 * BENCH_REPLAY_EVENTS (200000), BENCH_DIR, BENCH_DISK ("ext4" or "here"), BENCH_PROFILE=<dir>
 * (CPU profiles of the journal, the controller and the bare chain's processes).
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, rmSync, unlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createSizedFile } from "@csi/journal/pools";
import { connectNats, csiClient, JournalClient } from "@csi/runtime";
import { type LocalServer, natsServerVersion, startServer } from "@csi/testkit";
import { startBareChain } from "./lib/bare-chain.js";
import { runInBenchDir } from "./lib/bench-dir.js";
import { cpuLine, cpuMeter, type Processes } from "./lib/cpu.js";
import { check, csiCap, type Figures, measure, row } from "./lib/measure.js";
import { type Floors, measureFloors } from "./lib/primitives.js";
import { redisCalls } from "./lib/redis-calls.js";
import { startServices } from "./lib/services.js";
import { replayScenario } from "./replay.js";
import { scaleScenario } from "./scale.js";

const N = Number(process.env.BENCH_N ?? 2000);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number);
const REPLICAS = Number(process.env.BENCH_JOURNALS ?? 1);
/** Which paths the ops step drives: the journal over NATS, the CSI socket, or both. */
const PATHS = (process.env.BENCH_PATHS ?? "journal,csi,bare").split(",");
const ONLY = (process.env.BENCH_ONLY ?? "floors,ops,scale,replay").split(",");
const MiB = 1024 * 1024;
/** Creates and deletes per path before the first measured level. */
const WARMUP = 500;

const failures: string[] = [];

/** Print a measured step: figures, CPU ms per op of each process, and the latency ratio to its floor. */
export function report(label: string, f: Figures, cpu: Record<string, number>, floorMs?: number, writes?: Record<string, number>): void {
  const ratio = floorMs ? `   p50 = ${(f.p50 / floorMs).toFixed(1)}× floor` : "";
  console.log(`${row(label, f)}${ratio}\n${"".padEnd(32)}cpu ms/op: ${cpuLine(cpu)}`);
  if (writes) console.log(`${"".padEnd(32)}writes/op: ${cpuLine(writes, 1)}`);
  if (f.errors > 0) {
    failures.push(`${label}: ${f.errors} errors (${f.firstErrors.join("; ")})`);
    console.log(`${"".padEnd(32)}FAILED: ${f.firstErrors.join("; ")}`);
  }
}

/** One path a create can take: the journal's NATS command, the CSI socket, or the bare chain. */
interface CreatePath {
  label: string;
  create(name: string): Promise<string>;
  /** Delete what a create made: measured for the real paths; the bare chain's cleanup is not. */
  remove(id: string): Promise<unknown>;
  measureRemove: boolean;
  procs: Processes;
  /** The serial chain of bare calls it makes at c=1 (p50 ms), for the ratio. */
  floorMs?: number;
}

/** A step's figures and its CPU ms per operation by process. */
type Step = { f: Figures; cpu: Record<string, number> };

/**
 * At each level, every path's N distinct-name creates, then every path's N deletes. The creates
 * of all paths come before the deletes so that each path's creates find the pool directory in
 * the same state: on an ext4 without a journal (this VM's), a create scans past every inode of
 * its group deleted in the last minutes (docs/performance.md, "The file pool's create"). Returns
 * the creates' figures by path and level.
 */
async function levels(paths: CreatePath[], redisTotal: () => Promise<number>): Promise<Map<string, Map<number, Step>>> {
  const out = new Map(paths.map((p) => [p.label, new Map<number, Step>()]));
  // Warm-up, not measured: every path's code compiled and its connections settled before the first level.
  for (const p of paths) {
    const ids: string[] = [];
    const tag = randomUUID().slice(0, 8);
    const warm = await measure(WARMUP, 16, async (i) => {
      ids[i] = await p.create(`warmup-${tag}-${i}`);
    });
    const removed = await measure(WARMUP, 16, (i) => p.remove(ids[i] as string));
    if (warm.errors + removed.errors > 0) failures.push(`${p.label} warm-up: ${[...warm.firstErrors, ...removed.firstErrors].join("; ")}`);
  }
  for (const c of LEVELS) {
    console.log(`\nconcurrency ${c} (N=${N} each)`);
    const made = new Map<CreatePath, string[]>();
    for (const p of paths) {
      const ids: string[] = [];
      const tag = randomUUID().slice(0, 8);
      const cpu = cpuMeter(p.procs);
      const r0 = await redisTotal();
      const created = await measure(N, c, async (i) => {
        ids[i] = await p.create(`bench-${tag}-${i}`);
      });
      const perOp = cpu.perOp(N);
      const redisPerOp = ((await redisTotal()) - r0 - 1) / N;
      out.get(p.label)?.set(c, { f: created, cpu: perOp });
      made.set(p, ids);
      report(`${p.label} create`, created, perOp, c === 1 ? p.floorMs : undefined, cpu.writesPerOp(N));
      console.log(`  Redis commands per create: ${redisPerOp.toFixed(1)}`);
      if (new Set(ids).size !== N && created.errors === 0) failures.push(`${p.label} c=${c}: ${new Set(ids).size} distinct answers for ${N} creates`);
    }
    for (const [p, ids] of made) {
      const cpu = cpuMeter(p.procs);
      const deleted = await measure(N, c, (i) => p.remove(ids[i] as string));
      if (p.measureRemove) report(`${p.label} delete`, deleted, cpu.perOp(N), undefined, cpu.writesPerOp(N));
      else if (deleted.errors > 0) failures.push(`${p.label} cleanup: ${deleted.firstErrors.join("; ")}`);
    }
  }
  return out;
}

/** 200 concurrent creates of one name through `create`: one image and one volume id, or FAILED. */
async function storm(label: string, create: (name: string) => Promise<string>, procs: Processes, countImages: () => Promise<number>) {
  const before = await countImages();
  const stormName = `storm-${randomUUID().slice(0, 8)}`;
  const ids = new Set<string>();
  const cpu = cpuMeter(procs);
  const f = await measure(200, 200, async () => ids.add(await create(stormName)));
  report(`${label} storm: 200 × one name, c=200`, f, cpu.perOp(200));
  const made = (await countImages()) - before;
  console.log(`${"".padEnd(32)}images created: ${made}, distinct volumes answered: ${ids.size}`);
  if (made !== 1 || ids.size !== 1) failures.push(`${label} storm: ${made} images, ${ids.size} distinct answers (must be 1 and 1)`);
}

/** The CSI creates against the bare chain's, level by level (same run, same pool directory). */
function compare(csi: Map<number, Step> | undefined, bare: Map<number, Step> | undefined): void {
  if (!csi || !bare) return;
  console.log("\nCSI CreateVolume against the bare chain, same run (CPU ms per create, all processes incl. the load generator):");
  const total = (x: Step) => x.cpu.total ?? 0;
  for (const [c, b] of bare) {
    const a = csi.get(c);
    if (!a) continue;
    console.log(
      `  c=${String(c).padEnd(3)} CSI ${a.f.opsPerSec.toFixed(0).padStart(5)}/s p50 ${a.f.p50.toFixed(2).padStart(6)} ms cpu ${total(a).toFixed(2)}` +
        `   bare ${b.f.opsPerSec.toFixed(0).padStart(5)}/s p50 ${b.f.p50.toFixed(2).padStart(6)} ms cpu ${total(b).toFixed(2)}` +
        `   CSI/bare: cpu ${(total(a) / total(b)).toFixed(2)}× p50 ${(a.f.p50 / b.f.p50).toFixed(2)}×`,
    );
  }
}

/**
 * What the file pool's create costs on this disk right now, as the pool does it (open O_EXCL,
 * ftruncate, fstat, close, synchronously) in a directory made as the pool's is: CPU µs per create
 * in a fresh directory, and after rounds of creates and deletes (a bench run's pattern; ext4 then
 * searches past recently freed inodes).
 */
function fileCreateCost(dir: string): { fresh: number; churned: number } {
  const probe = path.join(dir, "pools", "probe");
  mkdirSync(probe, { recursive: true });
  const round = (r: number) => {
    const files = Array.from({ length: 500 }, (_, i) => path.join(probe, `r${r}-${i}.img`));
    const before = process.cpuUsage();
    for (const f of files) createSizedFile(f, MiB, 0o600);
    const used = process.cpuUsage(before);
    for (const f of files) unlinkSync(f);
    return (used.user + used.system) / files.length;
  };
  const fresh = round(0);
  let churned = fresh;
  for (let r = 1; r <= 6; r++) churned = round(r);
  rmSync(probe, { recursive: true, force: true });
  return { fresh, churned };
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
  // The bare chain puts its files in the journal's pool directory: the same file system state.
  const bare = PATHS.includes("bare") ? await startBareChain(dir, nats, redis, svc.poolDir) : undefined;
  // The floor of each path: its serial chain of bare calls at c=1 (p50): lock+read and
  // apply+unlock in Redis, the reservation and the created event acked by JetStream.
  const journalFloor = floors && floors.nats.p50 + 2 * floors.jetstream.p50 + 2 * floors.redis.p50;
  const journalCreate = async (name: string) => {
    const v = await client.call("bench", "volume.create", { requestId: name, name, sizeBytes: MiB, capabilities: cap });
    check(v.name === name && v.sizeBytes === MiB, `volume.create ${name} answered ${JSON.stringify(v).slice(0, 200)}`);
    return v.uuid;
  };
  const csiCreate = async (name: string) => {
    const v = (await ctrl.CreateVolume({ name, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(MiB) } })).volume;
    check(!!v?.volume_id && Number(v.capacity_bytes) === MiB, `CreateVolume ${name} answered ${JSON.stringify(v).slice(0, 200)}`);
    return v?.volume_id ?? "";
  };
  const paths: CreatePath[] = [];
  if (PATHS.includes("journal"))
    paths.push({
      label: "journal",
      create: journalCreate,
      remove: async (uuid) => check((await client.call("bench", "volume.delete", { requestId: uuid, uuid })).deleted === true, `volume.delete ${uuid}`),
      measureRemove: true,
      procs,
      ...(journalFloor ? { floorMs: journalFloor } : {}),
    });
  if (PATHS.includes("csi"))
    paths.push({
      label: "CSI",
      create: csiCreate,
      remove: (id) => ctrl.DeleteVolume({ volume_id: id }),
      measureRemove: true,
      procs,
      ...(journalFloor && floors ? { floorMs: journalFloor + floors.grpc.p50 } : {}),
    });
  if (bare)
    paths.push({
      label: "bare",
      create: bare.create,
      remove: bare.remove,
      measureRemove: false,
      procs: { bench: process.pid, ...bare.pids, nats: nats.pid, redis: redis.pid },
    });
  try {
    const file = fileCreateCost(dir);
    console.log(
      `the pool's file create on this disk right now: ${file.fresh.toFixed(0)} µs of CPU in a fresh directory, ${file.churned.toFixed(0)} µs after 3,000 creates and deletes`,
    );
    console.log(
      "paths: journal = its NATS command; CSI = CreateVolume/DeleteVolume through the controller's gRPC socket; bare = the same hops, round trips and file with no application code (bench/lib/bare-chain.ts)",
    );
    const calls = redisCalls(redis.url);
    const figures = await levels(paths, calls.total).finally(calls.close);
    console.log("");
    if (PATHS.includes("journal")) await storm("journal", journalCreate, procs, svc.countImages);
    if (PATHS.includes("csi")) await storm("CSI", csiCreate, procs, svc.countImages);
    compare(figures.get("CSI"), figures.get("bare"));
  } finally {
    bare?.stop();
    ctrl.close();
    await nc.close();
    await svc.stop();
  }
}

async function main({ dir, what }: { dir: string; what: string }) {
  console.log(
    `${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; node ${process.version}; data (JetStream, Redis AOF, file pool) in ${dir}: ${what}`,
  );
  // Every row below (ours, the bare chain, the NATS floors) runs on these servers: say what an ack means.
  console.log(
    process.env.CSI_UNSAFE_NO_FSYNC === "1"
      ? "acknowledged writes are NOT durable (CSI_UNSAFE_NO_FSYNC=1): nats-server at its default sync (images are still fsynced)"
      : `acknowledged writes are durable: nats-server ${natsServerVersion().text} with sync_interval: always, images and their directory fsynced (docs/operations.md, "Durability")`,
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

await runInBenchDir(main, failures);
