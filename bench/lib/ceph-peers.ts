/**
 * `BENCH_PEERS_RBD=1 npm run bench:peers`: every driver on one single-node Ceph (testkit's
 * startCeph), as the same Ceph user (`profile rbd`): ours on the Ceph pool `rbd`, the peers on the
 * pool `peers`. A peer's command line, BENCH_PEER_<NAME>_PARAMETERS and BENCH_PEER_<NAME>_SECRETS
 * (the CSI secrets of its CreateVolume and DeleteVolume, e.g. ceph-csi's `{"userID": "{user}",
 * "userKey": "{key}"}`) may name {monitors} (comma-separated), {cephPool}, {user}, {keyFile} and
 * {key} (the user's key); BENCH_PEER_<NAME>_CONFIG is filled the same way. Beside each driver's own
 * CPU, a step measures the Ceph daemons' CPU and the client operations the OSD served (its admin
 * socket), per create and per delete: the cluster's share of the work, whoever calls.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { csiClient } from "@csi/runtime";
import { type CephCluster, rbdTestPool, startCeph, type TestPool } from "@csi/testkit";
import { cpuSeconds } from "./cpu.js";

const GiB = 1024 * 1024 * 1024;

export interface CephBench {
  /** Ours's pools (its clusters file). */
  pools: TestPool[];
  /** A peer's command line, parameters, secrets or config with the placeholders above filled. */
  fill(text: string): string;
  /** Start counting; `perOp(n)` then gives the Ceph daemons' CPU ms and OSD ops per operation. */
  meter(): Promise<{ perOp(n: number): Promise<{ cephCpu: number; osdOps: number }> }>;
  stop(): Promise<void>;
}

export async function startCephBench(): Promise<CephBench> {
  const ceph: CephCluster = await startCeph({ pools: ["rbd", "peers"] });
  const key = readFileSync(ceph.keyFile, "utf8").trim();
  const daemons = Object.values(ceph.pids());
  const cephCpu = () => daemons.reduce<number>((n, pid) => n + cpuSeconds(pid), 0);
  const fill = (text: string) =>
    text
      .replaceAll("{monitors}", ceph.monitors.join(","))
      .replaceAll("{cephPool}", "peers")
      .replaceAll("{user}", ceph.user)
      .replaceAll("{keyFile}", ceph.keyFile)
      .replaceAll("{key}", key);
  return {
    pools: [rbdTestPool("ceph", ceph)],
    fill,
    meter: async () => {
      const [cpu0, ops0] = [cephCpu(), await ceph.osdOps()];
      return { perOp: async (n) => ({ cephCpu: ((cephCpu() - cpu0) * 1000) / n, osdOps: ((await ceph.osdOps()) - ops0) / n }) };
    },
    stop: () => ceph.stop(),
  };
}

/** A driver's CSI socket and what its calls carry. */
export interface CsiTarget {
  sock: string;
  parameters: Record<string, string>;
  secrets: Record<string, string>;
}

/**
 * Copies through one driver, one at a time: of a fresh 1 GiB source volume, `n` CreateSnapshot,
 * `n` CreateVolume from a snapshot and `n` from the volume; everything deleted after. Each call's
 * latency in ms, by kind (the medians are the table's).
 */
export async function copies(label: string, t: CsiTarget, n: number): Promise<Record<"snapshot" | "fromSnapshot" | "fromVolume", number[]>> {
  const ctrl = csiClient(`unix://${t.sock}`, "Controller");
  const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: {} };
  const tag = randomUUID().slice(0, 8);
  const volume = async (name: string, source?: object) => {
    const v = (
      await ctrl.CreateVolume({
        name,
        volume_capabilities: [cap],
        capacity_range: { required_bytes: String(GiB) },
        parameters: t.parameters,
        secrets: t.secrets,
        ...(source ? { volume_content_source: source } : {}),
      })
    ).volume;
    if (!v?.volume_id) throw new Error(`${label}: CreateVolume ${name} answered no volume`);
    return v.volume_id;
  };
  const timed = async <T>(out: number[], f: () => Promise<T>): Promise<T> => {
    const t0 = performance.now();
    const r = await f();
    out.push(performance.now() - t0);
    return r;
  };
  const made = { volumes: [] as string[], snapshots: [] as string[] };
  const times = { snapshot: [] as number[], fromSnapshot: [] as number[], fromVolume: [] as number[] };
  try {
    const source = await volume(`copies-${tag}-src`);
    made.volumes.push(source);
    for (let i = 0; i < n; i++) {
      const s = await timed(times.snapshot, () =>
        ctrl.CreateSnapshot({ name: `copies-${tag}-snap-${i}`, source_volume_id: source, parameters: t.parameters, secrets: t.secrets }),
      );
      if (!s.snapshot?.snapshot_id) throw new Error(`${label}: CreateSnapshot answered no snapshot`);
      made.snapshots.push(s.snapshot.snapshot_id);
      made.volumes.push(await timed(times.fromSnapshot, () => volume(`copies-${tag}-fs-${i}`, { snapshot: { snapshot_id: s.snapshot?.snapshot_id } })));
      made.volumes.push(await timed(times.fromVolume, () => volume(`copies-${tag}-fv-${i}`, { volume: { volume_id: source } })));
    }
  } finally {
    // Clones first, the source last; the snapshots after the volumes restored from them.
    for (const id of made.volumes.reverse()) await ctrl.DeleteVolume({ volume_id: id, secrets: t.secrets }).catch(() => {});
    for (const id of made.snapshots) await ctrl.DeleteSnapshot({ snapshot_id: id, secrets: t.secrets }).catch(() => {});
    ctrl.close();
  }
  return times;
}
