/**
 * `auth init`: every role's credentials and the server side of them, in one directory
 * (domain/auth-files.ts): the nats-server accounts block (an account per trust domain, a user per
 * role, exports and imports and permissions from @csi/contracts' natsAccountSpecs; bcrypt hashes of
 * random passwords, or nkeys with --nkeys), the list of clusters and nodes it was made for, the
 * Redis ACL file (the journal's user, the admin that loads its function library; the default user
 * off) and the secrets, each 0600. Nothing secret is printed. docs/security.md says how to use them.
 */
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { type NatsRole, type NatsUserEntry, natsAccountSpecs, natsAccountsConfig, natsPermissions, natsRoles, natsUser } from "@csi/contracts";
import { redisAclFile } from "@csi/journal/redis";
import { createUser } from "@nats-io/nkeys";
import bcrypt from "bcryptjs";
import {
  LAYOUT_FILE,
  NATS_AUTH_CONF,
  natsPasswordFile,
  natsSeedFile,
  REDIS_ACL_FILE,
  REDIS_ADMIN_USER,
  REDIS_JOURNAL_USER,
  redisPasswordFile,
} from "../domain/auth-files.js";
import { EXIT, usageError } from "../errors.js";
import { commaList } from "../options.js";
import { table } from "../output.js";
import type { Session } from "../session.js";

/** bcrypt cost of the NATS password hashes: the passwords are 192 random bits, the hash only keeps auth.conf from holding them. */
const BCRYPT_COST = 10;

export interface AuthInitOptions {
  out: string;
  nodes: string;
  clusters?: string;
  nkeys?: boolean;
  force?: boolean;
}

const secret = () => randomBytes(24).toString("base64url");

function writeSecret(file: string, content: string): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, content, { mode: 0o600 });
  chmodSync(file, 0o600); // an existing file keeps its mode otherwise
}

const roleName = (r: NatsRole) =>
  r.kind === "journal"
    ? `journal of ${r.cluster}`
    : r.kind === "node"
      ? `node-agent of ${r.nodeId}`
      : r.kind === "admin"
        ? "csictl"
        : r.kind === "fleet"
          ? "csictl fleet init"
          : r.kind;

export interface AuthDir {
  dir: string;
  natsConfig: string;
  redisAcl: string;
  clusters: string[];
  nodes: string[];
  users: { user: string; role: string; credential: string }[];
}

/**
 * Write every credential of a deployment into `dir` (domain/auth-files.ts): npm start's SECURE=1
 * calls this directly. Refuses to replace existing credentials unless `force`.
 */
export async function writeAuthDir(dir: string, o: { clusters: string[]; nodes: string[]; nkeys?: boolean; force?: boolean }): Promise<AuthDir> {
  if (existsSync(path.join(dir, NATS_AUTH_CONF)) && !o.force)
    // As `log export` over a file: refused before anything is written, a usage error (2; docs/csictl.md).
    throw usageError(`${path.join(dir, NATS_AUTH_CONF)} exists: pass --force to replace every credential in ${dir}`);
  let roles: NatsRole[];
  let specs: ReturnType<typeof natsAccountSpecs>;
  try {
    specs = natsAccountSpecs(o.clusters, o.nodes);
    roles = natsRoles(o.clusters, o.nodes);
  } catch (err) {
    throw usageError((err as Error).message);
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const rows: AuthDir["users"] = [];
  const users: NatsUserEntry[] = [];
  for (const role of roles) {
    const user = natsUser(role);
    const permissions = natsPermissions(role, o.clusters);
    if (o.nkeys) {
      const kp = createUser();
      const file = natsSeedFile(dir, user);
      writeSecret(file, `${new TextDecoder().decode(kp.getSeed())}\n`);
      users.push({ user, role, nkey: kp.getPublicKey(), permissions });
      rows.push({ user, role: roleName(role), credential: file });
    } else {
      const password = secret();
      const file = natsPasswordFile(dir, user);
      writeSecret(file, `${password}\n`);
      users.push({ user, role, password: await bcrypt.hash(password, BCRYPT_COST), permissions });
      rows.push({ user, role: roleName(role), credential: file });
    }
  }
  writeSecret(path.join(dir, NATS_AUTH_CONF), natsAccountsConfig(specs, users));
  writeSecret(path.join(dir, LAYOUT_FILE), `${JSON.stringify({ clusters: o.clusters, nodes: o.nodes }, null, 2)}\n`);

  const redisSha = (user: string) => {
    const password = secret();
    writeSecret(redisPasswordFile(dir, user), `${password}\n`);
    return createHash("sha256").update(password).digest("hex");
  };
  const journalSha = redisSha(REDIS_JOURNAL_USER);
  const admin = { user: REDIS_ADMIN_USER, passwordSha256: redisSha(REDIS_ADMIN_USER) };
  writeSecret(path.join(dir, REDIS_ACL_FILE), redisAclFile(REDIS_JOURNAL_USER, journalSha, o.clusters, admin));
  rows.push({ user: REDIS_JOURNAL_USER, role: "journals (Redis)", credential: redisPasswordFile(dir) });
  rows.push({ user: REDIS_ADMIN_USER, role: "Redis admin (loads the journal's functions)", credential: redisPasswordFile(dir, REDIS_ADMIN_USER) });
  return { dir, natsConfig: path.join(dir, NATS_AUTH_CONF), redisAcl: path.join(dir, REDIS_ACL_FILE), clusters: o.clusters, nodes: o.nodes, users: rows };
}

export async function authInit(s: Session, o: AuthInitOptions): Promise<number> {
  const nodes = commaList(o.nodes);
  if (nodes.length === 0) throw usageError("--nodes needs at least one node id (comma-separated)");
  const clusters = o.clusters ? commaList(o.clusters) : s.clusters().clusters.map((c) => c.clusterID);
  const result = await writeAuthDir(path.resolve(o.out), { clusters, nodes, nkeys: !!o.nkeys, force: !!o.force });
  s.out.result(result, (h) =>
    table(
      ["USER", "ROLE", "SECRET FILE"],
      result.users.map((r) => [r.user, r.role, r.credential]),
      h,
    ),
  );
  s.out.note(
    `nats-server: -c ${result.natsConfig} (or include it), then csictl fleet init; redis-server: --aclfile ${result.redisAcl}, then \`csictl redis load-functions\` as admin; services: NATS_ACCOUNTS=1 (docs/security.md)`,
  );
  return EXIT.ok;
}
