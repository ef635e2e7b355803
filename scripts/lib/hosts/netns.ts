/**
 * Hosts made of network namespaces on this machine (the chaos run's `--hosts`, docs/chaos.md
 * "Hosts, not processes"). Three hosts a, b, c, each a namespace `csih-<pid>-<host>` with a veth
 * whose other end is on a bridge `csih-<pid>` in the root namespace, which has an address on the
 * same /24: the hosts reach each other and the root namespace (where the chaos driver, the CO
 * client and the checks run) through the bridge; each host's loopback is its own.
 *
 * A command runs on a host under `nsenter --net=/run/netns/<ns> --`: only the network is the
 * host's. Not `ip netns exec`, which also makes a mount namespace of its own (a slave of the
 * machine's) — a node-agent's mounts would then be invisible to the checks, and gone with it.
 *
 * Every name starts with `csih-<pid>`: `sweepHosts` removes what a run whose process is gone left
 * behind (and nothing of a run still alive); `makeHosts` removes its own on exit too.
 */
import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { processAlive } from "@csi/runtime";

export const HOST_PREFIX = "csih-";
export const HOST_NAMES = ["a", "b", "c"] as const;
export type HostName = (typeof HOST_NAMES)[number];

export interface Host {
  name: HostName;
  /** Its network namespace, `csih-<pid>-<name>`. */
  ns: string;
  /** Its address on the hosts' network (its eth0). */
  addr: string;
  /** The command prefix that runs a program on it, the program's pid unchanged (nsenter execs it). */
  wrap: readonly string[];
}

export interface HostNet {
  hosts: Host[];
  /** The root namespace's address on the bridge. */
  rootAddr: string;
  /** Removes the namespaces (SIGKILLing what still runs in them), the veths and the bridge. Idempotent, synchronous. */
  remove(): void;
}

const run = promisify(execFile);
const quiet = (cmd: string, args: string[]) => {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch {
    return "";
  }
};
const must = (cmd: string, args: string[]) => {
  try {
    execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")}: ${(e.stderr || e.message).trim().slice(0, 300)}`);
  }
};
const has = (cmd: string) => quiet("sh", ["-c", `command -v ${cmd} || test -x /usr/sbin/${cmd} && echo /usr/sbin/${cmd}`]).trim() !== "";

/** Why hosts cannot be made here (not root, a tool missing), or undefined. */
export function whyNoHosts(): string | undefined {
  if (process.getuid?.() !== 0) return "network namespaces need root";
  for (const [cmd, pkg] of [
    ["ip", "iproute2"],
    ["nsenter", "util-linux"],
    ["nft", "nftables"],
    ["curl", "curl"],
  ] as const)
    if (!has(cmd)) return `no ${cmd} (Debian package ${pkg}; .ci/run installs it)`;
  const probe = `${HOST_PREFIX}${process.pid}-probe`;
  try {
    must("ip", ["netns", "add", probe]);
  } catch (err) {
    return `cannot make a network namespace: ${(err as Error).message}`;
  } finally {
    quiet("ip", ["netns", "del", probe]);
  }
  return undefined;
}

const ownerOf = (name: string) => Number(new RegExp(`^${HOST_PREFIX}(\\d+)`).exec(name)?.[1] ?? Number.NaN);

/** Every namespace and link named by this code whose process is gone, removed; returns their names. */
export function sweepHosts(): string[] {
  const namespaces = quiet("ip", ["netns", "list"])
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter((n) => n.startsWith(HOST_PREFIX));
  const links = quiet("ip", ["-o", "link", "show"])
    .split("\n")
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? "")
    .filter((n) => n.startsWith(HOST_PREFIX));
  const dead = (n: string) => Number.isSafeInteger(ownerOf(n)) && !processAlive(ownerOf(n));
  const gone = [...namespaces.filter(dead), ...links.filter(dead)];
  for (const ns of namespaces.filter(dead)) removeNamespace(ns);
  for (const link of links.filter(dead)) quiet("ip", ["link", "del", link]);
  return gone;
}

/** SIGKILLs what runs in a namespace of ours (by pid, as `ip netns pids` lists them), then deletes it. */
function removeNamespace(ns: string): void {
  for (const pid of quiet("ip", ["netns", "pids", ns]).split(/\s+/).filter(Boolean)) {
    try {
      process.kill(Number(pid), "SIGKILL");
    } catch {}
  }
  quiet("ip", ["netns", "del", ns]);
}

/** A /24 in 10.231.0.0/16 that no address or route of this machine is in. */
function freeSubnet(): string {
  const used = `${quiet("ip", ["-4", "-o", "addr", "show"])}\n${quiet("ip", ["-4", "route", "show"])}`;
  for (let i = 0; i < 250; i++) {
    const net = `10.231.${((process.pid + i) % 250) + 1}`;
    if (!used.includes(`${net}.`)) return net;
  }
  throw new Error("no free /24 in 10.231.0.0/16 for the hosts' network");
}

/** Makes the three hosts and their network; removes everything it made if a step fails. */
export function makeHosts(): HostNet {
  const tag = `${HOST_PREFIX}${process.pid}`;
  const net = freeSubnet();
  const bridge = tag;
  const hosts: Host[] = HOST_NAMES.map((name, i) => ({
    name,
    ns: `${tag}-${name}`,
    addr: `${net}.${i + 1}`,
    wrap: ["nsenter", `--net=/run/netns/${tag}-${name}`, "--"],
  }));
  let removed = false;
  const remove = () => {
    if (removed) return;
    removed = true;
    process.off("exit", remove);
    for (const h of hosts) {
      removeNamespace(h.ns);
      quiet("ip", ["link", "del", h.ns]);
    }
    quiet("ip", ["link", "del", bridge]);
  };
  process.on("exit", remove);
  try {
    must("ip", ["link", "add", bridge, "type", "bridge"]);
    // Bridged packets stay out of the root namespace's iptables (br_netfilter, e.g. Docker's FORWARD DROP).
    must("ip", ["link", "set", bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0"]);
    must("ip", ["addr", "add", `${net}.254/24`, "dev", bridge]);
    must("ip", ["link", "set", bridge, "up"]);
    for (const h of hosts) {
      must("ip", ["netns", "add", h.ns]);
      must("ip", ["link", "add", h.ns, "type", "veth", "peer", "name", "eth0", "netns", h.ns]);
      must("ip", ["link", "set", h.ns, "master", bridge, "up"]);
      must("ip", ["-n", h.ns, "addr", "add", `${h.addr}/24`, "dev", "eth0"]);
      must("ip", ["-n", h.ns, "link", "set", "eth0", "up"]);
      must("ip", ["-n", h.ns, "link", "set", "lo", "up"]);
    }
  } catch (err) {
    remove();
    throw err;
  }
  return { hosts, rootAddr: `${net}.254`, remove };
}

/** Runs a command on a host and returns its output (rejects with its stderr). */
export async function onHost(host: Host, cmd: string, args: readonly string[], input?: string): Promise<string> {
  const [pre, ...rest] = host.wrap;
  const p = run(pre as string, [...rest, cmd, ...args], { encoding: "utf8", timeout: 10_000 });
  if (input !== undefined) {
    p.child.stdin?.end(input);
  }
  return (await p).stdout;
}
