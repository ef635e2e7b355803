/** The controller's configuration, parsed once from the environment and the command line. */
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
  type Settings,
} from "@csi/runtime";
import { z } from "zod";

export const ControllerConfig = z.object({
  ...natsAccessShape,
  endpoint: z.string().default("unix:///run/csi/csi-controller.sock"),
  clustersFile: z.string().optional(),
  dataDir: z.string().default(".data"),
  ...logShape,
  ...opsShape(METRICS_PORTS.controller),
  /** How long a journal command may take before the CSI call fails with DEADLINE_EXCEEDED. */
  journalTimeoutMs: z.coerce.number().int().min(100).default(30_000),
  /** No sign of life (a reply or a working beat) from any journal replica of the cluster for this long: UNAVAILABLE. */
  journalQuietMs: z.coerce.number().int().min(100).default(2_000),
  /** The most List and GetCapacity wait for one cluster when they ask every cluster. */
  clusterFanOutTimeoutMs: z.coerce.number().int().min(100).default(2_000),
});
export type ControllerConfig = z.infer<typeof ControllerConfig>;

/** Where each setting comes from: the one table the deploy manifests are checked against. */
export const CONTROLLER_SETTINGS = {
  ...NATS_ACCESS_SETTINGS,
  endpoint: { env: "CSI_ENDPOINT", flag: "endpoint", help: "the CSI endpoint it serves: unix:///path or tcp://host:port" },
  clustersFile: { ...CLUSTERS_FILE_SETTING, flag: "clusters-file" },
  dataDir: { env: "DATA_DIR", help: "data directory: the built-in clusters' pool roots are under <DATA_DIR>/pools" },
  ...LOG_SETTINGS,
  ...OPS_SETTINGS,
  journalTimeoutMs: { env: "JOURNAL_TIMEOUT_MS", help: "how long a journal command may take before the CSI call fails with DEADLINE_EXCEEDED (ms)" },
  journalQuietMs: { env: "JOURNAL_QUIET_MS", help: "no reply or working beat from any journal replica of the cluster this long: UNAVAILABLE (ms)" },
  clusterFanOutTimeoutMs: { env: "CLUSTER_FANOUT_TIMEOUT_MS", help: "the most List* and GetCapacity wait for one cluster when they ask every cluster (ms)" },
} as const satisfies Settings<z.input<typeof ControllerConfig>>;

export function controllerConfig(argv: string[], env: NodeJS.ProcessEnv): ControllerConfig {
  return loadConfig(ControllerConfig, CONTROLLER_SETTINGS, argv, env);
}
