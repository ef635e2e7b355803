/**
 * Helpers for the node side of RBD on a real Ceph (test/rbd-node.test.ts): the rbd-fuse processes
 * a node-agent started, found by the mount directory on their command line (/proc), so a test can
 * kill one as a crash would.
 */
import { readdir, readFile } from "node:fs/promises";

export interface RbdFuseProcess {
  pid: number;
  /** Its mount directory (the last argument). */
  dir: string;
}

/** The running rbd-fuse processes whose mount directory is under `root`. */
export async function rbdFuseProcesses(root: string): Promise<RbdFuseProcess[]> {
  const out: RbdFuseProcess[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, "utf8").catch(() => "")).split("\0").filter(Boolean);
    const dir = argv.at(-1);
    if (argv[0]?.endsWith("rbd-fuse") && dir?.startsWith(`${root}/`)) out.push({ pid: Number(name), dir });
  }
  return out;
}
