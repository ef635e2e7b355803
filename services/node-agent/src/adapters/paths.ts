/**
 * Paths on the node: looking at the ones the CO gives us (their text is checked in
 * domain/paths.ts), joining our own under a root, and creating/removing staging and target
 * paths — only their last component, never recursively, so a mistake can at worst leave an
 * empty directory behind, never delete a volume's data or make a tree somewhere.
 */
import { lstat, mkdir, open, opendir, realpath, rmdir, unlink } from "node:fs/promises";
import path from "node:path";
import { DriverError, quote } from "@csi/contracts";
import type { MountEntry } from "../domain/mountinfo.js";
import type { PathSeen } from "../domain/placement.js";
import { checkDeadline } from "./deadline.js";

const invalid = (msg: string) => new DriverError("InvalidArgument", msg);

/**
 * `root/parts...`, resolved, and guaranteed to lie strictly inside `root` (not `root` itself).
 * Parts must be relative; ".." is allowed only as long as the result stays inside. The check is
 * lexical: symlinks are not followed, so `root` must be a tree that only this agent writes.
 */
export function safeJoin(root: string, ...parts: string[]): string {
  const base = path.resolve(root);
  for (const p of parts) {
    if (p.includes("\0")) throw invalid(`path part ${JSON.stringify(p)} contains a NUL byte`);
    if (path.isAbsolute(p)) throw invalid(`path part ${JSON.stringify(p)} must be relative`);
  }
  const joined = path.resolve(base, ...parts);
  const prefix = base.endsWith(path.sep) ? base : base + path.sep;
  if (!joined.startsWith(prefix) || joined.length === prefix.length) {
    throw invalid(`path ${JSON.stringify(parts.join("/"))} escapes ${base}`);
  }
  return joined;
}

/**
 * `p` as the kernel writes it (a loop device's backing file, a mount point in mountinfo):
 * absolute, symlinks resolved. A path that does not exist (yet) is only made absolute.
 */
export async function canonicalPath(p: string): Promise<string> {
  const abs = path.resolve(p);
  return realpath(abs).catch(() => abs);
}

const code = (err: unknown) => (err as NodeJS.ErrnoException).code;

/**
 * NO symlink among the components of `p` that exist (lstat on each, from the root down), and
 * none of them but the last anything but a directory: a caller's path is used as written, never
 * followed somewhere else. Read-only; INVALID_ARGUMENT otherwise.
 */
export async function requireNoSymlinks(p: string, what = "path"): Promise<void> {
  const parts = p.split("/").filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    const prefix = `/${parts.slice(0, i).join("/")}`;
    checkDeadline();
    const st = await lstat(prefix).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return undefined;
      if (err.code === "ENOTDIR") throw invalid(`${what}: a component of ${quote(p, 128)} is not a directory`);
      throw new DriverError("Internal", `cannot look at ${quote(prefix, 128)}: ${err.code ?? err.message}`, { cause: err });
    });
    if (!st) return; // the rest does not exist (yet)
    if (st.isSymbolicLink()) throw invalid(`${what} ${quote(p, 128)} goes through a symbolic link (${quote(prefix, 128)}); give the path it points to`);
    if (i < parts.length && !st.isDirectory()) throw invalid(`${what}: ${quote(prefix, 128)} in ${quote(p, 128)} is not a directory`);
  }
}

/** What is at `p` (a checked path, without symlinks), for the placement decisions; `mounts` are the mounts at `p`. */
export async function lookAt(p: string, mounts: readonly MountEntry[]): Promise<PathSeen> {
  const st = await lstat(p).catch(() => undefined);
  const parent = await lstat(path.dirname(p)).catch(() => undefined);
  const kind = !st ? "absent" : st.isDirectory() ? "dir" : st.isFile() ? "file" : "other";
  let empty = false;
  if (kind === "file") empty = st?.size === 0;
  else if (kind === "dir" && mounts.length === 0) {
    const dir = await opendir(p);
    try {
      empty = (await dir.read()) === null;
    } finally {
      await dir.close().catch(() => {});
    }
  }
  return { path: p, kind, empty, parentIsDir: parent?.isDirectory() ?? false, mounts };
}

/**
 * Create the last component of `p` — a directory, or the empty file a block volume's device is
 * bound onto — and nothing else: its parent must exist (the CO creates it). Returns true when
 * this call made it, false when it was there already.
 */
export async function createLast(p: string, kind: "dir" | "file"): Promise<boolean> {
  checkDeadline();
  try {
    if (kind === "dir") await mkdir(p, { mode: 0o750 });
    else await (await open(p, "wx", 0o640)).close();
    return true;
  } catch (err) {
    if (code(err) === "EEXIST") return false;
    if (code(err) === "ENOENT" || code(err) === "ENOTDIR")
      throw new DriverError("FailedPrecondition", `the parent directory of ${quote(p, 128)} does not exist (the CO creates it)`, { cause: err });
    throw new DriverError("Internal", `cannot create ${quote(p, 128)}: ${code(err) ?? (err as Error).message}`, { cause: err });
  }
}

/**
 * Remove directory `p` if it is empty. Returns true when `p` is gone (or was never there),
 * false when it is not empty (then it is left alone). A mount point is an error.
 */
export async function removeIfEmptyDir(p: string): Promise<boolean> {
  checkDeadline();
  try {
    await rmdir(p);
    return true;
  } catch (err) {
    switch (code(err)) {
      case "ENOENT":
        return true;
      case "ENOTEMPTY":
      case "EEXIST":
        return false;
      case "EBUSY":
        throw new DriverError("FailedPrecondition", `${p} is still a mount point`, { cause: err });
      case "ENOTDIR":
        throw new DriverError("FailedPrecondition", `${p} is not a directory`, { cause: err });
      default:
        throw new DriverError("Internal", `cannot remove directory ${p}: ${(err as Error).message}`, { cause: err });
    }
  }
}

/** Remove file `p` (never a directory); a missing file is success, a mounted one an error. */
export async function removeFile(p: string): Promise<void> {
  checkDeadline();
  try {
    await unlink(p);
  } catch (err) {
    switch (code(err)) {
      case "ENOENT":
        return;
      case "EISDIR":
        throw new DriverError("FailedPrecondition", `${p} is a directory, not a file`, { cause: err });
      case "EBUSY":
        throw new DriverError("FailedPrecondition", `${p} is still a mount point`, { cause: err });
      default:
        throw new DriverError("Internal", `cannot remove file ${p}: ${(err as Error).message}`, { cause: err });
    }
  }
}
