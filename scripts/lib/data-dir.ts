/**
 * The data directory of `npm start` and the bench (JetStream store, Redis AOF, the file pools).
 *
 * On ext4, creating a file costs kernel CPU that depends on the block group its directory lives
 * in: measured on this machine's root filesystem, 20–40 µs per create in a directory whose group
 * has free inodes, 300–850 µs in one whose group is full (the allocator searches other groups on
 * every create). The file pool creates one file per CreateVolume, so where its directory landed
 * could decide half of the journal's CPU. (The other cost of that file system, which has no
 * journal — creates scanning past recently deleted inodes — this does not help with.) Marking the data directory as a "top" directory (`chattr +T`, ext4's
 * EXT4_TOPDIR_FL) makes ext4 spread its subdirectories to groups with free inodes (the Orlov
 * allocator), so every directory made under it afterwards (each pool's) starts where creating
 * files is cheap. Best effort: other filesystems, or no chattr, leave it as it is.
 * docs/performance.md, "The file pool's create is the disk's".
 */
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";

/** mkdir -p `dir` and ask ext4 to spread the directories made under it; true if the flag is set. */
export function prepareDataDir(dir: string): boolean {
  mkdirSync(dir, { recursive: true });
  const r = spawnSync("chattr", ["+T", dir], { stdio: "ignore", timeout: 5000 });
  return r.status === 0;
}
