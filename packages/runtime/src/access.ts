/**
 * How every process reaches NATS and Redis: the access settings (NATS_URL, NATS_USER,
 * NATS_PASSWORD, NATS_CREDS, NATS_TLS_*; REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA)
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

/**
 * ioredis options to go with `new Redis(a.redisUrl, …)`: the ACL user and password, and TLS for a
 * rediss:// URL or a CA file (which turns TLS on). Credentials inside the URL win, as ioredis does.
 */
export function redisConnectOptions(a: RedisAccess): RedisOptions {
  if (a.redisPassword === undefined && a.redisUsername) throw new AccessError("REDIS_USERNAME is set without REDIS_PASSWORD");
  const tls = a.redisUrl.startsWith("rediss://") || a.redisTlsCa !== undefined;
  return {
    ...(a.redisUsername ? { username: a.redisUsername } : {}),
    ...(a.redisPassword !== undefined ? { password: a.redisPassword } : {}),
    ...(tls ? { tls: a.redisTlsCa ? { ca: readSecretFile(a.redisTlsCa, "REDIS_TLS_CA") } : {} } : {}),
  };
}

/**
 * The reply inbox prefix a connection was made with (`inboxPrefix` in its options; nats.js keeps
 * the options on the connection). Code that makes its own inboxes uses it, so its replies arrive
 * where the role's permissions allow it to subscribe.
 */
export function inboxPrefixOf(nc: object): string | undefined {
  return (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
}
