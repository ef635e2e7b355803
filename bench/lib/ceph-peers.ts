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
import { readFileSync } from "node:fs";
import { type CephCluster, rbdTestPool, startCeph, type TestPool } from "@csi/testkit";
import { cpuSeconds } from "./cpu.js";

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
