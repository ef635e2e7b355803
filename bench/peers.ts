/**
 * `npm run bench:peers`: our CSI driver beside other CSI drivers (issue 25, item 5), in the same
 * run, through the same client, on the same disk: CreateVolume then DeleteVolume through each
 * driver's CSI unix socket, BENCH_PEERS_N (500) of each per round, BENCH_PEERS_ROUNDS (3) rounds
 * at each concurrency of BENCH_CONCURRENCY ("1,16,64"), the drivers taking turns within a round
 * (each round starts one driver later). Every answer is checked: a create must name a volume (a
 * distinct id per create of the round; a capacity of 0, "not reported", or at least the 1 MiB
 * asked), a delete must succeed; an error prints FAILED and the bench exits 1.
 *
 * BENCH_PEERS_RBD=1: every driver on one single-node Ceph instead, ceph-csi's RBD driver among the
 * peers (bench/lib/ceph-peers.ts: the placeholders, the Ceph CPU and OSD ops per create).
 *
 * Ours is started as `npm run bench` starts it (bench/lib/services.ts: fresh nats-server and
 * redis-server, one journal, one controller), with its data on the bench disk (bench/lib/bench-dir.ts,
 * BENCH_DISK). A peer is a command line given in the environment, which this script runs (with
 * /bin/sh, `exec`) and never builds or downloads:
 *
 *   BENCH_PEER_HOSTPATH="/opt/peers/…/hostpathplugin --endpoint unix://{socket} --nodeid bench --statedir {dir}"
 *   BENCH_PEER_DEMOCRATIC="node /opt/peers/…/bin/democratic-csi --csi-version 1.5.0 … --server-socket {socket} --driver-config-file {config}"
 *   BENCH_PEER_DEMOCRATIC_CONFIG=<a file whose {dir} is replaced and written to {config}>
 *
 * {socket} is a unix socket path and {dir} an empty directory for its data, both on the bench
 * disk; BENCH_PEER_<NAME>_PARAMETERS='{"k":"v"}' adds CreateVolume parameters. A peer not given is
 * skipped with a line saying so; any other BENCH_PEER_<NAME> is run too. Each one must answer
 * Identity.GetPluginInfo and Probe on its socket before the rounds begin.
 *
 * With them, unless BENCH_PEERS_BARE=0, the bare chain (bench/lib/bare-chain.ts): the same
 * processes, hops and round trips as our create with none of our code, through its own raw gRPC
 * method — the floor of this design beside the peers (its "delete" only removes the file).
 *
 * CPU ms per operation of each driver's processes (for a peer: the process started and what runs
 * below it; for ours: controller, journal, nats-server, redis-server) from /proc, counting the
 * children each one waited for (bench/lib/cpu.ts); the client's (this process) apart. Per round,
 * the machine's busy CPU (/proc/stat) outside all those processes: how much else ran meanwhile.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { csiClient } from "@csi/runtime";
import { type LocalServer, startServer } from "@csi/testkit";
import * as grpc from "@grpc/grpc-js";
import { startBareChain } from "./lib/bare-chain.js";
import { descendants, runInBenchDir } from "./lib/bench-dir.js";
import { type CephBench, type CsiTarget, copies, startCephBench } from "./lib/ceph-peers.js";
import { cpuLine, cpuMeter, machineBusy, type Processes } from "./lib/cpu.js";
import { check, csiCap, type Figures, measure, row } from "./lib/measure.js";
import { startServices } from "./lib/services.js";

/** On Ceph every driver makes 1 GiB images (thin: nothing written), as ceph-csi's users ask; elsewhere 1 MiB. */
const RBD = process.env.BENCH_PEERS_RBD === "1";
const SIZE = RBD ? 1024 * 1024 * 1024 : 1024 * 1024;
const N = Number(process.env.BENCH_PEERS_N ?? 500);
const ROUNDS = Number(process.env.BENCH_PEERS_ROUNDS ?? 3);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number);
/** Creates and deletes per driver before the first round, not measured (JIT, connections). */
const WARMUP = Number(process.env.BENCH_PEERS_WARMUP ?? 500);
/** The peers compared with (on Ceph: ceph-csi's RBD driver, the file drivers left out); any other BENCH_PEER_<NAME> is run as well. */
const FILE_PEERS: Record<string, string> = { HOSTPATH: "csi-driver-host-path", DEMOCRATIC: "democratic-csi" };
const KNOWN: Record<string, string> = RBD ? { CEPHCSI: "ceph-csi" } : FILE_PEERS;
/**
 * Whether a driver's acknowledged creates are on disk when it answers (the table's "durable"
 * column; docs/operations.md, "Durability"). The known peers' answers were read from their code
 * and traced (strace, issue 32): neither fsyncs anything.
 */
const DURABILITY: Record<string, string> = {
  ours:
    process.env.CSI_UNSAFE_NO_FSYNC === "1"
      ? "no: log not fsynced (CSI_UNSAFE_NO_FSYNC=1)"
      : RBD
        ? "yes: log fsynced, the image on the OSD"
        : "yes: log and image fsynced",
  "bare chain": process.env.CSI_UNSAFE_NO_FSYNC === "1" ? "no: log not fsynced (CSI_UNSAFE_NO_FSYNC=1)" : "yes: log and file fsynced",
  "csi-driver-host-path": "no: rewrites a JSON file, no fsync",
  "democratic-csi": "no: makes a directory, no fsync",
  "ceph-csi": "yes: its omap journal and the image on the OSD (Ceph acks a write once it is durable)",
};
/**
 * The capability every driver is asked for: single-node-writer, mount, no file system type
 * (democratic-csi's local-hostpath answers INVALID_ARGUMENT to any fs_type: its list is empty).
 */
const peerCap = { access_mode: csiCap.access_mode, mount: {} };

const failures: string[] = [];

/** A driver under test: how it is called, which processes are its own, and how to stop it. */
interface Driver {
  label: string;
  /** Its processes; `refresh` adds those it started since (ours: the journal's RBD helper, started on first use). */
  procs: Processes;
  refresh?(): void;
  /** Its CSI socket and what its calls carry (the copies on Ceph). */
  csi?: CsiTarget;
  calls(): Calls;
  stop(): Promise<unknown>;
}

/** A create (answering the volume's id) and a delete of what it made. */
interface Calls {
  create(name: string): Promise<string>;
  remove(id: string): Promise<unknown>;
  close(): void;
}

/** One measured step of one driver: its figures and the CPU ms per operation of its processes and of the client. */
interface Step {
  f: Figures;
  cpu: Record<string, number>;
  client: number;
  /** On Ceph (BENCH_PEERS_RBD=1): the Ceph daemons' CPU ms and the OSD's client operations per operation. */
  ceph?: { cephCpu: number; osdOps: number };
}

/** The peers given in the environment, in the order: host-path, democratic-csi, the others. */
function peersFromEnv(): { name: string; label: string; command: string }[] {
  const names = Object.keys(process.env)
    .filter((k) => /^BENCH_PEER_[A-Z0-9]+$/.test(k))
    .map((k) => k.slice("BENCH_PEER_".length))
    .filter((n) => !RBD || !(n in FILE_PEERS));
  for (const [name, label] of Object.entries(KNOWN)) if (!names.includes(name)) console.log(`${label}: skipped (BENCH_PEER_${name} is not set)`);
  const order = [...Object.keys(KNOWN).filter((n) => names.includes(n)), ...names.filter((n) => !(n in KNOWN)).sort()];
  return order.map((name) => ({ name, label: KNOWN[name] ?? name.toLowerCase(), command: process.env[`BENCH_PEER_${name}`] as string }));
}

/** Until `child` exits: a promise that rejects then, with its last lines of output. */
function exitWatch(child: ChildProcess, label: string, tail: string[]): { exited: Promise<never>; done: Promise<void> } {
  let fail: (err: Error) => void = () => {};
  const exited = new Promise<never>((_, reject) => {
    fail = reject;
  });
  exited.catch(() => {}); // observed by whoever races it
  const done = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      fail(new Error(`${label} exited (${signal ?? code}): ${tail.slice(-10).join("\n")}`));
      resolve();
    }),
  );
  return { exited, done };
}

/**
 * Resolve once a gRPC channel to `sock` is READY, reject if `exited` comes first. A call fails at
 * once while the socket is missing or not yet listening (ENOENT, ECONNREFUSED), even with the
 * waitForReady call option; the channel's own wait reconnects with grpc's backoff until it is.
 */
async function channelReady(sock: string, exited: Promise<never>): Promise<void> {
  const channel = new grpc.Client(`unix://${sock}`, grpc.credentials.createInsecure());
  try {
    await Promise.race([exited, new Promise<void>((resolve, reject) => channel.waitForReady(Date.now() + 120_000, (err) => (err ? reject(err) : resolve())))]);
  } finally {
    channel.close();
  }
}

/** Start a peer from its command line; resolve once its socket answers GetPluginInfo and Probe. */
async function startPeer(dir: string, peer: { name: string; label: string; command: string }, more: (s: string) => string = (s) => s): Promise<Driver> {
  const sock = path.join(dir, `${peer.name.toLowerCase()}.sock`);
  const data = path.join(dir, `peer-${peer.name.toLowerCase()}`);
  mkdirSync(data);
  const fill = (s: string) => more(s.replaceAll("{socket}", sock).replaceAll("{dir}", data).replaceAll("{config}", `${data}.config`));
  const template = process.env[`BENCH_PEER_${peer.name}_CONFIG`];
  if (template) writeFileSync(`${data}.config`, fill(readFileSync(template, "utf8")));
  const command = fill(peer.command);
  console.log(`${peer.label}: ${command}`);
  const child = spawn("/bin/sh", ["-c", `exec ${command}`], { stdio: ["ignore", "pipe", "pipe"] });
  const tail: string[] = [];
  const keep = (b: Buffer) => {
    tail.push(...b.toString().split("\n").filter(Boolean));
    tail.splice(0, Math.max(0, tail.length - 50));
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const { exited, done } = exitWatch(child, peer.label, tail);
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const killLater = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await done;
    clearTimeout(killLater);
  };
  const identity = csiClient(`unix://${sock}`, "Identity");
  try {
    await channelReady(sock, exited);
    const ready = { deadline: Date.now() + 60_000 };
    const info = await Promise.race([exited, identity.GetPluginInfo({}, undefined, ready)]);
    const probe = await Promise.race([exited, identity.Probe({}, undefined, ready)]);
    check(!!info.name && probe.ready?.value !== false, `${peer.label} GetPluginInfo ${JSON.stringify(info)} Probe ${JSON.stringify(probe)}`);
    console.log(`${peer.label}: ready, GetPluginInfo name ${info.name}, version ${info.vendor_version}`);
  } catch (err) {
    await stop();
    throw err;
  } finally {
    identity.close();
  }
  const pid = child.pid as number;
  const procs: Processes = { [peer.name.toLowerCase()]: pid };
  for (const d of descendants(pid)) procs[`${peer.name.toLowerCase()}-${d}`] = d;
  const parameters = JSON.parse(fill(process.env[`BENCH_PEER_${peer.name}_PARAMETERS`] ?? "{}")) as Record<string, string>;
  const secrets = JSON.parse(fill(process.env[`BENCH_PEER_${peer.name}_SECRETS`] ?? "{}")) as Record<string, string>;
  return { label: peer.label, procs, calls: () => csiCalls(peer.label, sock, parameters, secrets), stop, csi: { sock, parameters, secrets } };
}

/** The CreateVolume and DeleteVolume every CSI driver gets, each answer checked. */
function csiCalls(label: string, sock: string, parameters: Record<string, string>, secrets: Record<string, string> = {}): Calls {
  const ctrl = csiClient(`unix://${sock}`, "Controller");
  return {
    close: () => ctrl.close(),
    create: async (name: string) => {
      const v = (await ctrl.CreateVolume({ name, volume_capabilities: [peerCap], capacity_range: { required_bytes: String(SIZE) }, parameters, secrets }))
        .volume;
      const capacity = Number(v?.capacity_bytes ?? 0);
      check(!!v?.volume_id && (capacity === 0 || capacity >= SIZE), `${label} CreateVolume ${name} answered ${JSON.stringify(v).slice(0, 200)}`);
      return v?.volume_id as string;
    },
    remove: (id: string) => ctrl.DeleteVolume({ volume_id: id, secrets }),
  };
}

/**
 * The bare chain (bench/lib/bare-chain.ts): our create's processes, hops and round trips with none
 * of our code — the floor of this design. Its "delete" removes the file only (not comparable).
 */
async function bareDriver(dir: string, nats: LocalServer, redis: LocalServer): Promise<Driver> {
  const bare = await startBareChain(dir, nats, redis, path.join(dir, "pools", "bare"));
  return {
    label: "bare chain",
    procs: { front: bare.pids.front, back: bare.pids.back, nats: nats.pid, redis: redis.pid },
    calls: () => ({ create: bare.create, remove: bare.remove, close: () => {} }),
    stop: async () => bare.stop(),
  };
}

/** N creates then N deletes through one driver at concurrency c, each step's CPU read from /proc. */
async function round(d: Driver, c: number, n: number, ceph?: CephBench): Promise<{ create: Step; remove: Step }> {
  const calls = d.calls();
  try {
    const ids: string[] = [];
    const tag = randomUUID().slice(0, 8);
    const step = async (op: (i: number) => Promise<unknown>): Promise<Step> => {
      const cpu = cpuMeter(d.procs, true);
      const client = cpuMeter({ client: process.pid });
      const cluster = await ceph?.meter();
      const f = await measure(n, c, op);
      const step = { f, cpu: cpu.perOp(n), client: client.perOp(n).total ?? 0 };
      return cluster ? { ...step, ceph: await cluster.perOp(n) } : step;
    };
    const create = await step(async (i) => {
      ids[i] = await calls.create(`peers-${tag}-${i}`);
    });
    if (create.f.errors === 0 && new Set(ids).size !== n) failures.push(`${d.label} c=${c}: ${new Set(ids).size} distinct volume ids for ${n} creates`);
    const remove = await step((i) => calls.remove(ids[i] as string));
    return { create, remove };
  } finally {
    calls.close();
  }
}

function print(label: string, s: Step): void {
  const cluster = s.ceph ? `   Ceph CPU ${s.ceph.cephCpu.toFixed(2)}   OSD ops ${s.ceph.osdOps.toFixed(1)}` : "";
  console.log(`${row(label, s.f)}\n${"".padEnd(32)}cpu ms/op: ${cpuLine(s.cpu)}   client ${s.client.toFixed(2)}${cluster}`);
  if (s.f.errors > 0) {
    failures.push(`${label}: ${s.f.errors} errors (${s.f.firstErrors.join("; ")})`);
    console.log(`${"".padEnd(32)}FAILED: ${s.f.firstErrors.join("; ")}`);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const fmt = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

/** The table: per level and driver, the median of the rounds (and the rounds' range of creates/s). */
function summary(drivers: Driver[], results: Map<string, Map<number, { create: Step; remove: Step }[]>>): void {
  console.log(
    `\nmedians of ${ROUNDS} rounds of ${N} (creates/s range in brackets); CPU = ms per create of the driver's processes, the client's apart\n` +
      `| c | driver | durable | creates/s | p50 ms | p99 ms | CPU ms/create | deletes/s | client CPU ms/create |${RBD ? " Ceph CPU ms/create | OSD ops/create |" : ""}\n|---|---|---|---|---|---|---|---|---|${RBD ? "---|---|" : ""}`,
  );
  for (const c of LEVELS) {
    const best = new Map<string, number>();
    for (const d of drivers) {
      const rs = results.get(d.label)?.get(c) ?? [];
      const rates = rs.map((r) => r.create.f.opsPerSec);
      best.set(d.label, median(rates));
      console.log(
        `| ${c} | ${d.label} | ${DURABILITY[d.label] ?? "not known"} | ${fmt(median(rates))} (${fmt(Math.min(...rates))}–${fmt(Math.max(...rates))}) | ${fmt(median(rs.map((r) => r.create.f.p50)))} | ${fmt(median(rs.map((r) => r.create.f.p99)))} | ` +
          `${fmt(median(rs.map((r) => r.create.cpu.total ?? 0)))} | ${d.label === "bare chain" ? "– (a file removed)" : fmt(median(rs.map((r) => r.remove.f.opsPerSec)))} | ${fmt(median(rs.map((r) => r.create.client)))} |` +
          (RBD ? ` ${fmt(median(rs.map((r) => r.create.ceph?.cephCpu ?? 0)))} | ${fmt(median(rs.map((r) => r.create.ceph?.osdOps ?? 0)))} |` : ""),
      );
    }
    const peers = drivers.filter((d) => d.label !== "ours" && d.label !== "bare chain").map((d) => best.get(d.label) ?? 0);
    if (peers.length === 0) continue;
    for (const mine of ["ours", "bare chain"].filter((l) => best.has(l)))
      console.log(`|   | ${mine} / fastest peer | | ${((best.get(mine) ?? 0) / Math.max(...peers)).toFixed(2)}× | | | | | |`);
  }
}

/** On Ceph: each driver's snapshots and clones, one at a time (BENCH_PEERS_COPIES of each, default 5): the median latency of each kind. */
async function copiesTable(drivers: Driver[]): Promise<void> {
  const n = Number(process.env.BENCH_PEERS_COPIES ?? 5);
  console.log(
    `\ncopies of a 1 GiB volume, one at a time, ${n} of each (median ms)\n| driver | CreateSnapshot | CreateVolume from a snapshot | CreateVolume from a volume |\n|---|---|---|---|`,
  );
  for (const d of drivers) {
    if (!d.csi) continue;
    const t = await copies(d.label, d.csi, n).catch((err: Error) => {
      failures.push(`${d.label} copies: ${err.message}`);
      return undefined;
    });
    if (t) console.log(`| ${d.label} | ${fmt(median(t.snapshot))} | ${fmt(median(t.fromSnapshot))} | ${fmt(median(t.fromVolume))} |`);
  }
}

/**
 * A driver's processes at rest, after the warm-up: their CPU ms per second over BENCH_PEERS_IDLE_MS
 * (5000) with no calls (timers, heartbeats, a client library's own threads). A create at
 * concurrency c costs its share of that too: idle ms/s ÷ creates/s.
 */
async function idleLine(d: Driver): Promise<void> {
  const ms = Number(process.env.BENCH_PEERS_IDLE_MS ?? 5000);
  if (ms <= 0) return;
  const meter = cpuMeter(d.procs, true);
  await new Promise((r) => setTimeout(r, ms));
  console.log(`${d.label} at rest: cpu ms/s: ${cpuLine(meter.perOp(ms / 1000))}`);
}

async function main({ dir, what }: { dir: string; what: string }) {
  console.log(
    `${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; node ${process.version}; ` +
      `${new Date().toISOString()}; every driver's data in ${dir}: ${what}`,
  );
  const peers = peersFromEnv();
  const nats = await startServer("nats", path.join(dir, "nats"));
  const redis = await startServer("redis", path.join(dir, "redis"));
  const drivers: Driver[] = [];
  const ceph = RBD ? await startCephBench() : undefined;
  try {
    if (ceph) console.log("on Ceph (BENCH_PEERS_RBD=1): ours on the Ceph pool rbd, the peers on the pool peers, one Ceph user; 1 GiB images");
    const svc = await startServices(dir, nats, redis, 1, {}, ceph?.pools);
    const jrn = svc.journals[0]?.child.pid;
    const procs: Processes = { ctl: svc.controller.child.pid, jrn, nats: nats.pid, redis: redis.pid };
    drivers.push({
      label: "ours",
      procs,
      refresh: () => {
        for (const d of jrn ? descendants(jrn) : []) procs[`jrn-${d}`] = d; // the RBD helper
      },
      calls: () => csiCalls("ours", svc.sock.slice("unix://".length), {}),
      stop: svc.stop,
      csi: { sock: svc.sock.slice("unix://".length), parameters: {}, secrets: {} },
    });
    if (!ceph && process.env.BENCH_PEERS_BARE !== "0") drivers.push(await bareDriver(dir, nats, redis));
    for (const p of peers) drivers.push(await startPeer(dir, p, ceph?.fill));
    for (const d of drivers) {
      const warm = await round(d, 16, WARMUP);
      for (const s of [warm.create, warm.remove]) if (s.f.errors > 0) failures.push(`${d.label} warm-up: ${s.f.firstErrors.join("; ")}`);
      d.refresh?.();
    }
    for (const d of drivers) await idleLine(d);
    const results = new Map(drivers.map((d) => [d.label, new Map<number, { create: Step; remove: Step }[]>()]));
    /** By level: the largest share of the machine's busy CPU in a round that was outside the drivers and the client. */
    const outsideShare = new Map<number, number>();
    for (const c of LEVELS) {
      for (let r = 0; r < ROUNDS; r++) {
        console.log(`\nconcurrency ${c}, round ${r + 1} of ${ROUNDS} (N=${N} each)`);
        const all = cpuMeter(Object.assign({ client: process.pid }, ...drivers.map((d) => d.procs)), true);
        const busyBefore = machineBusy();
        for (const d of [...drivers.slice(r % drivers.length), ...drivers.slice(0, r % drivers.length)]) {
          const res = await round(d, c, N, ceph);
          print(`${d.label} create`, res.create);
          print(`${d.label} delete`, res.remove);
          const byLevel = results.get(d.label) as Map<number, { create: Step; remove: Step }[]>;
          byLevel.set(c, [...(byLevel.get(c) ?? []), res]);
        }
        const busy = machineBusy() - busyBefore;
        const outside = busy - (all.perOp(1000).total ?? 0);
        outsideShare.set(c, Math.max(outsideShare.get(c) ?? 0, outside / busy));
        console.log(
          `the machine was busy ${busy.toFixed(2)} CPU s in this round, ${outside.toFixed(2)} s (${((100 * outside) / busy).toFixed(0)}%) outside the drivers' and the client's processes`,
        );
      }
    }
    summary(drivers, results);
    if (ceph) await copiesTable(drivers);
    console.log(
      `busy CPU outside the drivers' and the client's processes, largest share in a round: ${LEVELS.map((c) => `c=${c} ${(100 * (outsideShare.get(c) ?? 0)).toFixed(0)}%`).join(", ")} (other work on the machine, and kernel threads such as the loop disk's)`,
    );
  } finally {
    await Promise.all(drivers.map((d) => d.stop()));
    await Promise.all([nats.stop(), redis.stop(), ceph?.stop()]);
  }
}

await runInBenchDir(main, failures);
