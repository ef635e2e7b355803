/** The journal's configuration, parsed once from the environment and the command line. */
import {
  CLUSTERS_FILE_SETTING,
  LOG_SETTINGS,
  loadConfig,
  logShape,
  METRICS_PORTS,
  NATS_ACCESS_SETTINGS,
  natsAccessShape,
  OPS_SETTINGS,
  opsShape,
  REDIS_ACCESS_SETTINGS,
  redisAccessShape,
  type Settings,
  STREAM_SETTINGS,
  streamShape,
} from "@csi/runtime";
import { z } from "zod";

/** Redis lock TTL: a killed holder's locks are free within it (renewed every TTL/3 by a live holder). */
export const DEFAULT_LOCK_TTL_MS = 1_000;

export const JournalConfig = z.object({
  ...natsAccessShape,
  ...redisAccessShape,
  cluster: z.string().optional(),
  clustersFile: z.string().optional(),
  dataDir: z.string().default(".data"),
  ...logShape,
  ...opsShape(METRICS_PORTS.journal),
  replica: z.string().optional(),
  ...streamShape,
  /** Short, renewed every TTL/3 by a live holder: a killed holder's locks are free within it (docs/journal.md, "Failover"). */
  lockTtlMs: z.coerce.number().int().min(100).default(DEFAULT_LOCK_TTL_MS),
  /** Longer than the TTL, so a command resent after a replica died outwaits the dead holder's lock. */
  lockWaitMs: z.coerce.number().int().min(0).default(3_000),
  /** "Working" beats to a command's caller while it runs longer than this (0: none). */
  beatEveryMs: z.coerce.number().int().min(0).default(250),
  catchUpEveryMs: z.coerce.number().int().min(0).default(10_000),
  /** Debian's python3, which has python3-rbd (the RBD pools' helper runs on it; a pyenv or venv python3 on the PATH does not have it). */
  rbdPython: z.string().min(1).default("/usr/bin/python3"),
  /** Events per projection replay batch (tests make it small to see a rebuild's middle). */
  replayBatch: z.coerce.number().int().min(1).max(10_000).default(512),
  /** A Redis command unanswered this long fails, and a connection silent this long with commands pending is dropped (redis-link.ts). */
  redisCommandTimeoutMs: z.coerce.number().int().min(100).default(5_000),
  /** How long an operation waits for a projection rebuild before Unavailable (the CO retries). */
  rebuildWaitMs: z.coerce.number().int().min(0).default(10_000),
  /** A node's device reports taken per second, and at most this many at once (commands/deciders/report-bounds.ts). */
  reportRate: z.coerce.number().positive().max(100_000).default(50),
  reportBurst: z.coerce.number().int().min(1).max(1_000_000).default(500),
  /** Bind pools that belong to another log (or to none, under an empty log) to this one at start (docs/operations.md, "A pool knows its log"). */
  poolRebind: z
    .enum(["0", "1"])
    .default("0")
    .transform((v) => v === "1"),
  /** Whether the log server must fsync every append before its ack (log/durability.ts); "off" is the unsafe opt-out. */
  logFsync: z.enum(["required", "off"]).default("required"),
  /** The log servers' monitoring endpoints, where their sync setting is checked (comma list; unset: only their version is). */
  natsMonitorUrl: z
    .string()
    .default("")
    .transform((v) =>
      v
        .split(",")
        .map((u) => u.trim())
        .filter(Boolean),
    ),
});
export type JournalConfig = z.infer<typeof JournalConfig>;

/** Where each setting comes from: the one table the deploy manifests are checked against. */
export const JOURNAL_SETTINGS = {
  ...NATS_ACCESS_SETTINGS,
  ...REDIS_ACCESS_SETTINGS,
  cluster: { env: "CLUSTER_ID", flag: "cluster", help: "which cluster of the clusters file this journal serves (unset: its defaultCluster)" },
  clustersFile: { ...CLUSTERS_FILE_SETTING, flag: "clusters-file" },
  dataDir: { env: "DATA_DIR", help: "data directory: the built-in pools live under <DATA_DIR>/pools" },
  ...LOG_SETTINGS,
  ...OPS_SETTINGS,
  replica: { env: "REPLICA_ID", help: "this replica's name in every event's actor (unset: host:pid)" },
  ...STREAM_SETTINGS,
  lockTtlMs: { env: "LOCK_TTL_MS", help: "Redis lock TTL (ms), renewed every TTL/3: a killed holder's locks are free within it" },
  lockWaitMs: { env: "LOCK_WAIT_MS", help: "how long a command waits for a busy lock before answering Aborted (ms)" },
  catchUpEveryMs: { env: "CATCHUP_EVERY_MS", help: "how often the log tail is replayed into Redis (ms; 0: only at start and on demand)" },
  beatEveryMs: { env: "JOURNAL_BEAT_MS", help: "a command running longer than this sends working beats to its caller this often (ms; 0: none)" },
  rbdPython: { env: "RBD_PYTHON", help: "the python3 with python3-rbd that runs the RBD pools' helper (Debian's)" },
  replayBatch: { env: "JOURNAL_REPLAY_BATCH", help: "events per catch-up batch, aggregates per rebuild chunk (at most 1,000)" },
  redisCommandTimeoutMs: {
    env: "REDIS_COMMAND_TIMEOUT_MS",
    help: "a Redis command unanswered this long fails UNAVAILABLE, and a connection silent this long is dropped (ms)",
  },
  rebuildWaitMs: { env: "REBUILD_WAIT_MS", help: "how long a command waits for a projection rebuild before answering Unavailable (ms)" },
  reportRate: { env: "REPORT_RATE", help: "device reports taken from one node per second (beyond its burst: dropped and counted)" },
  reportBurst: { env: "REPORT_BURST", help: "device reports taken from one node at once before its rate applies" },
  poolRebind: {
    env: "POOL_REBIND",
    help: "1: bind pools that belong to another event log (or hold images under an empty log) to this one; gc never removes their older images. Once, after a lost log that cannot be restored",
  },
  logFsync: {
    env: "LOG_FSYNC",
    help: "required: refuse a log server that acknowledges appends before they are on disk (nats-server < 2.10, or without sync_interval: always); off: start anyway (UNSAFE: a power cut loses answered operations)",
  },
  natsMonitorUrl: {
    env: "NATS_MONITOR_URL",
    help: "the NATS servers' monitoring endpoints (http://host:8222, comma list), where the journal checks that they fsync every append",
  },
} as const satisfies Settings<z.input<typeof JournalConfig>>;

export function journalConfig(argv: string[], env: NodeJS.ProcessEnv): JournalConfig {
  return loadConfig(JournalConfig, JOURNAL_SETTINGS, argv, env);
}
