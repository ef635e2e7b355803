/**
 * Where csictl finds the stack: flags first, then the environment the services themselves read
 * (NATS_URL, REDIS_URL, CLUSTERS_FILE; CSI_ENDPOINT, CSI_NODE_ENDPOINT), then the running
 * `npm start`'s run/stack.json. Credentials likewise: the services' access variables (NATS_USER,
 * NATS_PASSWORD, NATS_CREDS, NATS_TLS_*, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA, REDIS_SENTINELS…),
 * else the auth directory of a locked-down stack (SECURE=1), or the sentinels of an HA stack, when its
 * server is the one used. Pure: the stack
 * file comes in already read.
 */
import { NATS_ACCESS_SETTINGS, type NatsAccess, REDIS_ACCESS_SETTINGS, type RedisAccess } from "@csi/runtime";
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
  /** NATS / Redis credentials from the environment (absent when none is set). */
  natsAccess?: Omit<NatsAccess, "natsUrl">;
  redisAccess?: Omit<RedisAccess, "redisUrl">;
  /** The auth directory of the locked-down stack whose NATS / Redis is used (domain/auth-files.ts). */
  natsAuthDir?: string;
  redisAuthDir?: string;
}

/** The access fields a settings table names (other than the URL) that are set in `env`, or undefined if none is. */
function accessFromEnv(settings: Record<string, { env: string }>, url: string, env: NodeJS.ProcessEnv): Record<string, string> | undefined {
  const set = Object.entries(settings).flatMap(([k, s]) => (k !== url && env[s.env] ? [[k, env[s.env] as string]] : []));
  return set.length > 0 ? Object.fromEntries(set) : undefined;
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
  set("natsAccess", accessFromEnv(NATS_ACCESS_SETTINGS, "natsUrl", env));
  set("redisAccess", accessFromEnv(REDIS_ACCESS_SETTINGS, "redisUrl", env));
  if (stack?.authDir && t.natsUrl === stack.natsUrl && !t.natsAccess) t.natsAuthDir = stack.authDir;
  // An HA stack's Redis is not locked down (docs/operations.md): no Redis credentials for it.
  if (stack?.authDir && !stack.redisSentinels && t.redisUrl === stack.redisUrl && !t.redisAccess) t.redisAuthDir = stack.authDir;
  // An HA stack (`npm start -- --ha`): its Redis master is found through its sentinels (it moves on a failover).
  if (stack?.redisSentinels && t.redisUrl === stack.redisUrl && !t.redisAccess)
    t.redisAccess = { redisSentinels: stack.redisSentinels, ...(stack.redisMasterName ? { redisMasterName: stack.redisMasterName } : {}) };
  set("controllerEndpoint", pick(flags.endpoint, env.CSI_ENDPOINT, stack?.controllerEndpoint));
  set("nodeEndpoint", pick(flags.nodeEndpoint, env.CSI_NODE_ENDPOINT, stack?.nodeEndpoint));
  set("clustersFile", pick(flags.clustersFile, env.CLUSTERS_FILE, stack?.clustersFile));
  if (!lookup.found) t.noStack = lookup.why;
  return t;
}
