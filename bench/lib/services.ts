/** The services a bench scenario talks to: journal replica(s) and a controller, spawned as `npm start` would. */
import { readdir } from "node:fs/promises";
import path from "node:path";
import type { LocalServer, TestPool } from "@csi/testkit";
import { spawnService, writeClustersFile } from "@csi/testkit";

/** Start a journal (or several) and a controller on fresh servers; `nodeArgs` from BENCH_PROFILE; `pools`: cluster bench's (default: one file pool). */
export async function startServices(
  dir: string,
  nats: LocalServer,
  redis: LocalServer,
  replicas = 1,
  env: Record<string, string> = {},
  pools: TestPool[] = ["default"],
) {
  const clustersFile = await writeClustersFile(dir, [{ clusterID: "bench", pools }]);
  const base = {
    NATS_URL: nats.url,
    ...(nats.monitorUrl ? { NATS_MONITOR_URL: nats.monitorUrl } : {}),
    // The bench's opt-out of durable acks, as the stack's (docs/operations.md, "Durability"): its servers and journals alike.
    ...(process.env.CSI_UNSAFE_NO_FSYNC === "1" ? { LOG_FSYNC: "off" } : {}),
    REDIS_URL: redis.url,
    CLUSTERS_FILE: clustersFile,
    DATA_DIR: dir,
    CATCHUP_EVERY_MS: "0",
    METRICS_ADDR: "off",
    ...env,
  };
  const nodeArgs = process.env.BENCH_PROFILE ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE] : [];
  const journals = await Promise.all(Array.from({ length: replicas }, () => spawnService("journal", base, { nodeArgs, readyTimeoutMs: 600_000 })));
  const sock = `unix://${path.join(dir, "controller.sock")}`;
  const controller = await spawnService("controller", base, { args: ["--endpoint", sock], nodeArgs });
  const poolDir = path.join(dir, "pools", "bench", "default");
  return {
    journals,
    controller,
    sock,
    poolDir,
    countImages: async () => (await readdir(poolDir)).filter((f) => f.endsWith(".img")).length,
    stop: () => Promise.all([...journals.map((j) => j.stop()), controller.stop()]),
  };
}
