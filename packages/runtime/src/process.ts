/** Small runtime pieces every service's main.ts uses: the root logger and the clusters file. */
import { readFileSync } from "node:fs";
import os from "node:os";
import { type Clusters, DEFAULT_CLUSTERS, resolveClusters } from "@csi/contracts";
import { type DestinationStream, type Logger, type LoggerOptions, pino } from "pino";
import pretty from "pino-pretty";
import type { LogFormat } from "./config.js";
import { type OpsConfig, startOpsListener } from "./ops/listener.js";
import { Ops } from "./ops/metrics.js";

/**
 * The root logger of a process (docs/operations.md, "Logs"): every service's, configured here only.
 *
 *  - `json` (the default): one JSON object per line on `fd` (stdout; a CLI's stderr), the level by
 *    name (`"level":"info"`, not pino's 30), for log shippers and `jq`;
 *  - `pretty` (LOG_FORMAT=pretty): one line a person reads — time, level, service, message, then
 *    the fields — through pino-pretty (pino's own companion for this), in this process and
 *    synchronously, so the last lines before an exit are not lost in a worker thread.
 *
 * Secrets are stripped the same way in both.
 */
export function createLogger(service: string, level = "info", fd = 1, format: LogFormat = "json"): Logger {
  const options: LoggerOptions = {
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
  };
  if (format === "pretty") return pino(options, prettyStream(fd));
  return pino({ ...options, formatters: { level: (label) => ({ level: label }) } }, pino.destination(fd));
}

/** pino-pretty's stream: `[HH:MM:ss.l] LEVEL: (service) message {fields}` on one line; colours on a terminal only. */
function prettyStream(fd: number): DestinationStream {
  return pretty({
    destination: fd,
    sync: true,
    colorize: (fd === 1 ? process.stdout : process.stderr).isTTY === true,
    translateTime: "SYS:HH:MM:ss.l",
    singleLine: true,
    ignore: "pid,host,service",
    messageFormat: "({service}) {msg}",
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

/**
 * A service's main: start it, stop it cleanly on SIGINT/SIGTERM (sockets removed, NATS drained),
 * exit non-zero if it cannot start. Its root logger is made here (LOG_LEVEL, LOG_FORMAT); its ops
 * listener (METRICS_ADDR: /metrics, /healthz, /readyz) runs from before the start to the end, with
 * `csi_build_info` of `version` (its package.json's: `packageVersion`); its READY_FILE is written once it is ready
 * (ops/listener.ts).
 */
export async function runMain(
  service: string,
  cfg: Partial<OpsConfig> & { logLevel?: string; logFormat?: LogFormat },
  start: (log: Logger, ops: Ops) => Promise<{ stop(): Promise<void> }>,
  version: string,
): Promise<void> {
  const logger = createLogger(service, cfg.logLevel, 1, cfg.logFormat);
  const ops = new Ops(service, version);
  try {
    const listener = await startOpsListener(ops, { metricsAddr: "off", ...cfg }, logger);
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

/** Whether a process `pid` exists (signal 0; EPERM: it exists, as another user's). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
