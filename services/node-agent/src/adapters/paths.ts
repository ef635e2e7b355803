/**
 * Paths on the node: checking the ones the CO gives us, joining our own under a root, and
 * creating/removing staging and target paths — never recursively, so a mistake can at worst
 * leave an empty directory behind, never delete a volume's data.
 */
import { lstat, mkdir, open, realpath, rmdir, unlink } from "node:fs/promises";
import path from "node:path";
import { DriverError } from "@csi/contracts";

const PATH_MAX = 4096;

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
 * Check a path given by the CO (staging or target path) and return it in clean form (duplicate
 * and trailing slashes removed). It must be absolute, without NUL bytes, and without "." or
 * ".." segments: we do not guess what a path that needs resolving was meant to be.
 */
export function validateCoPath(p: string, what = "path"): string {
  if (typeof p !== "string" || p === "") throw invalid(`${what} is empty`);
  if (p.includes("\0")) throw invalid(`${what} contains a NUL byte`);
  if (p.length > PATH_MAX) throw invalid(`${what} is longer than ${PATH_MAX} bytes`);
  if (!p.startsWith("/")) throw invalid(`${what} ${JSON.stringify(p)} must be absolute`);
  const segments = p.split("/");
  if (segments.includes("..") || segments.includes(".")) throw invalid(`${what} ${JSON.stringify(p)} must not contain "." or ".." segments`);
  const clean = path.posix.normalize(p);
  return clean.length > 1 && clean.endsWith("/") ? clean.slice(0, -1) : clean;
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

/** Create directory `p` (and its parents) if needed; an existing non-directory is an error. */
export async function ensureDir(p: string, mode = 0o750): Promise<void> {
  try {
    await mkdir(p, { recursive: true, mode });
  } catch (err) {
    if (code(err) === "EEXIST" || code(err) === "ENOTDIR") throw new DriverError("FailedPrecondition", `${p} exists and is not a directory`, { cause: err });
    throw new DriverError("Internal", `cannot create directory ${p}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Create an empty file at `p` (the target of a block volume's bind mount) if nothing is there;
 * its parent directory is created too. An existing file or device node is fine; a directory is not.
 */
export async function ensureFile(p: string, mode = 0o640): Promise<void> {
  await ensureDir(path.dirname(p));
  try {
    await (await open(p, "wx", mode)).close();
  } catch (err) {
    if (code(err) !== "EEXIST") throw new DriverError("Internal", `cannot create file ${p}: ${(err as Error).message}`, { cause: err });
    if ((await lstat(p)).isDirectory()) throw new DriverError("FailedPrecondition", `${p} exists and is a directory`);
  }
}

/**
 * Remove directory `p` if it is empty. Returns true when `p` is gone (or was never there),
 * false when it is not empty (then it is left alone). A mount point is an error.
 */
export async function removeIfEmptyDir(p: string): Promise<boolean> {
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
