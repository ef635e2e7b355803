/**
 * A service's settings: one table per service names, for each field of its config schema, the
 * environment variable and/or command-line flag it is read from. The table is the one source of
 * truth for what a service accepts — `loadConfig` reads through it, and the deploy tests check the
 * manifests' env names and args against it.
 */
import { parseArgs } from "node:util";
import { z } from "zod";
import { redactUrl } from "./access.js";
import { parseListenAddr } from "./ops/listen-addr.js";

export interface Setting {
  /** Environment variable, e.g. NATS_URL. */
  env?: string;
  /** Long command-line flag without dashes, e.g. "endpoint" for --endpoint (takes a value). */
  flag?: string;
  /** A secret (password, token): never echoed in an error. */
  secret?: boolean;
}

export type Settings<T> = { readonly [K in keyof T]?: Setting };

/** Every problem with a configuration, one line each, naming the variable or flag. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

function describe(s: Setting | undefined, field: string): string {
  const names = [s?.env, s?.flag && `--${s.flag}`].filter(Boolean);
  return names.length > 0 ? names.join(" / ") : field;
}

/** Parse argv flags and env through the settings table; a flag wins over its env variable. */
// biome-ignore lint/suspicious/noExplicitAny: any zod object schema
export function loadConfig<S extends z.ZodObject<any>>(schema: S, settings: Settings<z.input<S>>, argv: string[], env: NodeJS.ProcessEnv): z.output<S> {
  const entries = Object.entries(settings) as [string, Setting][];
  const options = Object.fromEntries(entries.filter(([, s]) => s.flag).map(([, s]) => [s.flag as string, { type: "string" as const }]));
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new ConfigError([(err as Error).message]);
  }
  const raw: Record<string, unknown> = {};
  for (const [field, s] of entries) {
    const v = (s.flag ? values[s.flag] : undefined) ?? (s.env ? env[s.env] : undefined);
    if (v !== undefined) raw[field] = v;
  }
  const parsed = schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  throw new ConfigError(
    parsed.error.issues.map((issue) => {
      const field = String(issue.path[0] ?? "");
      const setting = (settings as Record<string, Setting>)[field];
      const given = raw[field];
      const shown = given === undefined || setting?.secret ? "" : ` (got ${JSON.stringify(redactUrl(String(given)).slice(0, 80))})`;
      return `${describe(setting, field)}: ${issue.message}${shown}`;
    }),
  );
}

/** The env variable names a settings table accepts. */
export function envNames(settings: Settings<Record<string, unknown>>): string[] {
  return Object.values(settings).flatMap((s) => (s?.env ? [s.env] : []));
}

/** The flags (with leading dashes) a settings table accepts. */
export function flagNames(settings: Settings<Record<string, unknown>>): string[] {
  return Object.values(settings).flatMap((s) => (s?.flag ? [`--${s.flag}`] : []));
}

/** A main's config: on a ConfigError, one line per problem on stderr and exit 2 (nothing started). */
export function configOrExit<T>(service: string, load: () => T): T {
  try {
    return load();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${service}: ${err.message}\n`);
    process.exit(2);
  }
}

/**
 * Settings every service shares. NATS access: a URL plus, as the operator chooses, user/password or
 * an nkeys/JWT credentials file, and TLS files (docs/security.md).
 */
export const natsAccessShape = {
  natsUrl: z.string().default("nats://127.0.0.1:4222"),
  natsUser: z.string().optional(),
  natsPassword: z.string().optional(),
  natsCreds: z.string().optional(),
  natsTlsCa: z.string().optional(),
  natsTlsCert: z.string().optional(),
  natsTlsKey: z.string().optional(),
  /** The server runs the account layout of docs/security.md: the node fleet's streams are in the FLEET account. */
  natsAccounts: z
    .enum(["0", "1"])
    .default("0")
    .transform((v) => v === "1"),
};
export const NATS_ACCESS_SETTINGS = {
  natsUrl: { env: "NATS_URL" },
  natsUser: { env: "NATS_USER" },
  natsPassword: { env: "NATS_PASSWORD", secret: true },
  natsCreds: { env: "NATS_CREDS" },
  natsTlsCa: { env: "NATS_TLS_CA" },
  natsTlsCert: { env: "NATS_TLS_CERT" },
  natsTlsKey: { env: "NATS_TLS_KEY" },
  natsAccounts: { env: "NATS_ACCOUNTS" },
} as const;

/**
 * Redis access (the journal): URL (rediss:// for TLS) plus an ACL user/password and a CA file; or,
 * with Sentinel, the sentinels' addresses (comma list host:port; REDIS_URL is then not needed, its
 * credentials and database still apply), the master's name and the sentinels' own password.
 */
export const redisAccessShape = {
  redisUrl: z.string().default("redis://127.0.0.1:6379"),
  redisUsername: z.string().optional(),
  redisPassword: z.string().optional(),
  redisTlsCa: z.string().optional(),
  redisSentinels: z.string().optional(),
  redisMasterName: z.string().min(1).default("csi"),
  redisSentinelPassword: z.string().optional(),
};
export const REDIS_ACCESS_SETTINGS = {
  redisUrl: { env: "REDIS_URL" },
  redisUsername: { env: "REDIS_USERNAME" },
  redisPassword: { env: "REDIS_PASSWORD", secret: true },
  redisTlsCa: { env: "REDIS_TLS_CA" },
  redisSentinels: { env: "REDIS_SENTINELS" },
  redisMasterName: { env: "REDIS_MASTER_NAME" },
  redisSentinelPassword: { env: "REDIS_SENTINEL_PASSWORD", secret: true },
} as const;

/**
 * JetStream replicas of every stream a service makes (the journal's event log, the node streams and
 * queues; consumers follow their stream): 1 on one nats-server, 3 on a NATS cluster.
 */
export const streamShape = {
  streamReplicas: z.coerce.number().int().min(1).max(5).default(1),
};
export const STREAM_SETTINGS = {
  streamReplicas: { env: "STREAM_REPLICAS" },
} as const;

/**
 * Operations: the HTTP listener for /metrics, /healthz and /readyz ("host:port", port 0 = any free
 * one, "off" = none), a file written once the service is ready, and how long SIGTERM waits for
 * in-flight work before exiting. The listener binds loopback unless told otherwise: a deployment
 * names the address its probes reach (the pod IP in Kubernetes; docs/operations.md, "Bind address").
 */
export function opsShape(defaultMetricsPort: number) {
  return {
    metricsAddr: z
      .string()
      .default(`127.0.0.1:${defaultMetricsPort}`)
      .superRefine((s, ctx) => {
        const a = parseListenAddr(s);
        if ("error" in a) ctx.addIssue({ code: "custom", message: a.error });
      }),
    readyFile: z.string().optional(),
    shutdownGraceMs: z.coerce.number().int().min(0).default(20_000),
  };
}
export const OPS_SETTINGS = {
  metricsAddr: { env: "METRICS_ADDR", flag: "metrics-addr" },
  readyFile: { env: "READY_FILE" },
  shutdownGraceMs: { env: "SHUTDOWN_GRACE_MS" },
} as const;

/** Default metrics/health ports: controller, node-agent, journal (9808 is the livenessprobe sidecar's). */
export const METRICS_PORTS = { controller: 9810, "node-agent": 9811, journal: 9812 } as const;
