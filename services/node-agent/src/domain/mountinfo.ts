/**
 * /proc/self/mountinfo, parsed. Pure: text in, entries out.
 *
 * One line per mount (proc(5)):
 *
 *   36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
 *   (1)(2) (3)  (4)     (5)        (6)        (7)    (8) (9)   (10)       (11)
 *
 * mount id, parent id, major:minor, root of the mount inside its filesystem, mount point,
 * per-mount options, zero or more optional fields (shared:N, master:N, ...) ended by a lone
 * "-", then the filesystem type, the source and the superblock options. The kernel writes a
 * space, tab, newline or backslash inside a path or source as an octal escape (\040, \011,
 * \012, \134), so splitting on single spaces is exact; a field may be empty (a source of "").
 */
import path from "node:path";
import { DriverError } from "@csi/contracts";

export interface MountEntry {
  mountId: number;
  parentId: number;
  /** "7:0" for /dev/loop0. */
  majorMinor: string;
  /** The directory of the filesystem that is mounted: "/" for a whole filesystem, a sub-path for a bind mount of one. */
  root: string;
  mountPoint: string;
  /** Per-mount options: rw/ro, nosuid, noatime, ... */
  options: string[];
  /** shared:N, master:N, propagate_from:N, unbindable. */
  optionalFields: string[];
  fsType: string;
  source: string;
  /** Options of the filesystem (superblock), shared by all its mounts. */
  superOptions: string[];
}

/** Undo the kernel's octal escapes: "\040" → " ". */
export function unescapeMountField(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(Number.parseInt(oct, 8)));
}

/** Parse the whole text of a mountinfo file. A line that does not fit the format is an Internal error. */
export function parseMountInfo(text: string): MountEntry[] {
  const entries: MountEntry[] = [];
  const lines = text.split("\n");
  for (const [i, line] of lines.entries()) {
    if (line === "") continue;
    entries.push(parseLine(line, i + 1));
  }
  return entries;
}

function parseLine(line: string, lineNo: number): MountEntry {
  const bad = (why: string) => new DriverError("Internal", `mountinfo line ${lineNo} ${why}: ${JSON.stringify(line.slice(0, 300))}`);
  const f = line.split(" ");
  const sep = f.indexOf("-", 6);
  if (f.length < 10 || sep < 0 || f.length < sep + 4) throw bad("has too few fields");
  const [id, parent, majorMinor, root, mountPoint, options] = f as [string, string, string, string, string, string];
  const mountId = Number(id);
  const parentId = Number(parent);
  if (!Number.isInteger(mountId) || !Number.isInteger(parentId) || !/^\d+:\d+$/.test(majorMinor)) throw bad("has a malformed id");
  return {
    mountId,
    parentId,
    majorMinor,
    root: unescapeMountField(root),
    mountPoint: unescapeMountField(mountPoint),
    options: options.split(","),
    optionalFields: f.slice(6, sep),
    fsType: unescapeMountField(f[sep + 1] ?? ""),
    source: unescapeMountField(f[sep + 2] ?? ""),
    superOptions: f
      .slice(sep + 3)
      .join(" ")
      .split(","),
  };
}

/** "/a/b/" → "/a/b"; "/" stays "/". */
function clean(p: string): string {
  const n = path.posix.normalize(p);
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
}

/**
 * The mount visible at `mountPoint`: the last one listed there (a later mount on the same
 * directory hides the earlier ones). `mountPoint` must be a resolved absolute path.
 */
export function findByMountPoint(entries: readonly MountEntry[], mountPoint: string): MountEntry | undefined {
  const want = clean(mountPoint);
  return entries.findLast((e) => e.mountPoint === want);
}

/**
 * Whether mount `e` shows `device`: the filesystem on it (or a bind mount of that filesystem —
 * mountinfo gives a bind the source of what it binds), or a bind mount of the device node itself
 * (a published block volume: the /dev filesystem, with the device's node as its root).
 */
export function isMountOfDevice(e: MountEntry, device: string): boolean {
  if (e.source === device) return true;
  return (e.fsType === "devtmpfs" || e.fsType === "tmpfs") && e.root === `/${path.posix.basename(device)}`;
}

/** The mount a path lies in: the deepest mount point at or above `p` (the visible one of a stack). `p` must be absolute and clean. */
export function containingMount(entries: readonly MountEntry[], p: string): MountEntry | undefined {
  const want = clean(p);
  let best: MountEntry | undefined;
  for (const e of entries) {
    const under = e.mountPoint === "/" || want === e.mountPoint || want.startsWith(`${e.mountPoint}/`);
    if (under && (!best || e.mountPoint.length >= best.mountPoint.length)) best = e;
  }
  return best;
}

/** Kernel pseudo filesystems: no staging or target path may lie in one, wherever it is mounted. */
export const PSEUDO_FS: ReadonlySet<string> = new Set([
  "proc",
  "sysfs",
  "devtmpfs",
  "devpts",
  "cgroup",
  "cgroup2",
  "debugfs",
  "tracefs",
  "securityfs",
  "bpf",
  "configfs",
  "pstore",
  "efivarfs",
  "fusectl",
  "binfmt_misc",
]);
