/** Small runtime pieces every service's main.ts uses: the root logger and the clusters file. */
import { readFileSync } from "node:fs";
import os from "node:os";
import { type Clusters, DEFAULT_CLUSTERS, resolveClusters } from "@csi/contracts";
import { type Logger, pino } from "pino";
import { type OpsConfig, startOpsListener } from "./ops/listener.js";
import { Ops } from "./ops/metrics.js";

/** The root logger of a process: JSON lines on stdout (fd 1), or another fd (a CLI's stderr). */
export function createLogger(service: string, level = "info", fd = 1): Logger {
  return pino(
    {
      level,
      base: { service, pid: process.pid, host: os.hostname() },
      // Defence in depth: the gRPC chain already strips secrets before logging; access passwords
      // (NATS_PASSWORD, REDIS_PASSWORD) are never logged, and would be stripped if they were.
      redact: {
        paths: [
          "*.secrets",
          "*.*.secrets",
          "secrets",
          "*.controller_publish_secrets",
          "*.node_stage_secrets",
          "*.node_publish_secrets",
          ...["natsPassword", "redisPassword", "password", "pass"].flatMap((k) => [k, `*.${k}`]),
        ],
        censor: "***stripped***",
      },
    },
    pino.destination(fd),
  );
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

/**
 * A service's main: start it, stop it cleanly on SIGINT/SIGTERM (sockets removed, NATS drained),
 * exit non-zero if it cannot start. Its ops listener (METRICS_ADDR: /metrics, /healthz, /readyz)
 * runs from before the start to the end; its READY_FILE is written once it is ready (ops/listener.ts).
 */
export async function runMain(
  service: string,
  logger: Logger,
  start: (log: Logger, ops: Ops) => Promise<{ stop(): Promise<void> }>,
  opsConfig: OpsConfig = { metricsAddr: "off" },
): Promise<void> {
  const ops = new Ops(service);
  try {
    const listener = await startOpsListener(ops, opsConfig, logger);
    const running = await start(logger, ops);
    listener.started();
    let stopping = false;
    const shutdown = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      listener.stopping();
      logger.info({ signal }, `${service} stopping`);
      await running.stop().catch((err) => logger.error({ err }, "error while stopping"));
      await listener.close();
      process.exit(0);
    };
    process.once("SIGINT", () => void shutdown("SIGINT"));
    process.once("SIGTERM", () => void shutdown("SIGTERM"));
  } catch (err) {
    logger.fatal({ err }, `${service} failed to start`);
    process.exit(1);
  }
}
