/**
 * A Docker engine of the run's own: forky's dockerd (install.ts) with a daemon.json of ours — its
 * socket, exec root and pid file under STATE (/run/csi-e2e), its data root under the cache (images
 * and BuildKit's cache outlive the run, so a warm run builds from cache), and the runtime wrapper
 * scripts/e2e/runc-bounded-caps as the default runtime (privileged containers on a machine whose
 * capability bounding set lacks CAP_SYS_RESOURCE). Nothing of the machine's own Docker, if it has
 * one, is used or touched.
 *
 * What dockerd changes on the host is put back when it stops: the nftables ruleset (iptables' chains
 * and NAT: `nft list ruleset` before, restored after), the network links it made (bridges, veths),
 * net.ipv4.ip_forward, and every mount under its roots; `hostChanges` then says what still differs.
 */
import { spawn } from "node:child_process";
import { existsSync, openSync } from "node:fs";
import { mkdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { ROOT, releaseUnder } from "@csi/testkit";
import { until } from "../ha-servers.js";
import { CACHE, type RunOptions, type RunResult, say, sh } from "./sh.js";

export const STATE = "/run/csi-e2e";
const DATA_ROOT = path.join(CACHE, "docker-data");
const SOCKET = path.join(STATE, "docker.sock");
const WRAPPER = path.join(ROOT, "scripts/e2e/runc-bounded-caps");

export interface HostState {
  ruleset: string;
  links: string[];
  forward: string;
}

export async function hostState(): Promise<HostState> {
  const links = (await sh("ip", ["-o", "link", "show"])).stdout
    .split("\n")
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
    .filter((x): x is string => Boolean(x));
  return {
    ruleset: (await sh("nft", ["list", "ruleset"])).stdout,
    links: links.sort(),
    forward: (await readFile("/proc/sys/net/ipv4/ip_forward", "utf8")).trim(),
  };
}

/** What differs between two host states, one line each (empty: nothing). */
export function hostChanges(before: HostState, after: HostState): string[] {
  const out: string[] = [];
  if (before.ruleset !== after.ruleset) out.push("the nftables ruleset differs");
  const added = after.links.filter((l) => !before.links.includes(l));
  if (added.length > 0) out.push(`network links left: ${added.join(", ")}`);
  if (before.forward !== after.forward) out.push(`net.ipv4.ip_forward is ${after.forward}, was ${before.forward}`);
  return out;
}

/** Puts back the ruleset, links and ip_forward of `before`. */
export async function restoreHost(before: HostState): Promise<void> {
  const now = await hostState();
  if (now.ruleset !== before.ruleset) {
    await sh("nft", ["flush", "ruleset"]);
    if (before.ruleset.trim()) await sh("nft", ["-f", "-"], { input: before.ruleset });
  }
  for (const l of now.links.filter((x) => !before.links.includes(x))) await sh("ip", ["link", "delete", l], { allowFail: true });
  if (now.forward !== before.forward) await writeFile("/proc/sys/net/ipv4/ip_forward", before.forward);
}

export interface Engine {
  /** The client's environment: DOCKER_HOST, DOCKER_CONFIG (Compose v2 and buildx as CLI plugins), forky's docker first on the PATH. */
  env: NodeJS.ProcessEnv;
  docker(args: readonly string[], o?: RunOptions): Promise<RunResult>;
  dataRoot: string;
  stop(): Promise<void>;
}

async function writeConfig(forky: string): Promise<{ daemonJson: string; clientConfig: string }> {
  await mkdir(STATE, { recursive: true });
  const daemonJson = path.join(STATE, "daemon.json");
  const config = {
    "data-root": DATA_ROOT,
    "exec-root": path.join(STATE, "exec"),
    pidfile: path.join(STATE, "docker.pid"),
    hosts: [`unix://${SOCKET}`],
    "storage-driver": "overlay2",
    runtimes: { "bounded-caps": { path: WRAPPER } },
    "default-runtime": "bounded-caps",
    ip6tables: false,
    features: { buildkit: true },
  };
  await writeFile(daemonJson, `${JSON.stringify(config, null, 2)}\n`);
  const clientConfig = path.join(STATE, "client");
  await mkdir(path.join(clientConfig, "cli-plugins"), { recursive: true });
  for (const p of ["docker-compose", "docker-buildx"])
    await symlink(path.join(forky, "usr/libexec/docker/cli-plugins", p), path.join(clientConfig, "cli-plugins", p));
  return { daemonJson, clientConfig };
}

/** Waits for `event`, at most `ms` (the timer keeps the process alive meanwhile: dockerd's child handle is unref'd). */
async function atMost(event: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([event, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

export async function startEngine(forky: string): Promise<Engine> {
  if (existsSync(SOCKET)) throw new Error(`${SOCKET} exists: another e2e run's engine is up (or one was left; stop it: kill $(cat ${STATE}/docker.pid))`);
  const { daemonJson, clientConfig } = await writeConfig(forky);
  const PATH = [path.join(forky, "usr/sbin"), path.join(forky, "usr/bin"), process.env.PATH].join(":");
  const log = path.join(STATE, "dockerd.log");
  const daemon = spawn(path.join(forky, "usr/sbin/dockerd"), ["--config-file", daemonJson], {
    env: { ...process.env, PATH },
    stdio: ["ignore", openSync(log, "a"), openSync(log, "a")],
    detached: true,
  });
  daemon.unref();
  const pid = daemon.pid ?? 0;
  let exited = false;
  const exit = new Promise<void>((r) =>
    daemon.once("exit", () => {
      exited = true;
      r();
    }),
  );
  const env = { ...process.env, PATH, DOCKER_HOST: `unix://${SOCKET}`, DOCKER_CONFIG: clientConfig, DOCKER_BUILDKIT: "1" };
  const docker = (args: readonly string[], o: RunOptions = {}) => sh("docker", args, { env, ...o });
  try {
    await until(
      "dockerd answering on its socket",
      async () => {
        if (exited) throw new Error(`dockerd exited:\n${(await readFile(log, "utf8")).split("\n").slice(-10).join("\n")}`);
        return (await docker(["version", "--format", "{{.Server.Version}}"], { allowFail: true, timeoutMs: 10_000 })).code === 0;
      },
      60_000,
    );
  } catch (err) {
    if (!exited) daemon.kill("SIGKILL");
    throw err;
  }
  say(`Docker ${(await docker(["version", "--format", "{{.Server.Version}}"])).stdout.trim()} up (pid ${pid}, data root ${DATA_ROOT})`);
  const stop = async () => {
    if (!exited) daemon.kill("SIGTERM");
    await atMost(exit, 60_000);
    if (!exited) daemon.kill("SIGKILL");
    await atMost(exit, 10_000);
    for (const dir of [STATE, DATA_ROOT]) await releaseUnder(dir);
    await rm(STATE, { recursive: true, force: true });
  };
  return { env, docker, dataRoot: DATA_ROOT, stop };
}
