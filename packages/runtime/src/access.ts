/**
 * How every process reaches NATS and Redis: the access settings (NATS_URL, NATS_USER,
 * NATS_PASSWORD, NATS_CREDS, NATS_TLS_*; REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA,
 * REDIS_SENTINELS, REDIS_MASTER_NAME, REDIS_SENTINEL_PASSWORD)
 * turned into @nats-io/transport-node connect options and ioredis options — one place for the
 * services and csictl (docs/security.md). Secrets never reach a log line: `redactUrl` strips the
 * user:password part of a URL before anything prints it.
 */
import { readFileSync } from "node:fs";
import { type ConnectionOptions, credsAuthenticator, nkeyAuthenticator } from "@nats-io/nats-core";
import type { RedisOptions } from "ioredis";

export interface NatsAccess {
  natsUrl: string;
  natsUser?: string | undefined;
  natsPassword?: string | undefined;
  /** A .creds file (user JWT + nkey seed, decentralized auth) or an nkey seed file (`csictl auth init --nkeys`). */
  natsCreds?: string | undefined;
  natsTlsCa?: string | undefined;
  natsTlsCert?: string | undefined;
  natsTlsKey?: string | undefined;
}

export interface RedisAccess {
  redisUrl: string;
  redisUsername?: string | undefined;
  redisPassword?: string | undefined;
  redisTlsCa?: string | undefined;
  /** Sentinel: "host:port,host:port" of the sentinels; the master is found through them by name. */
  redisSentinels?: string | undefined;
  redisMasterName?: string | undefined;
  redisSentinelPassword?: string | undefined;
}

/** A misconfigured access setting: names the variable, never quotes a secret. */
export class AccessError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "AccessError";
  }
}

/** Every `scheme://user:password@` in a string (one URL or a comma-separated list) becomes `scheme://***@`. */
export function redactUrl(url: string): string {
  return url.replace(/([a-z][a-z0-9+.-]*:\/\/)[^@/\s,]*@/gi, "$1***@");
}

function readSecretFile(file: string, setting: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new AccessError(`${setting}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
}

const CREDS_JWT = /-----BEGIN NATS USER JWT-----/;
const NKEY_USER_SEED = /^SU[A-Z2-7]{50,}$/;

/**
 * Connect options for @nats-io/transport-node's `connect`: the servers, then user/password or a
 * creds/nkey-seed file (not both), TLS files (any of them turns TLS on), and `more` (name, inbox
 * prefix, reconnect policy).
 */
export function natsConnectOptions(a: NatsAccess, more: ConnectionOptions = {}): ConnectionOptions {
  const opts: ConnectionOptions = { servers: a.natsUrl.split(",").map((s) => s.trim()), ...more };
  if (a.natsCreds && (a.natsUser || a.natsPassword)) throw new AccessError("set NATS_CREDS or NATS_USER/NATS_PASSWORD, not both");
  if (a.natsPassword && !a.natsUser) throw new AccessError("NATS_PASSWORD is set without NATS_USER");
  if (a.natsCreds) {
    const text = readSecretFile(a.natsCreds, "NATS_CREDS");
    if (CREDS_JWT.test(text)) opts.authenticator = credsAuthenticator(new TextEncoder().encode(text));
    else if (NKEY_USER_SEED.test(text.trim())) opts.authenticator = nkeyAuthenticator(new TextEncoder().encode(text.trim()));
    else throw new AccessError(`NATS_CREDS: ${a.natsCreds} is neither a .creds file nor an nkey user seed`);
  } else if (a.natsUser) {
    opts.user = a.natsUser;
    if (a.natsPassword) opts.pass = a.natsPassword;
  }
  if (Boolean(a.natsTlsCert) !== Boolean(a.natsTlsKey)) throw new AccessError("NATS_TLS_CERT and NATS_TLS_KEY go together");
  if (a.natsTlsCa || a.natsTlsCert) {
    opts.tls = {
      ...(a.natsTlsCa ? { caFile: a.natsTlsCa } : {}),
      ...(a.natsTlsCert && a.natsTlsKey ? { certFile: a.natsTlsCert, keyFile: a.natsTlsKey } : {}),
    };
  }
  return opts;
}

/** How long ioredis waits for one sentinel's answer before asking the next. */
const SENTINEL_COMMAND_TIMEOUT_MS = 1000;

/** The master name ioredis asks the sentinels for when REDIS_MASTER_NAME is not set. */
export const DEFAULT_REDIS_MASTER_NAME = "csi";

/** "host:port,host:port" → ioredis sentinel addresses; a malformed entry is an AccessError naming REDIS_SENTINELS. */
export function parseSentinels(list: string): { host: string; port: number }[] {
  const out = list
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const m = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):([0-9]{1,5})$/.exec(entry);
      const port = Number(m?.[2]);
      if (!m?.[1] || port < 1 || port > 65535) throw new AccessError(`REDIS_SENTINELS: ${JSON.stringify(entry.slice(0, 80))} is not host:port`);
      return { host: m[1].replace(/^\[|\]$/g, ""), port };
    });
  if (out.length === 0) throw new AccessError("REDIS_SENTINELS is set but names no sentinel");
  return out;
}

/**
 * After a failover the old primary comes back as a replica: a write that reaches it is refused
 * with READONLY. Reconnect (through Sentinel, to the new master) and resend the command.
 */
export const reconnectOnReadonly = (err: Error): 2 | false => (err.message.startsWith("READONLY") ? 2 : false);

/**
 * ioredis options to go with `new Redis(a.redisUrl, …)`: the ACL user and password, and TLS for a
 * rediss:// URL or a CA file (which turns TLS on). Credentials inside the URL win, as ioredis does.
 * With REDIS_SENTINELS: ioredis's own Sentinel support (it asks the sentinels for the master
 * `redisMasterName`, connects to it, checks its role, and on a failover asks again), the sentinels'
 * password, and a reconnect on READONLY (a demoted master). The URL's host and port are then not
 * used.
 */
export function redisConnectOptions(a: RedisAccess): RedisOptions {
  if (a.redisPassword === undefined && a.redisUsername) throw new AccessError("REDIS_USERNAME is set without REDIS_PASSWORD");
  if (a.redisSentinelPassword !== undefined && !a.redisSentinels) throw new AccessError("REDIS_SENTINEL_PASSWORD is set without REDIS_SENTINELS");
  const tls = a.redisUrl.startsWith("rediss://") || a.redisTlsCa !== undefined;
  const tlsOptions = tls ? { tls: a.redisTlsCa ? { ca: readSecretFile(a.redisTlsCa, "REDIS_TLS_CA") } : {} } : {};
  return {
    ...(a.redisUsername ? { username: a.redisUsername } : {}),
    ...(a.redisPassword !== undefined ? { password: a.redisPassword } : {}),
    ...tlsOptions,
    ...(a.redisSentinels
      ? {
          sentinels: parseSentinels(a.redisSentinels),
          name: a.redisMasterName || DEFAULT_REDIS_MASTER_NAME,
          role: "master" as const,
          // A sentinel that does not answer (frozen, cut off) is passed over after this, not waited on.
          sentinelCommandTimeout: SENTINEL_COMMAND_TIMEOUT_MS,
          ...(a.redisSentinelPassword !== undefined ? { sentinelPassword: a.redisSentinelPassword } : {}),
          ...(tls ? { enableTLSForSentinelMode: true, sentinelTLS: tlsOptions.tls } : {}),
          // Told of a failover by the sentinels (+switch-master), reconnect at once instead of at the next error.
          failoverDetector: true,
          reconnectOnError: reconnectOnReadonly,
        }
      : {}),
  };
}

/** Where a Redis client connects, for log lines and errors: the redacted URL, or the sentinels and master name. */
export function describeRedis(a: RedisAccess): string {
  return a.redisSentinels ? `sentinels ${a.redisSentinels} (master ${a.redisMasterName || DEFAULT_REDIS_MASTER_NAME})` : redactUrl(a.redisUrl);
}

/**
 * The reply inbox prefix a connection was made with (`inboxPrefix` in its options; nats.js keeps
 * the options on the connection). Code that makes its own inboxes uses it, so its replies arrive
 * where the role's permissions allow it to subscribe.
 */
export function inboxPrefixOf(nc: object): string | undefined {
  return (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
}
