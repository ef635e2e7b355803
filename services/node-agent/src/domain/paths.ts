/**
 * The paths a caller gives the node (staging and target paths), checked by their text alone,
 * before anything looks at or touches the machine. Pure.
 *
 * A path must be absolute, at most MAX_PATH_BYTES bytes with components of at most
 * MAX_NAME_BYTES (NAME_MAX), free of control characters (NUL included), without "." or ".."
 * segments, not "/" itself, and neither one of the forbidden roots (default /proc, /sys, /dev;
 * NODE_FORBIDDEN_ROOTS) nor under one. Anything else is INVALID_ARGUMENT, and the message quotes
 * at most a short, sanitised prefix of what was sent (contracts' `quote`).
 *
 * MAX_PATH_BYTES is 1024: kubelet's longest paths (a pod's target with a 253-character PV name)
 * stay under 400 bytes, and with 1024 no syscall ever sees ENAMETOOLONG from a path we accepted.
 */
import path from "node:path";
import { DriverError, quote } from "@csi/contracts";

export const MAX_PATH_BYTES = 1024;
export const MAX_NAME_BYTES = 255;
export const DEFAULT_FORBIDDEN_ROOTS: readonly string[] = ["/proc", "/sys", "/dev"];

/** Whether `s` holds a control character (C0, NUL included, or DEL). */
export function hasControlCharacter(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u < 0x20 || u === 0x7f) return true;
  }
  return false;
}

/** Whether `p` is `root` or lies below it (both clean absolute paths). */
export function isUnder(root: string, p: string): boolean {
  if (root === "/") return true;
  return p === root || p.startsWith(`${root}/`);
}

const invalid = (msg: string) => new DriverError("InvalidArgument", msg);

/**
 * Check a path given by the CO (see the top of this file) and return it in clean form
 * (duplicate and trailing slashes removed). `what` names the field in the message.
 */
export function validateCoPath(p: string, what = "path", forbidden: readonly string[] = DEFAULT_FORBIDDEN_ROOTS): string {
  if (typeof p !== "string" || p === "") throw invalid(`${what} is empty`);
  const bytes = Buffer.byteLength(p, "utf8");
  if (bytes > MAX_PATH_BYTES) throw invalid(`${what} is ${bytes} bytes long, more than ${MAX_PATH_BYTES}: ${quote(p)}`);
  if (hasControlCharacter(p)) throw invalid(`${what} contains a control character (NUL included): ${quote(p)}`);
  if (!p.startsWith("/")) throw invalid(`${what} ${quote(p)} must be absolute`);
  const segments = p.split("/");
  if (segments.includes("..") || segments.includes(".")) throw invalid(`${what} ${quote(p)} must not contain "." or ".." segments`);
  const long = segments.find((s) => Buffer.byteLength(s, "utf8") > MAX_NAME_BYTES);
  if (long !== undefined) throw invalid(`${what} has a component longer than ${MAX_NAME_BYTES} bytes: ${quote(long)}`);
  const normal = path.posix.normalize(p);
  const clean = normal.length > 1 && normal.endsWith("/") ? normal.slice(0, -1) : normal;
  if (clean === "/") throw invalid(`${what} must not be the root directory`);
  const root = forbidden.find((r) => isUnder(r, clean));
  if (root !== undefined) throw invalid(`${what} ${quote(clean)} is under ${root}, where the node never stages or publishes`);
  return clean;
}

/** Parse a list of forbidden roots (NODE_FORBIDDEN_ROOTS: comma-separated absolute paths); undefined or "" → the defaults. */
export function parseForbiddenRoots(text: string | undefined): string[] {
  if (text === undefined || text.trim() === "") return [...DEFAULT_FORBIDDEN_ROOTS];
  return text.split(",").map((r) => {
    const t = r.trim();
    const n = path.posix.normalize(t);
    const clean = n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
    if (!t.startsWith("/") || clean !== t.replace(/\/+$/, "") || hasControlCharacter(t))
      throw new Error(`forbidden root ${quote(t)} must be a clean absolute path`);
    return clean;
  });
}
