/**
 * A service's settings: one table per service names, for each field of its config schema, the
 * environment variable and/or command-line flag it is read from. The table is the one source of
 * truth for what a service accepts — `loadConfig` reads through it, and the deploy tests check the
 * manifests' env names and args against it.
 */
import { parseArgs } from "node:util";
import type { z } from "zod";

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
      const shown = given === undefined || setting?.secret ? "" : ` (got ${JSON.stringify(String(given).slice(0, 80))})`;
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
