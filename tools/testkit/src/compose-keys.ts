/**
 * docker-compose.yml is read alike by Compose v2 (`docker compose`) and by Debian's Compose
 * v1.29 (`docker-compose`), which refuses any key it does not know (docs/deploy.md, "docker
 * compose"). Compose v2 reads every key v1.29 reads, so a file made only of v1.29's keys is read by
 * both. The keys below are those of v1.29's own schema (compose/config/compose_spec.json of
 * Debian's docker-compose 1.29.2), for the parts our file uses; test/deploy.test.ts also runs
 * `docker-compose config` and `docker compose config` where they are installed. Pure.
 */
import type { Compose } from "./deploy-shapes.js";

const TOP = ["version", "services", "volumes", "networks", "configs", "secrets"];
const SERVICE = [
  "blkio_config",
  "build",
  "cap_add",
  "cap_drop",
  "cgroup_parent",
  "command",
  "configs",
  "container_name",
  "cpu_count",
  "cpu_percent",
  "cpu_period",
  "cpu_quota",
  "cpu_rt_period",
  "cpu_rt_runtime",
  "cpu_shares",
  "cpus",
  "cpuset",
  "credential_spec",
  "depends_on",
  "deploy",
  "device_cgroup_rules",
  "devices",
  "dns",
  "dns_opt",
  "dns_search",
  "domainname",
  "entrypoint",
  "env_file",
  "environment",
  "expose",
  "extends",
  "external_links",
  "extra_hosts",
  "group_add",
  "healthcheck",
  "hostname",
  "image",
  "init",
  "ipc",
  "isolation",
  "labels",
  "links",
  "logging",
  "mac_address",
  "mem_limit",
  "mem_reservation",
  "mem_swappiness",
  "memswap_limit",
  "network_mode",
  "networks",
  "oom_kill_disable",
  "oom_score_adj",
  "pid",
  "pids_limit",
  "platform",
  "ports",
  "privileged",
  "profiles",
  "pull_policy",
  "read_only",
  "restart",
  "runtime",
  "scale",
  "secrets",
  "security_opt",
  "shm_size",
  "stdin_open",
  "stop_grace_period",
  "stop_signal",
  "storage_opt",
  "sysctls",
  "tmpfs",
  "tty",
  "ulimits",
  "user",
  "userns_mode",
  "volumes",
  "volumes_from",
  "working_dir",
];
const HEALTHCHECK = ["disable", "interval", "retries", "start_period", "test", "timeout"];
const DEPLOY = ["endpoint_mode", "labels", "mode", "placement", "replicas", "resources", "restart_policy", "rollback_config", "update_config"];
const BUILD = ["context", "dockerfile", "args", "labels", "cache_from", "network", "target", "shm_size", "extra_hosts", "isolation"];
/** A service's volume in the long form, and its type-specific options. */
const VOLUME = ["type", "source", "target", "read_only", "consistency", "bind", "volume", "tmpfs"];
const VOLUME_OPTIONS: Record<string, string[]> = { bind: ["propagation"], volume: ["nocopy"], tmpfs: ["size"] };
const TOP_VOLUME = ["name", "driver", "driver_opts", "external", "labels"];

/** Keys of `obj` that are not in `known` (extension fields `x-…` are always allowed). */
const unknownKeys = (obj: unknown, known: readonly string[]) =>
  obj && typeof obj === "object" && !Array.isArray(obj) ? Object.keys(obj).filter((k) => !k.startsWith("x-") && !known.includes(k)) : [];

/** Every key of the file that Compose v1.29 would refuse (so that both Compose versions read it). */
export function checkComposeKeys(compose: Compose): string[] {
  const problems: string[] = [];
  const refuse = (where: string, obj: unknown, known: readonly string[]) => {
    for (const k of unknownKeys(obj, known)) problems.push(`docker-compose.yml ${where}: ${k} is not read by Compose v1.29 (docker-compose)`);
  };
  refuse("(top level)", compose, TOP);
  for (const [name, v] of Object.entries((compose as { volumes?: Record<string, unknown> }).volumes ?? {})) refuse(`volume ${name}`, v, TOP_VOLUME);
  for (const [name, svc] of Object.entries(compose.services) as [string, Record<string, unknown>][]) {
    const at = `service ${name}`;
    refuse(at, svc, SERVICE);
    refuse(`${at} healthcheck`, svc.healthcheck, HEALTHCHECK);
    refuse(`${at} deploy`, svc.deploy, DEPLOY);
    refuse(`${at} build`, svc.build, BUILD);
    for (const vol of (svc.volumes as unknown[] | undefined) ?? []) {
      refuse(`${at} volume`, vol, VOLUME);
      for (const [opt, known] of Object.entries(VOLUME_OPTIONS)) refuse(`${at} volume ${opt}`, (vol as Record<string, unknown> | null)?.[opt], known);
    }
  }
  return problems;
}
