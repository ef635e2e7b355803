/**
 * Filesystems on block devices: detect (blkid), make (mkfs), grow (resize2fs / xfs_growfs),
 * and volume statistics for NodeGetVolumeStats.
 *
 * Data safety first: `detectFs` reports anything blkid recognises (a filesystem, LUKS, swap,
 * a partition table), and `makeFs` refuses a device on which it finds something, so a volume
 * that holds data is never formatted, whatever the caller believed.
 */
import { stat, statfs } from "node:fs/promises";
import { DriverError, isSupportedFs, SUPPORTED_FS } from "@csi/contracts";
import { CommandError, run } from "./exec.js";

/** mkfs of a large volume takes a while; discarding a big device even longer. */
const MKFS_TIMEOUT_MS = 10 * 60_000;
const GROW_TIMEOUT_MS = 10 * 60_000;

async function requireBlockDevice(device: string): Promise<void> {
  const st = await stat(device).catch(() => undefined);
  if (!st) throw new DriverError("NotFound", `device ${device} does not exist`);
  if (!st.isBlockDevice()) throw new DriverError("FailedPrecondition", `${device} is not a block device`);
}

/**
 * What is on `device`: its filesystem type ("ext4", "xfs", "swap", "crypto_LUKS", ...), or
 * undefined when the device is empty. A partition table without a filesystem is reported as
 * "partition-table:<type>", so that an empty answer really means "safe to format".
 */
export async function detectFs(device: string): Promise<string | undefined> {
  await requireBlockDevice(device);
  // -p: probe the device itself, not blkid's cache. Exit 2: nothing found.
  const res = await run("blkid", ["-p", "-o", "export", device], { okCodes: [2] });
  if (res.code === 2) return undefined;
  const vars = new Map<string, string>();
  for (const line of res.stdout.split("\n")) {
    const eq = line.indexOf("=");
    if (eq > 0) vars.set(line.slice(0, eq), line.slice(eq + 1));
  }
  const type = vars.get("TYPE");
  if (type) return type;
  const pt = vars.get("PTTYPE");
  if (pt) return `partition-table:${pt}`;
  return undefined;
}

/** Make a filesystem on an empty device. Only ext4 and xfs; a device that holds anything is refused. */
export async function makeFs(device: string, fsType: string): Promise<void> {
  if (!isSupportedFs(fsType))
    throw new DriverError("InvalidArgument", `unsupported filesystem type ${JSON.stringify(fsType)}; supported: ${SUPPORTED_FS.join(", ")}`);
  const found = await detectFs(device);
  if (found !== undefined) throw new DriverError("FailedPrecondition", `refusing to format ${device}: it already holds ${found}`);
  if (fsType === "ext4") await run("mkfs.ext4", ["-F", "-q", device], { timeoutMs: MKFS_TIMEOUT_MS });
  else await run("mkfs.xfs", ["-f", "-q", device], { timeoutMs: MKFS_TIMEOUT_MS });
}

/**
 * Grow the filesystem to fill its (already grown) device, online: ext4 by its device,
 * xfs by its mount path (xfs_growfs works on a mounted filesystem only).
 */
export async function growFs(device: string, mountPath: string, fsType: string): Promise<void> {
  if (fsType === "ext4") {
    await run("resize2fs", [device], { timeoutMs: GROW_TIMEOUT_MS }).catch((err: unknown) => {
      // The kernel allows an online ext4 resize only to a process with CAP_SYS_RESOURCE.
      if (err instanceof CommandError && /Permission denied to resize filesystem/.test(err.stderr)) {
        throw new DriverError(
          "FailedPrecondition",
          `online resize of ext4 on ${device} refused by the kernel (EPERM): the node-agent needs the CAP_SYS_RESOURCE capability`,
          { cause: err },
        );
      }
      throw err;
    });
  } else if (fsType === "xfs") await run("xfs_growfs", ["-d", mountPath], { timeoutMs: GROW_TIMEOUT_MS });
  else throw new DriverError("InvalidArgument", `cannot grow filesystem type ${JSON.stringify(fsType)}; supported: ${SUPPORTED_FS.join(", ")}`);
}

export interface Usage {
  total: number;
  available: number;
  used: number;
}

export type VolumeStats =
  /** A mounted filesystem: bytes and inodes. */
  | { kind: "filesystem"; bytes: Usage; inodes: Usage }
  /** A block volume (the path is a device node): only its size is known. */
  | { kind: "block"; bytes: { total: number } };

/** Size of a block device in bytes. */
export async function blockDeviceSize(device: string): Promise<number> {
  const { stdout } = await run("blockdev", ["--getsize64", device]);
  const n = Number(stdout.trim());
  if (!Number.isSafeInteger(n) || n < 0) throw new DriverError("Internal", `blockdev --getsize64 ${device} printed ${JSON.stringify(stdout)}`);
  return n;
}

/** Usage of the volume at `p`: a mounted directory, or a block device (node or bind-mounted file). */
export async function stats(p: string): Promise<VolumeStats> {
  const st = await stat(p).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") throw new DriverError("NotFound", `volume path ${p} does not exist`);
    throw new DriverError("Internal", `stat ${p}: ${err.message}`, { cause: err });
  });
  if (st.isBlockDevice()) return { kind: "block", bytes: { total: await blockDeviceSize(p) } };
  const s = await statfs(p);
  return {
    kind: "filesystem",
    bytes: { total: s.blocks * s.bsize, available: s.bavail * s.bsize, used: (s.blocks - s.bfree) * s.bsize },
    inodes: { total: s.files, available: s.ffree, used: s.files - s.ffree },
  };
}
