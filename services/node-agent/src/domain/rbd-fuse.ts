/**
 * The rbd-fuse mapping's pure parts: where an image's FUSE mount lives, the private ceph.conf and
 * the command line of its rbd-fuse, and reading which mounts are dead.
 *
 * One rbd-fuse per staged image (`-r <image>`), mounted at a directory of the node-agent's own
 * (<stateDir>/rbd/<clusterID>-<poolID>-<image>), showing that one image as a file; a loop device
 * on that file is the volume's block device. Not one per pool: rbd-fuse keeps every image it
 * has opened open (a watcher on it) until it exits, so a pool-wide mount would keep an unstaged
 * volume's image watched, and the journal refuses to delete a watched image, for as long as any
 * other volume of that pool stays staged on the node (docs/backends.md).
 *
 * The key is never copied: the ceph.conf names the pool's key file (`keyfile`), which librados
 * reads itself; the command line names the conf, the user, the pool and the image.
 */
import path from "node:path";
import { DriverError } from "@csi/contracts";

/** The type mountinfo shows for an rbd-fuse mount. */
export const RBD_FUSE_FS = "fuse.rbd-fuse";

/** How long rbd-fuse may take to reach the monitors and authenticate before it gives up (client_mount_timeout, s). */
export const MOUNT_TIMEOUT_S = 30;

export interface FuseImage {
  clusterID: string;
  poolID: number;
  /** The Ceph pool, user and monitors of the clusters file's RBD pool. */
  cephPool: string;
  user: string;
  monitors: readonly string[];
  keyFile: string;
  imageName: string;
}

/** The directory an image's rbd-fuse is mounted at; the image is the file of its name in it. */
export const fuseDir = (rbdDir: string, img: Pick<FuseImage, "clusterID" | "poolID" | "imageName">): string =>
  path.join(rbdDir, `${img.clusterID}-${img.poolID}-${img.imageName}`);
export const fuseImagePath = (rbdDir: string, img: Pick<FuseImage, "clusterID" | "poolID" | "imageName">): string =>
  path.join(fuseDir(rbdDir, img), img.imageName);
/** The pool's private ceph.conf (rewritten before each rbd-fuse starts, so a changed monitor list is used). */
export const confPath = (rbdDir: string, img: Pick<FuseImage, "clusterID" | "poolID">): string => path.join(rbdDir, `${img.clusterID}-${img.poolID}.conf`);

/** ceph.conf reads `#` and `;` as the start of a comment; a line break would start a setting. */
const CONF_UNSAFE = /[\n\r#;\\]/;

/** The private ceph.conf: the monitors, the key file (never the key), no admin socket, no log file, a bounded start. */
export function rbdFuseConf(img: Pick<FuseImage, "monitors" | "keyFile">): string {
  if (!path.isAbsolute(img.keyFile) || CONF_UNSAFE.test(img.keyFile))
    throw new DriverError("FailedPrecondition", "the RBD pool's keyFile must be an absolute path without #, ;, \\ or line breaks");
  if (img.monitors.some((m) => CONF_UNSAFE.test(m))) throw new DriverError("FailedPrecondition", "an RBD pool's monitor cannot be written into ceph.conf");
  return [
    "[global]",
    `mon host = ${img.monitors.join(",")}`,
    `keyfile = ${img.keyFile}`,
    "keyring = ",
    "admin socket = ",
    "log file = ",
    "log to stderr = false",
    "err to stderr = true",
    `client mount timeout = ${MOUNT_TIMEOUT_S}`,
    "",
  ].join("\n");
}

/** rbd-fuse's arguments: it daemonizes once mounted, after it has reached the monitors (a failure to: exit 1, nothing mounted). */
export function rbdFuseArgs(conf: string, dir: string, img: Pick<FuseImage, "user" | "cephPool" | "imageName">): string[] {
  return ["-c", conf, "--id", img.user, "-p", img.cephPool, "-r", img.imageName, dir];
}

/** What a probe of a mount directory found. */
export type FuseHealth = "up" | "dead" | "absent";

/**
 * The directories `stat -f` could not look at, from its stderr ("stat: cannot read file system
 * information for '/d': Transport endpoint is not connected"), with the reason. A FUSE mount
 * whose process died answers ENOTCONN to statfs, which the kernel always asks the process (a
 * plain stat of the mount point is answered from cached attributes, dead or alive).
 */
export function parseStatFailures(stderr: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of stderr.split("\n")) {
    const m = /^stat: cannot (?:statx?|read file system information for) '(.*)': (.*)$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) out.set(m[1], m[2]);
  }
  return out;
}

/** A reason from `parseStatFailures` that means the FUSE process behind the mount is gone. */
export const isDeadMount = (reason: string): boolean => /Transport endpoint is not connected/i.test(reason);
