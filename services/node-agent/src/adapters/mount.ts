/**
 * Mounts: a device at the staging path, bind mounts at the target paths (mount(8), umount(8)),
 * and what is mounted where (/proc/self/mountinfo through the pure parser in domain/).
 *
 * Paths are compared as the kernel writes them: resolved, absolute, symlinks followed.
 */
import { readFile } from "node:fs/promises";
import path from "node:path";
import { DriverError, validateMountFlags } from "@csi/contracts";
import { containingMount, findByMountPoint, type MountEntry, parseMountInfo } from "../domain/mountinfo.js";
import { runRetrying } from "./exec.js";
import { canonicalPath } from "./paths.js";

export interface MountOptions {
  fsType: string;
  /** Mount options (e.g. "noatime", "discard"), each a single option; joined with "," for -o. */
  flags?: readonly string[];
  readOnly?: boolean;
}

/** The mount-flag rule lives in contracts (the controller checks it at create, too). */
export { validateMountFlags };

/** Mount paths must be absolute: that also keeps them from being read as command-line flags. */
function requireAbsolute(what: string, p: string): void {
  if (!path.isAbsolute(p) || p.includes("\0")) throw new DriverError("InvalidArgument", `${what} ${JSON.stringify(p)} must be an absolute path`);
}

const FS_TYPE = /^[a-z0-9][a-z0-9._-]*$/;

/** Mount `source` (a device) at `target` (an existing directory). */
export async function mount(source: string, target: string, opts: MountOptions): Promise<void> {
  requireAbsolute("mount source", source);
  requireAbsolute("mount target", target);
  if (!FS_TYPE.test(opts.fsType)) throw new DriverError("InvalidArgument", `invalid filesystem type ${JSON.stringify(opts.fsType)}`);
  const flags = opts.flags ?? [];
  validateMountFlags(flags);
  const options = [...(opts.readOnly ? ["ro"] : []), ...flags];
  await runRetrying("mount", ["-t", opts.fsType, ...(options.length ? ["-o", options.join(",")] : []), source, target]);
}

/**
 * Bind-mount `source` (a directory, or a device/file for block volumes) at `target`. A read-only
 * bind needs a second step (remount,bind,ro); if that fails the bind is undone, so a read-only
 * request never leaves a writable mount behind.
 */
export async function bindMount(source: string, target: string, opts: { readOnly?: boolean } = {}): Promise<void> {
  requireAbsolute("bind source", source);
  requireAbsolute("bind target", target);
  await runRetrying("mount", ["--bind", source, target]);
  if (!opts.readOnly) return;
  try {
    await runRetrying("mount", ["-o", "remount,bind,ro", target]);
  } catch (err) {
    await unmount(target).catch(() => {});
    throw err;
  }
}

/** Unmount the top mount at `target`. Not mounted is success; busy is retried, then reported. */
export async function unmount(target: string, o: { lazy?: boolean } = {}): Promise<void> {
  requireAbsolute("unmount target", target);
  if (!(await isMountPoint(target))) return;
  try {
    await runRetrying("umount", o.lazy ? ["--lazy", target] : [target]);
  } catch (err) {
    if (!(await isMountPoint(target))) return; // someone else unmounted it meanwhile
    throw err;
  }
}

/** All current mounts of this process's mount namespace. */
export async function readMounts(): Promise<MountEntry[]> {
  return parseMountInfo(await readFile("/proc/self/mountinfo", "utf8"));
}

/** The mounts stacked at `target`, the visible (last) one last. */
export async function mountsAt(target: string): Promise<MountEntry[]> {
  const want = await canonicalPath(target);
  return (await readMounts()).filter((e) => e.mountPoint === want);
}

/** Whether something is mounted at `p` (a bind mount of the same filesystem counts too). */
export async function isMountPoint(p: string): Promise<boolean> {
  return findByMountPoint(await readMounts(), await canonicalPath(p)) !== undefined;
}

/** The type of the filesystem `p` lies in (the deepest mount at or above it). `p` must be absolute, clean and free of symlinks. */
export async function fsTypeAt(p: string): Promise<string | undefined> {
  return containingMount(await readMounts(), p)?.fsType;
}
