/** The node-agent's configuration, parsed once from the environment and the command line. */
import os from "node:os";
import path from "node:path";
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
  STREAM_SETTINGS,
  streamShape,
} from "@csi/runtime";
import { z } from "zod";
import { parseForbiddenRoots } from "./domain/paths.js";

export const NodeAgentConfig = z.object({
  ...natsAccessShape,
  ...streamShape,
  endpoint: z.string().default("unix:///run/csi/csi-node.sock"),
  nodeId: z.string().min(1).max(128).default(os.hostname()),
  dataDir: z.string().default(".data"),
  clustersFile: z.string().optional(),
  /** Where the node keeps its state file (default <dataDir>/node/<nodeId>). */
  stateDir: z.string().optional(),
  ...logShape,
  ...opsShape(METRICS_PORTS["node-agent"]),
  maxVolumes: z.coerce.number().int().min(0).default(64),
  heartbeatMs: z.coerce.number().int().min(100).default(10_000),
  /** The cgroup whose tasks' I/O to the volumes' devices is limited (absolute, under /sys/fs/cgroup); unset = kubepods when present. */
  ioLimitsCgroup: z
    .string()
    .optional()
    .transform((s) => s || undefined)
    .refine((s) => s === undefined || (path.posix.normalize(s) === s && s.startsWith("/sys/fs/cgroup/")), {
      message: "IO_LIMITS_CGROUP must be a clean absolute path under /sys/fs/cgroup/",
    }),
  /** Roots no staging or target path may be under (NODE_FORBIDDEN_ROOTS, comma-separated; default /proc,/sys,/dev). */
  forbiddenRoots: z
    .string()
    .optional()
    .transform((s, ctx) => {
      try {
        return parseForbiddenRoots(s);
      } catch (err) {
        ctx.addIssue({ code: "custom", message: `NODE_FORBIDDEN_ROOTS: ${(err as Error).message}` });
        return z.NEVER;
      }
    }),
  /** The deadline of every node operation, waiting for the volume's lock included (NODE_OP_TIMEOUT_MS). */
  opTimeoutMs: z.coerce.number().int().min(100).default(120_000),
});
export type NodeAgentConfig = z.infer<typeof NodeAgentConfig>;

/** Where each setting comes from: the one table the deploy manifests are checked against. */
export const NODE_AGENT_SETTINGS = {
  ...NATS_ACCESS_SETTINGS,
  ...STREAM_SETTINGS,
  endpoint: { env: "CSI_ENDPOINT", flag: "endpoint", help: "the CSI endpoint it serves: unix:///path or tcp://host:port" },
  nodeId: { env: "NODE_ID", flag: "nodeid", help: "the CSI node id (default: this host's name)" },
  dataDir: { env: "DATA_DIR", help: "data directory: the built-in pools and, by default, the node's state" },
  clustersFile: CLUSTERS_FILE_SETTING,
  stateDir: { env: "NODE_STATE_DIR", help: "where the node's state file lives (unset: <DATA_DIR>/node/<NODE_ID>)" },
  ...LOG_SETTINGS,
  ...OPS_SETTINGS,
  maxVolumes: { env: "MAX_VOLUMES_PER_NODE", help: "reported in NodeGetInfo and the registration (claims check it)" },
  heartbeatMs: { env: "HEARTBEAT_MS", help: "registration heartbeat interval (ms)" },
  ioLimitsCgroup: {
    env: "IO_LIMITS_CGROUP",
    help: "cgroup (absolute, under /sys/fs/cgroup/) whose I/O to the volumes' devices gets their limits (unset: kubepods when present)",
  },
  forbiddenRoots: { env: "NODE_FORBIDDEN_ROOTS", help: "comma-separated roots no staging or target path may be under (unset: /proc,/sys,/dev)" },
  opTimeoutMs: { env: "NODE_OP_TIMEOUT_MS", help: "deadline of every node operation, the wait for the volume's lock included (ms)" },
} as const satisfies Settings<z.input<typeof NodeAgentConfig>>;

export function nodeAgentConfig(argv: string[], env: NodeJS.ProcessEnv): NodeAgentConfig {
  return loadConfig(NodeAgentConfig, NODE_AGENT_SETTINGS, argv, env);
}
