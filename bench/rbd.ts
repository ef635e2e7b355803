/**
 * How the journal should reach librbd, measured (docs/backends.md, "Why a helper"): pairs of
 * create + remove of a 16 MiB image on a single-node Ceph (testkit's startCeph), one pair at a
 * time, by three ways:
 *   cli     `rbd create` then `rbd rm`, each a child process (a CLI backend's floor: it would add
 *           JSON reads, `rbd info`, `image-meta set`);
 *   helper  the journal's RbdPool: createImage + deleteImage through its Python helper over librbd
 *           (what the journal does: one JSON line each way per librbd step);
 *   librbd  librbd called inside one Python process, no pipe and no process start: the floor a
 *           native addon could reach, as it would call the same librbd functions — bare (create +
 *           remove) and with every step RbdPool takes (owner metadata, describe, watchers, trash);
 * then the helper with BENCH_RBD_CONCURRENCY pairs at once. Reported per way: pairs/s and CPU ms
 * per pair on the client side (this process and its children, or the helper), and the Ceph
 * daemons' CPU per pair beside it (the cluster's share of the work, the same whoever calls).
 *
 *   node --conditions=source --import tsx bench/rbd.ts        # BENCH_RBD_PAIRS=100 BENCH_RBD_CONCURRENCY=8
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { MiB } from "@csi/contracts";
import { RbdPool } from "@csi/journal/pools";
import { CEPH_PYTHON, type CephCluster, startCeph } from "@csi/testkit";
import { cpuSeconds } from "./lib/cpu.js";

const run = promisify(execFile);
const PAIRS = Number(process.env.BENCH_RBD_PAIRS ?? 100);
const CONCURRENCY = Number(process.env.BENCH_RBD_CONCURRENCY ?? 8);

/** CPU seconds of this process's reaped children (cutime + cstime). */
function childrenCpu(): number {
  const f = readFileSync("/proc/self/stat", "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(f[13]) + Number(f[14])) / 100;
}
const selfCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

interface Row {
  way: string;
  pairs: number;
  seconds: number;
  clientCpu: number;
  /** Of clientCpu, this Node process's own (the journal's side of the helper). */
  nodeCpu: number;
  cephCpu: number;
  /** Client operations the OSD served meanwhile. */
  osdOps: number;
}

async function measure(ceph: CephCluster, way: string, clientCpu: () => number, body: () => Promise<void>): Promise<Row> {
  const daemons = Object.values(ceph.pids());
  const cephCpu = () => daemons.reduce<number>((n, pid) => n + cpuSeconds(pid), 0);
  const o0 = await ceph.osdOps();
  const [c0, n0, d0, t0] = [clientCpu(), selfCpu(), cephCpu(), performance.now()] as const;
  await body();
  const row = { way, pairs: PAIRS, seconds: (performance.now() - t0) / 1000, clientCpu: clientCpu() - c0, nodeCpu: selfCpu() - n0, cephCpu: cephCpu() - d0 };
  return { ...row, osdOps: (await ceph.osdOps()) - o0 };
}

/**
 * librbd in one Python process: "bare" = create + remove; "same" = every librbd step RbdPool takes
 * for createImage + deleteImage (create, its id read, the one owner metadata key written on its
 * header; the names listed; a read-only open: watchers checked, snapshots listed; the delete mark
 * on the header; trash move, trash remove).
 */
const LIBRBD = `
import json, os, resource, struct, sys, time, rados, rbd
n, same = int(sys.argv[1]), sys.argv[2] == "same"
c = rados.Rados(rados_id="admin", conffile=os.environ["CEPH_CONF"]); c.connect()
io = c.open_ioctx("rbd"); r = rbd.RBD()
def enc(b): return struct.pack("<I", len(b)) + b
def meta_set(image_id, k, v):
    io.execute("rbd_header." + image_id, "rbd", "metadata_set", struct.pack("<I", 1) + enc(k.encode()) + enc(v.encode()))
def pair(name):
    r.create(io, name, 16 << 20, old_format=False, features=1)
    if not same:
        r.remove(io, name); return
    raw = io.read("rbd_id." + name, 1024); image_id = raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode()
    meta_set(image_id, "csi/owner", '{"kind":"volume","uuid":"u","cluster":"c","name":"n","log":"l"}')
    [i["name"] for i in r.list2(io)]
    with rbd.Image(io, name, read_only=True) as ro:
        list(ro.watchers_list()); ro.id(); list(ro.list_snaps())
    meta_set(image_id, "csi/deleted", "1")
    r.trash_move(io, name, 0); r.trash_remove(io, image_id)
pair("warm")
u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
for i in range(n): pair("lib-%d" % i)
u1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.time()
print(json.dumps({"seconds": t1 - t0, "cpu": u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime}))
`;

async function main(): Promise<void> {
  const t0 = performance.now();
  const ceph = await startCeph();
  console.log(`ceph up in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const env = { ...process.env, CEPH_CONF: ceph.conf };
  const rows: Row[] = [];
  try {
    rows.push(
      await measure(ceph, "cli (rbd create + rbd rm)", childrenCpu, async () => {
        for (let i = 0; i < PAIRS; i++) {
          await run("rbd", ["create", "--size", "16M", "--image-feature", "layering", `rbd/cli-${i}`], { env });
          await run("rbd", ["rm", "--no-progress", `rbd/cli-${i}`], { env });
        }
      }),
    );
    const pool = new RbdPool({ name: "bench", id: 1, cephPool: "rbd", monitors: ceph.monitors, user: ceph.user, keyFile: ceph.keyFile });
    await pool.init();
    await pool.createImage("warm", MiB); // the helper started and connected before the clock runs
    await pool.deleteImage("warm");
    const helperCpu = () => selfCpu() + cpuSeconds(pool.helperPid);
    rows.push(
      await measure(ceph, "helper (RbdPool create + delete)", helperCpu, async () => {
        for (let i = 0; i < PAIRS; i++) {
          await pool.createImage(`helper-${i}`, 16 * MiB);
          await pool.deleteImage(`helper-${i}`);
        }
      }),
    );
    rows.push(
      await measure(ceph, `helper, ${CONCURRENCY} pairs at once`, helperCpu, async () => {
        let next = 0;
        const worker = async () => {
          for (let i = next++; i < PAIRS; i = next++) {
            await pool.createImage(`conc-${i}`, 16 * MiB);
            await pool.deleteImage(`conc-${i}`);
          }
        };
        await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      }),
    );
    await pool.close();
    for (const [way, mode] of [
      ["librbd in-process, bare create + remove", "bare"],
      ["librbd in-process, RbdPool's steps", "same"],
    ] as const) {
      let lib = { seconds: 0, cpu: 0 };
      const row = await measure(
        ceph,
        way,
        () => lib.cpu,
        async () => {
          lib = JSON.parse((await run(CEPH_PYTHON, ["-c", LIBRBD, String(PAIRS), mode], { env })).stdout);
        },
      );
      rows.push({ ...row, seconds: lib.seconds });
    }
  } finally {
    await ceph.stop();
  }
  const ms = (s: number) => ((s * 1000) / PAIRS).toFixed(1);
  console.log("WAY                                         PAIRS  PAIRS/S  CLIENT CPU MS/PAIR  OF WHICH NODE  CEPH CPU MS/PAIR  OSD OPS/PAIR");
  for (const r of rows) {
    const node = r.way.startsWith("helper") ? ms(r.nodeCpu) : "-";
    console.log(
      `${r.way.padEnd(44)}${String(r.pairs).padStart(5)}  ${(r.pairs / r.seconds).toFixed(1).padStart(7)}  ${ms(r.clientCpu).padStart(18)}  ${node.padStart(13)}  ${ms(r.cephCpu).padStart(16)}  ${(r.osdOps / r.pairs).toFixed(1).padStart(12)}`,
    );
  }
}

await main();
