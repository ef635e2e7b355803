/** The journal's configuration, parsed once from the environment and the command line. */
import {
  loadConfig,
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
  logLevel: z.string().default("info"),
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
  /** Fault injection for tests: SIGKILL this process right after appending an event of this type. */
  crashAfter: z.string().optional(),
  /** Fault injection for tests: SIGSTOP (freeze) this process right after appending an event of this type. */
  freezeAfter: z.string().optional(),
  /** Fault injection for tests: hold every copy (snapshot, clone) this long with its temp file in the pool, so a test can kill the journal mid-copy. */
  testHoldCopyMs: z.coerce.number().int().min(0).default(0),
  /** Events per projection replay batch (tests make it small to see a rebuild's middle). */
  replayBatch: z.coerce.number().int().min(1).max(10_000).default(512),
  /** How long an operation waits for a projection rebuild before Unavailable (the CO retries). */
  rebuildWaitMs: z.coerce.number().int().min(0).default(10_000),
});
export type JournalConfig = z.infer<typeof JournalConfig>;

/** Where each setting comes from: the one table the deploy manifests are checked against. */
export const JOURNAL_SETTINGS = {
  ...NATS_ACCESS_SETTINGS,
  ...REDIS_ACCESS_SETTINGS,
  cluster: { env: "CLUSTER_ID", flag: "cluster" },
  clustersFile: { env: "CLUSTERS_FILE", flag: "clusters-file" },
  dataDir: { env: "DATA_DIR" },
  logLevel: { env: "LOG_LEVEL" },
  ...OPS_SETTINGS,
  replica: { env: "REPLICA_ID" },
  ...STREAM_SETTINGS,
  lockTtlMs: { env: "LOCK_TTL_MS" },
  lockWaitMs: { env: "LOCK_WAIT_MS" },
  catchUpEveryMs: { env: "CATCHUP_EVERY_MS" },
  beatEveryMs: { env: "JOURNAL_BEAT_MS" },
  crashAfter: { env: "JOURNAL_CRASH_AFTER" },
  freezeAfter: { env: "JOURNAL_FREEZE_AFTER" },
  testHoldCopyMs: { env: "JOURNAL_TEST_HOLD_COPY_MS" },
  replayBatch: { env: "JOURNAL_REPLAY_BATCH" },
  rebuildWaitMs: { env: "REBUILD_WAIT_MS" },
} as const satisfies Settings<z.input<typeof JournalConfig>>;

export function journalConfig(argv: string[], env: NodeJS.ProcessEnv): JournalConfig {
  return loadConfig(JournalConfig, JOURNAL_SETTINGS, argv, env);
}
