/**
 * Where `csictl auth init` puts what it generates (docs/security.md), so that `npm start` (SECURE=1)
 * and csictl find each role's credentials without anyone printing them:
 *
 *   <dir>/auth.conf                 nats-server accounts block (bcrypt hashes or nkey public keys)
 *   <dir>/layout.json               the clusters and nodes it was made for (`csictl fleet init` reads it)
 *   <dir>/users.acl                 Redis ACL file (SHA-256 of the password)
 *   <dir>/nats/<user>.password      a NATS user's password      (or <user>.nk: its nkey seed, --nkeys)
 *   <dir>/redis/journal.password    the journal's Redis password
 *   <dir>/redis/admin.password      the Redis admin's password (loads the journal's function library)
 *
 * Secret files are 0600 in a 0700 directory.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { type NatsRole, natsUser } from "@csi/contracts";
import { NATS_ACCESS_SETTINGS, REDIS_ACCESS_SETTINGS } from "@csi/runtime";

export const NATS_AUTH_CONF = "auth.conf";
export const REDIS_ACL_FILE = "users.acl";
export const LAYOUT_FILE = "layout.json";

/** The clusters and nodes an auth directory was made for. */
export function authLayout(dir: string): { clusters: string[]; nodes: string[] } {
  const raw = JSON.parse(readFileSync(path.join(dir, LAYOUT_FILE), "utf8")) as { clusters?: unknown; nodes?: unknown };
  const strings = (v: unknown) => (Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : []);
  return { clusters: strings(raw.clusters), nodes: strings(raw.nodes) };
}
/** The Redis ACL user of the journals (csictl's rebuild runs the journal's projector with it too). */
export const REDIS_JOURNAL_USER = "journal";
/** The Redis admin user: every command; it loads the journal's function library (`csictl redis load-functions`) and is the operator's. */
export const REDIS_ADMIN_USER = "admin";

export const natsPasswordFile = (dir: string, user: string) => path.join(dir, "nats", `${user}.password`);
export const natsSeedFile = (dir: string, user: string) => path.join(dir, "nats", `${user}.nk`);
export const redisPasswordFile = (dir: string, user = REDIS_JOURNAL_USER) => path.join(dir, "redis", `${user}.password`);

/** A role's NATS access from an auth directory: NATS_USER + NATS_PASSWORD, or NATS_CREDS (its nkey seed file). */
export function natsAccessFrom(dir: string, role: NatsRole): { natsUser?: string; natsPassword?: string; natsCreds?: string } {
  const user = natsUser(role);
  const seed = natsSeedFile(dir, user);
  if (existsSync(seed)) return { natsCreds: seed };
  return { natsUser: user, natsPassword: readFileSync(natsPasswordFile(dir, user), "utf8").trim() };
}

/** A Redis user's access from an auth directory (the journal's unless `user` says otherwise). */
export function redisAccessFrom(dir: string, user = REDIS_JOURNAL_USER): { redisUsername: string; redisPassword: string } {
  return { redisUsername: user, redisPassword: readFileSync(redisPasswordFile(dir, user), "utf8").trim() };
}

/** A service's environment for its role (a journal's has its Redis access too), named by the services' settings tables. */
export function accessEnv(dir: string, role: NatsRole): Record<string, string> {
  const names: Record<string, { env: string }> = { ...NATS_ACCESS_SETTINGS, ...REDIS_ACCESS_SETTINGS };
  const fields: Record<string, string | undefined> = {
    ...natsAccessFrom(dir, role),
    natsAccounts: "1",
    ...(role.kind === "journal" ? redisAccessFrom(dir) : {}),
  };
  return Object.fromEntries(Object.entries(fields).flatMap(([k, v]) => (v === undefined || !names[k] ? [] : [[names[k].env, v]])));
}
