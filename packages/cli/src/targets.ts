/**
 * Where csictl finds the stack: flags first, then the environment the services themselves read
 * (NATS_URL, REDIS_URL, CLUSTERS_FILE; CSI_ENDPOINT, CSI_NODE_ENDPOINT), then the running
 * `npm start`'s run/stack.json. Pure: the stack file comes in already read.
 */
import type { StackLookup } from "./stack-file.js";

export interface ConnectionFlags {
  nats?: string | undefined;
  redis?: string | undefined;
  endpoint?: string | undefined;
  nodeEndpoint?: string | undefined;
  clustersFile?: string | undefined;
}

export interface Targets {
  natsUrl?: string;
  redisUrl?: string;
  controllerEndpoint?: string;
  nodeEndpoint?: string;
  clustersFile?: string;
  /** Pool roots of the clusters file resolve under it (the stack's data directory). */
  dataDir: string;
  /** Why there is no stack file to fall back on (said when a target is missing). */
  noStack?: string;
}

export function resolveTargets(flags: ConnectionFlags, env: NodeJS.ProcessEnv, lookup: StackLookup, cwd: string): Targets {
  const stack = lookup.found ? lookup.stack : undefined;
  const pick = (...values: (string | undefined)[]) => values.find((v) => v !== undefined && v !== "");
  const t: Targets = { dataDir: stack?.dataDir ?? env.DATA_DIR ?? cwd };
  const set = <K extends keyof Targets>(k: K, v: Targets[K] | undefined) => {
    if (v !== undefined) t[k] = v;
  };
  set("natsUrl", pick(flags.nats, env.NATS_URL, stack?.natsUrl));
  set("redisUrl", pick(flags.redis, env.REDIS_URL, stack?.redisUrl));
  set("controllerEndpoint", pick(flags.endpoint, env.CSI_ENDPOINT, stack?.controllerEndpoint));
  set("nodeEndpoint", pick(flags.nodeEndpoint, env.CSI_NODE_ENDPOINT, stack?.nodeEndpoint));
  set("clustersFile", pick(flags.clustersFile, env.CLUSTERS_FILE, stack?.clustersFile));
  if (!lookup.found) t.noStack = lookup.why;
  return t;
}
