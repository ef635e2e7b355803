/**
 * The cgroup files that throttle a block device: cgroup v2 `io.max` where the io controller is
 * enabled in the configured cgroup, else cgroup v1 `blkio.throttle.*`. The limits bind the I/O of
 * every task inside that cgroup (and its children) to the device — with Kubernetes, the kubepods
 * cgroup holds every pod. Which cgroup: IO_LIMITS_CGROUP (an absolute path under /sys/fs/cgroup),
 * else the first of the kubepods cgroups that exists; none → limits are unavailable, with the reason.
 */
import { access, readFile, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { DriverError, type MutableParameters } from "@csi/contracts";
import { type CgroupMode, v1Lines, v2Line } from "../domain/io-limits.js";

export const CGROUP_ROOT = "/sys/fs/cgroup";

export type IoCgroup = { mode: CgroupMode; dir: string } | { unavailable: string };

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );
const isDir = (p: string) =>
  stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );

/** Where kubelet puts pods: cgroup v2 (systemd or cgroupfs driver), then cgroup v1 blkio. */
export const DEFAULT_CGROUPS = [
  `${CGROUP_ROOT}/kubepods.slice`,
  `${CGROUP_ROOT}/kubepods`,
  `${CGROUP_ROOT}/blkio/kubepods.slice`,
  `${CGROUP_ROOT}/blkio/kubepods`,
];

async function firstDir(candidates: string[]): Promise<string | undefined> {
  for (const d of candidates) if (await isDir(d)) return d;
  return undefined;
}

/** The cgroup to throttle in and how, or why there is none. Resolved on each use: an operator may fix it meanwhile. */
export async function resolveIoCgroup(configured: string | undefined): Promise<IoCgroup> {
  const dir = configured ?? (await firstDir(DEFAULT_CGROUPS));
  if (!dir) return { unavailable: `no cgroup for I/O limits: none of ${DEFAULT_CGROUPS.join(", ")} exists (set IO_LIMITS_CGROUP)` };
  if (!(await isDir(dir))) return { unavailable: `cgroup ${dir} does not exist` };
  if (await exists(path.join(dir, "io.max"))) return { mode: "v2", dir };
  if (await exists(path.join(dir, "blkio.throttle.read_bps_device"))) return { mode: "v1", dir };
  if (await exists(path.join(dir, "cgroup.controllers"))) {
    return { unavailable: `cgroup v2 ${dir} has no io.max: the io controller is not enabled there (cgroup.subtree_control of its parent)` };
  }
  return { unavailable: `cgroup ${dir} has neither io.max (cgroup v2 io controller) nor blkio.throttle.* (cgroup v1 blkio controller)` };
}

/** "MAJ:MIN" of a block device (from sysfs, e.g. /sys/class/block/loop3/dev → "7:3"). */
export async function majMinOf(device: string): Promise<string> {
  const name = path.basename(device);
  const text = await readFile(`/sys/class/block/${name}/dev`, "utf8").catch((err: NodeJS.ErrnoException) => {
    throw new DriverError("Internal", `cannot read the device number of ${device}: ${err.code ?? err.message}`);
  });
  const mm = text.trim();
  if (!/^[0-9]+:[0-9]+$/.test(mm)) throw new DriverError("Internal", `unexpected device number ${JSON.stringify(mm.slice(0, 32))} for ${device}`);
  return mm;
}

async function write(file: string, line: string): Promise<void> {
  await writeFile(file, `${line}\n`).catch((err: NodeJS.ErrnoException) => {
    throw new DriverError("Internal", `writing "${line}" to ${file} failed: ${err.code ?? err.message}`);
  });
}

/** Set the device's limits in the cgroup (keys without a value lose their limit). */
export async function writeLimits(cg: { mode: CgroupMode; dir: string }, majMin: string, limits: MutableParameters): Promise<void> {
  if (cg.mode === "v2") return write(path.join(cg.dir, "io.max"), v2Line(majMin, limits));
  for (const { file, line } of v1Lines(majMin, limits)) await write(path.join(cg.dir, file), line);
}
