/** Small runtime pieces every service's main.ts uses: the root logger and the clusters file. */
import { readFileSync } from "node:fs";
import os from "node:os";
import { pino, type Logger } from "pino";
import { type Clusters, DEFAULT_CLUSTERS, resolveClusters } from "./clusters.js";

export function createLogger(service: string, level = "info"): Logger {
  return pino({
    level,
    base: { service, pid: process.pid, host: os.hostname() },
    // Defence in depth: the gRPC chain already strips secrets before logging.
    redact: { paths: ["*.secrets", "*.*.secrets", "secrets", "*.controller_publish_secrets", "*.node_stage_secrets", "*.node_publish_secrets"], censor: "***stripped***" },
  });
}

/** The clusters file (JSON) if given, else the built-in single local cluster. */
export function loadClusters(file: string | undefined, dataDir: string): Clusters {
  const raw = file ? JSON.parse(readFileSync(file, "utf8")) : DEFAULT_CLUSTERS;
  return resolveClusters(raw, dataDir);
}

/** The replica id that goes into every event's actor: host:pid unless configured. */
export function replicaId(configured?: string): string {
  return configured || `${os.hostname()}:${process.pid}`;
}
