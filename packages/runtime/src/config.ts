/**
 * A service's settings: one table per service names, for each field of its config schema, the
 * environment variable and/or command-line flag it is read from and what it means. The table is
 * the one source of truth for what a service accepts — `loadConfig` reads through it, `--help`
 * prints it (with each default, from the schema), and the deploy tests check the manifests' env
 * names and args against it.
 */
import { readFileSync } from "node:fs";
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
  /** What it means, in one line, for `--help` (the default comes from the config schema). */
  help: string;
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
 * The default a field's schema declares, before any transform (what an operator would write), or
 * undefined when it has none: through optional, nullable, pipe (a transform's input) and default.
 */
export function schemaDefault(schema: z.ZodType): unknown {
  // biome-ignore lint/suspicious/noExplicitAny: zod's internal definition, walked generically
  let t: any = schema;
  while (t) {
    const def = t._zod.def;
    if (def.type === "default" || def.type === "prefault") return def.defaultValue;
    t = def.type === "pipe" ? def.in : def.innerType;
  }
  return undefined;
}

const shown = (v: unknown) => (v === undefined ? "unset" : Array.isArray(v) ? v.join(",") : String(v));

/** Rows of text as columns, each as wide as its widest cell (the last one not padded). */
function columns(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
  return rows
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** `--help`'s table: every setting — its variable, its flag, its default (from the schema), what it means. */
// biome-ignore lint/suspicious/noExplicitAny: any zod object schema
export function settingsTable<S extends z.ZodObject<any>>(schema: S, settings: Settings<z.input<S>>): string {
  const rows = (Object.entries(settings) as [string, Setting][]).map(([field, s]) => [
    s.env ?? "-",
    s.flag ? `--${s.flag}` : "-",
    shown(schemaDefault(schema.shape[field] as z.ZodType)),
    s.secret ? `${s.help} (secret: never printed)` : s.help,
  ]);
  return columns([["VARIABLE", "FLAG", "DEFAULT", "MEANING"], ...rows]);
}

/** What a service's main.ts gives `mainConfig`. */
// biome-ignore lint/suspicious/noExplicitAny: any zod object schema
export interface ServiceMain<S extends z.ZodObject<any>> {
  /** The service's name (logs, errors). */
  service: string;
  /** One line: what it is. */
  summary: string;
  schema: S;
  settings: Settings<z.input<S>>;
  /** Its package.json (`new URL("../package.json", import.meta.url)` from src/main.ts and dist/main.js alike): version and bin name. */
  packageJson: URL;
}

const packageOf = (file: URL) => JSON.parse(readFileSync(file, "utf8")) as { version: string; bin?: Record<string, string> };

/** The version in a package.json (`new URL("../package.json", import.meta.url)` from a service's src/ or dist/ alike). */
export const packageVersion = (file: URL): string => packageOf(file).version;

/** `--help`: the service, how to run it, and its settings table. */
// biome-ignore lint/suspicious/noExplicitAny: any zod object schema
function serviceHelp<S extends z.ZodObject<any>>(main: ServiceMain<S>): string {
  const pkg = packageOf(main.packageJson);
  const name = Object.keys(pkg.bin ?? {})[0] ?? main.service;
  return [
    `${name} ${pkg.version}: ${main.summary}`,
    "",
    `usage: ${name} [--flag value]...   (every setting is read from its variable; a flag wins over it)`,
    `       ${name} --help | --version`,
    "",
    settingsTable(main.schema, main.settings),
    "",
  ].join("\n");
}

/**
 * A service's config from its argv and environment, for its main.ts: `--help` prints its settings
 * table and `--version` its version, each on stdout with exit 0; a bad configuration is one line
 * per problem and exit 2 (configOrExit). Nothing has started either way.
 */
// biome-ignore lint/suspicious/noExplicitAny: any zod object schema
export function mainConfig<S extends z.ZodObject<any>>(main: ServiceMain<S>, argv: string[], env: NodeJS.ProcessEnv): z.output<S> {
  const info = argv.includes("--help") || argv.includes("-h") ? "help" : argv.includes("--version") ? "version" : undefined;
  if (info) {
    process.stdout.write(info === "help" ? serviceHelp(main) : `${packageOf(main.packageJson).version}\n`);
    process.exit(0);
  }
  return configOrExit(main.service, () => loadConfig(main.schema, main.settings, argv, env));
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
  natsUrl: { env: "NATS_URL", help: "NATS with JetStream: a URL, or a comma-separated list of a cluster's servers" },
  natsUser: { env: "NATS_USER", help: "NATS user of this service's role (docs/security.md)" },
  natsPassword: { env: "NATS_PASSWORD", secret: true, help: "that user's password" },
  natsCreds: { env: "NATS_CREDS", help: "instead of user/password: a .creds file (JWT + nkey seed) or an nkey user seed file" },
  natsTlsCa: { env: "NATS_TLS_CA", help: "CA file that signed the NATS servers' certificates (turns TLS on)" },
  natsTlsCert: { env: "NATS_TLS_CERT", help: "client certificate for NATS TLS (with NATS_TLS_KEY)" },
  natsTlsKey: { env: "NATS_TLS_KEY", help: "its private key" },
  natsAccounts: { env: "NATS_ACCOUNTS", help: "1: the server runs the account layout (the node fleet's streams are the FLEET account's, docs/security.md)" },
} as const satisfies Settings<z.input<z.ZodObject<typeof natsAccessShape>>>;

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
  redisUrl: { env: "REDIS_URL", help: "Redis (locks and the projection); rediss:// for TLS; not needed with REDIS_SENTINELS" },
  redisUsername: { env: "REDIS_USERNAME", help: "Redis ACL user" },
  redisPassword: { env: "REDIS_PASSWORD", secret: true, help: "that user's password" },
  redisTlsCa: { env: "REDIS_TLS_CA", help: "CA file of the Redis server's certificate (turns TLS on)" },
  redisSentinels: { env: "REDIS_SENTINELS", help: "host:port,... of the Sentinels: the master is found through them" },
  redisMasterName: { env: "REDIS_MASTER_NAME", help: "the master's name at the Sentinels" },
  redisSentinelPassword: { env: "REDIS_SENTINEL_PASSWORD", secret: true, help: "the Sentinels' own password" },
} as const satisfies Settings<z.input<z.ZodObject<typeof redisAccessShape>>>;

/**
 * JetStream replicas of every stream a service makes (the journal's event log, the node streams and
 * queues; consumers follow their stream): 1 on one nats-server, 3 on a NATS cluster.
 */
export const streamShape = {
  streamReplicas: z.coerce.number().int().min(1).max(5).default(1),
};
export const STREAM_SETTINGS = {
  streamReplicas: { env: "STREAM_REPLICAS", help: "JetStream replicas of every stream this service makes (3 in a NATS cluster)" },
} as const satisfies Settings<z.input<z.ZodObject<typeof streamShape>>>;

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
  metricsAddr: {
    env: "METRICS_ADDR",
    flag: "metrics-addr",
    help: "/metrics, /healthz, /readyz listener: host:port (port 0: any free port; :port: every interface) or off",
  },
  readyFile: { env: "READY_FILE", help: "file written ({service, pid, metrics}) once the service is ready, removed at exit" },
  shutdownGraceMs: { env: "SHUTDOWN_GRACE_MS", help: "how long SIGTERM waits for in-flight calls and commands before exiting (ms)" },
} as const satisfies Settings<z.input<z.ZodObject<ReturnType<typeof opsShape>>>>;

/** Settings every service reads the same way (a service may add a flag: `{ ...CLUSTERS_FILE_SETTING, flag: "clusters-file" }`). */
export const CLUSTERS_FILE_SETTING = {
  env: "CLUSTERS_FILE",
  help: "JSON clusters file: clusters, pools, topology (unset: the built-in cluster local, pool default)",
} as const satisfies Setting;

/** Log output: JSON lines (level by name) or one line a person reads (process.ts, createLogger). */
export const LOG_FORMATS = ["json", "pretty"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Logging, the same in every service: LOG_LEVEL and LOG_FORMAT (docs/operations.md, "Logs"). */
export const logShape = {
  logLevel: z.enum(["trace", "debug", "info", "warn", "error", "fatal", "silent"]).default("info"),
  logFormat: z.enum(LOG_FORMATS).default("json"),
};
export const LOG_SETTINGS = {
  logLevel: { env: "LOG_LEVEL", help: "pino level: trace, debug, info, warn, error, fatal, silent" },
  logFormat: { env: "LOG_FORMAT", help: "json: one JSON object per line (level by name); pretty: one line a person reads" },
} as const satisfies Settings<z.input<z.ZodObject<typeof logShape>>>;

/** Default metrics/health ports: controller, node-agent, journal (9808 is the livenessprobe sidecar's). */
export const METRICS_PORTS = { controller: 9810, "node-agent": 9811, journal: 9812 } as const;
