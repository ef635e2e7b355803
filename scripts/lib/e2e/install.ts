/**
 * What the end-to-end run needs on the host, from Debian's archive only:
 *  - from the machine's own suite (apt-get install, what is missing): containerd, runc, iptables,
 *    nftables (the host's rules are saved and restored with nft), debootstrap, python3 (the runtime
 *    wrapper), util-linux;
 *  - from Debian forky, unpacked beside the system's with dpkg-deb -x, nothing installed or
 *    upgraded: docker.io 28.5 (dockerd; Swarm cluster volumes need Docker >= 28.2, trixie's 26.1
 *    cannot), docker-cli, docker-buildx (BuildKit builds), docker-compose (Compose v2) and
 *    tini-static (docker-init, for `init: true`). apt-get itself fetches and verifies them, through a
 *    private sources list and state directory (the machine's apt configuration is not touched).
 * The forky tree is cached under CACHE/docker-forky and reused without the network.
 */
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { CACHE, have, say, sh } from "./sh.js";

/** Host commands and the bookworm package that brings each. */
const HOST_NEEDS: readonly [string, string][] = [
  ["containerd", "containerd"],
  ["containerd-shim-runc-v2", "containerd"],
  ["runc", "runc"],
  ["iptables", "iptables"],
  ["nft", "nftables"],
  ["debootstrap", "debootstrap"],
  ["python3", "python3"],
  ["losetup", "util-linux"],
  ["dpkg-deb", "dpkg"],
];

const FORKY_PACKAGES = ["docker.io", "docker-cli", "docker-buildx", "docker-compose", "tini-static"];
export const FORKY_SUITE = process.env.CSI_E2E_DOCKER_SUITE || "forky";
const MIRROR = process.env.CSI_E2E_MIRROR || "http://deb.debian.org/debian";

export async function installHostPackages(): Promise<void> {
  const missing = new Set<string>();
  for (const [cmd, pkg] of HOST_NEEDS) if (!(await have(cmd))) missing.add(pkg);
  if (missing.size === 0) return;
  say(`installing from Debian: ${[...missing].join(" ")}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  await sh("apt-get", ["update", "-q"], { env, timeoutMs: 300_000 });
  await sh("apt-get", ["install", "-y", "-q", "--no-install-recommends", ...missing], { env, timeoutMs: 600_000 });
}

/** The unpacked forky tree (usr/sbin/dockerd, usr/bin/docker, usr/libexec/docker/cli-plugins/...), fetched once. */
export async function forkyDocker(): Promise<string> {
  const dest = path.join(CACHE, `docker-${FORKY_SUITE}`);
  if (existsSync(path.join(dest, "usr/sbin/dockerd"))) return dest;
  await mkdir(CACHE, { recursive: true });
  const tmp = await mkdtemp(path.join(CACHE, ".docker-"));
  try {
    const apt = await privateApt(tmp);
    say(`fetching ${FORKY_PACKAGES.join(" ")} from Debian ${FORKY_SUITE}`);
    await sh("apt-get", [...apt, "update", "-q"], { timeoutMs: 300_000 });
    const debs = path.join(tmp, "debs");
    await mkdir(debs);
    await sh("apt-get", [...apt, "download", ...FORKY_PACKAGES], { cwd: debs, timeoutMs: 600_000 });
    const root = path.join(tmp, "root");
    for (const deb of await readdir(debs)) await sh("dpkg-deb", ["-x", path.join(debs, deb), root]);
    await writeFile(path.join(root, "debs"), `${(await readdir(debs)).join("\n")}\n`);
    await rename(root, dest);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return dest;
}

/** apt-get options for a sources list, state and cache of its own under `dir` (signatures checked as usual). */
async function privateApt(dir: string): Promise<string[]> {
  for (const d of ["lists/partial", "cache/archives/partial"]) await mkdir(path.join(dir, d), { recursive: true });
  await writeFile(path.join(dir, "sources.list"), `deb ${MIRROR} ${FORKY_SUITE} main\n`);
  const opts: Record<string, string> = {
    "Dir::Etc::SourceList": path.join(dir, "sources.list"),
    "Dir::Etc::SourceParts": "/dev/null",
    "Dir::State::Lists": path.join(dir, "lists"),
    "Dir::Cache": path.join(dir, "cache"),
    "APT::Sandbox::User": "root",
  };
  return Object.entries(opts).flatMap(([k, v]) => ["-o", `${k}=${v}`]);
}
