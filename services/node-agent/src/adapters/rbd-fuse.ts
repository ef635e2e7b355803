/**
 * rbd-fuse mounts (see domain/rbd-fuse.ts for the layout): start one for an image, find out
 * whether one is alive, take one down. Only directories under the node-agent's own rbd directory
 * are ever passed here, and a directory is unmounted only when the visible mount there is an
 * rbd-fuse one: the agent never unmounts anything else.
 *
 * rbd-fuse daemonizes itself once it has reached the monitors and mounted (its own session: it
 * outlives a node-agent that is killed or restarted, and is nobody's zombie). It exits when its
 * mount is unmounted, closing the image (its watcher is gone at once).
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverError } from "@csi/contracts";
import {
  confPath,
  type FuseHealth,
  type FuseImage,
  fuseDir,
  isDeadMount,
  MOUNT_TIMEOUT_S,
  parseStatFailures,
  RBD_FUSE_FS,
  rbdFuseArgs,
  rbdFuseConf,
} from "../domain/rbd-fuse.js";
import { CommandError, run } from "./exec.js";
import { readMounts, unmount } from "./mount.js";
import { removeIfEmptyDir } from "./paths.js";

/** How long a probe's `stat` may take (a FUSE process that hangs makes it hang): past it, the mount counts as up. */
const PROBE_TIMEOUT_MS = 10_000;

/**
 * The health of rbd-fuse mounts at `dirs` (canonical paths): "absent" where the visible mount is
 * not an rbd-fuse one, "dead" where its process is gone (statfs: ENOTCONN), else "up". One `stat` process
 * for all of them (a child, so a hung FUSE process cannot tie up Node's thread pool).
 */
export async function probe(dirs: readonly string[]): Promise<Map<string, FuseHealth>> {
  const mounts = await readMounts();
  const out = new Map<string, FuseHealth>();
  const mounted = dirs.filter((d) => mounts.filter((m) => m.mountPoint === d).at(-1)?.fsType === RBD_FUSE_FS);
  for (const d of dirs) out.set(d, mounted.includes(d) ? "up" : "absent");
  if (mounted.length === 0) return out;
  const res = await run("stat", ["--file-system", "-c", "%n", "--", ...mounted], { okCodes: [1], timeoutMs: PROBE_TIMEOUT_MS }).catch((err: unknown) => {
    if (err instanceof CommandError && err.code === "DeadlineExceeded") return undefined; // hung, not dead: cannot tell
    throw err;
  });
  for (const [d, why] of parseStatFailures(res?.stderr ?? "")) if (out.has(d) && isDeadMount(why)) out.set(d, "dead");
  return out;
}

/**
 * Start rbd-fuse for `img` at its directory under `rbdDir`, unless it is mounted and alive there.
 * A dead mount there is taken down first: that fails (busy) while a loop device still holds the
 * image's file on it, which must be replaced first (the healer does).
 */
export async function mountImage(rbdDir: string, img: FuseImage): Promise<string> {
  const dir = fuseDir(rbdDir, img);
  const health = (await probe([dir])).get(dir);
  if (health === "up") return dir;
  if (health === "dead") await unmountDir(dir);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const conf = confPath(rbdDir, img);
  const tmp = `${conf}.tmp-${randomBytes(6).toString("hex")}`; // images of one pool may be staged at once
  await writeFile(tmp, rbdFuseConf(img), { mode: 0o600 });
  await rename(tmp, conf);
  await run("rbd-fuse", rbdFuseArgs(conf, dir, img), { timeoutMs: (MOUNT_TIMEOUT_S + 15) * 1000 }).catch((err: unknown) => {
    if (err instanceof CommandError && /failed to fetch mon config|timed out|connection refused/i.test(err.stderr))
      throw new DriverError("Unavailable", `rbd-fuse could not reach the Ceph cluster for image ${img.imageName}: ${err.message}`, { cause: err });
    throw err;
  });
  if ((await probe([dir])).get(dir) !== "up") throw new DriverError("Internal", `rbd-fuse exited without a live mount at ${dir}`);
  return dir;
}

/**
 * Take down the rbd-fuse mount at `dir` (alive or dead) and remove the directory; a directory
 * without an rbd-fuse mount on top is only removed if empty. Waits (a bounded while) for the
 * rbd-fuse process to exit, as it does once unmounted: it closes the image then, so a
 * DeleteVolume after NodeUnstageVolume finds no watcher of this node.
 */
export async function unmountDir(dir: string): Promise<void> {
  if (!path.isAbsolute(dir)) throw new DriverError("Internal", `not an absolute path: ${dir}`);
  const serving = await processesServing(dir);
  // A mount no rbd-fuse serves (its process died) serves nothing to anyone: it is detached at once
  // (lazily), and the kernel frees it when its last reference drops. A loop device just detached
  // from a file on it still holds one for a moment (the kernel releases a loop's file later, from a
  // work queue): a plain unmount then failed "target is busy" (the mapping contract, under load).
  const lazy = serving.length === 0;
  for (let i = 0; i < 3; i++) {
    const top = (await readMounts()).filter((m) => m.mountPoint === dir).at(-1);
    if (top?.fsType !== RBD_FUSE_FS) break;
    await unmount(dir, { lazy });
  }
  await removeIfEmptyDir(dir).catch(() => false);
  for (let i = 0; i < EXIT_WAIT.tries && serving.some(alive); i++) await sleep(EXIT_WAIT.delayMs);
}

/** How long `unmountDir` waits for rbd-fuse to exit after its unmount. */
const EXIT_WAIT = { tries: 200, delayMs: 50 };

const alive = (pid: number) => existsSync(`/proc/${pid}`);

/** The rbd-fuse processes whose mount directory (their last argument) is `dir`. */
async function processesServing(dir: string): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, "utf8").catch(() => "")).split("\0").filter(Boolean);
    if (path.basename(argv[0] ?? "") === "rbd-fuse" && argv.at(-1) === dir) pids.push(Number(name));
  }
  return pids;
}
