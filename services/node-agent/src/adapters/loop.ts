/**
 * Loop devices: how a file-backed image becomes a block device on this node (losetup).
 *
 * A loop device is found again by its backing file, as ceph-csi's findDeviceMappingImage finds
 * an rbd mapping by pool and image. The kernel reports a backing file that was deleted (or
 * replaced) after the attach as "<path> (deleted)": such a device no longer shows the image
 * at that path, so `findByBackingFile` never returns it; `list` shows it with `deleted: true`
 * so the healer can detach it.
 */
import { open, stat } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverError } from "@csi/contracts";
import { CommandError, run, runRetrying } from "./exec.js";
import { canonicalPath } from "./paths.js";

export interface LoopDevice {
  /** The device node, e.g. /dev/loop3. */
  device: string;
  /** The backing file as the kernel reports it, without the " (deleted)" suffix. */
  backingFile: string | undefined;
  /** The backing file was unlinked (or replaced) after the attach. */
  deleted: boolean;
  readOnly: boolean;
  /** Detach was asked while the device was in use: the kernel frees it on the last close. */
  autoclear: boolean;
}

const DELETED = " (deleted)";

/** Parse `losetup --list --json --output NAME,BACK-FILE,RO,AUTOCLEAR`. Pure. */
export function parseLosetupJson(text: string): LoopDevice[] {
  if (text.trim() === "") return []; // older losetup prints nothing when no device is attached
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new DriverError("Internal", `losetup --json printed invalid JSON: ${text.slice(0, 200)}`, { cause: err });
  }
  const rows = (doc as { loopdevices?: unknown }).loopdevices;
  if (!Array.isArray(rows)) throw new DriverError("Internal", `losetup --json printed no "loopdevices" list: ${text.slice(0, 200)}`);
  return rows.map((row: Record<string, unknown>) => {
    if (typeof row.name !== "string") throw new DriverError("Internal", `losetup --json printed a device without a name: ${JSON.stringify(row)}`);
    let backingFile = typeof row["back-file"] === "string" && row["back-file"] !== "" ? row["back-file"] : undefined;
    const deleted = backingFile?.endsWith(DELETED) ?? false;
    if (deleted) backingFile = backingFile?.slice(0, -DELETED.length);
    return { device: row.name, backingFile, deleted, readOnly: flag(row.ro), autoclear: flag(row.autoclear) };
  });
}

/** losetup prints booleans as JSON booleans (util-linux ≥ 2.33) or as "0"/"1" (older). */
function flag(v: unknown): boolean {
  return v === true || v === 1 || v === "1";
}

/** Every attached loop device. */
export async function list(): Promise<LoopDevice[]> {
  const { stdout } = await run("losetup", ["--list", "--json", "--output", "NAME,BACK-FILE,RO,AUTOCLEAR"]);
  return parseLosetupJson(stdout);
}

/**
 * The loop device that currently maps `imagePath`, if any (the first by name if several do).
 * `evenDeleted`: also one whose file was unlinked since it was attached (the kernel still shows the
 * path it was attached at): the unstage of a volume this node attached detaches it whatever became
 * of the file, so that nothing holds a deleted image.
 */
export async function findByBackingFile(imagePath: string, opts: { evenDeleted?: boolean } = {}): Promise<string | undefined> {
  const want = await canonicalPath(imagePath);
  const hits = (await list()).filter((d) => (opts.evenDeleted || !d.deleted) && d.backingFile === want);
  hits.sort((a, b) => a.device.localeCompare(b.device, "en", { numeric: true }));
  return hits[0]?.device;
}

/** Map `imagePath` to a free loop device and return the device path. */
export async function attach(imagePath: string, opts: { readOnly?: boolean } = {}): Promise<string> {
  const file = await canonicalPath(imagePath);
  const st = await stat(file).catch(() => undefined);
  if (!st) throw new DriverError("NotFound", `image file ${file} does not exist`);
  if (!st.isFile()) throw new DriverError("FailedPrecondition", `image ${file} is not a regular file`);
  const args = ["--find", "--show", ...(opts.readOnly ? ["--read-only"] : []), "--direct-io=off", file];
  const { stdout } = await runRetrying("losetup", args);
  const device = stdout.trim();
  if (!device.startsWith("/dev/")) throw new DriverError("Internal", `losetup ${args.join(" ")} printed no device: ${JSON.stringify(stdout)}`);
  return device;
}

/** How long `detach` waits for the kernel to let go of a device that was busy for a moment. */
const DETACH_SETTLE = { tries: 10, delayMs: 50 };

/**
 * Detach a loop device. A device that is not attached (or does not exist) is success.
 *
 * Pass `expect.backingFile` (the image path) whenever it is known: a free device name is
 * reused by the next attach at once, so a retried detach by name alone could hit a device that
 * meanwhile maps another volume. With it, a device that no longer maps that file counts as
 * already detached and is left alone. The device is held open while it is checked and
 * detached: a bound loop device cannot be unbound and rebound to another file while anyone has
 * it open, so what was checked is what gets detached.
 *
 * The kernel does not refuse to detach a device that is still in use (mounted, open): it marks
 * it "autoclear" and frees it on the last close. So afterwards we check that the device really
 * let go of its file, and fail with FailedPrecondition if it stays in use.
 */
export async function detach(device: string, expect?: { backingFile: string }): Promise<void> {
  const want = expect && (await canonicalPath(expect.backingFile));
  const pin = await open(device, "r").catch(() => undefined);
  if (!pin) return; // no such device node
  let mapped: string | undefined;
  try {
    mapped = (await list()).find((d) => d.device === device)?.backingFile;
    if (mapped === undefined || (want !== undefined && mapped !== want)) return;
    await runRetrying("losetup", ["--detach", device]).catch((err: unknown) => {
      if (err instanceof CommandError && /No such device or address/i.test(err.stderr)) return; // detached meanwhile
      throw err;
    });
  } finally {
    await pin.close(); // our own hold: with it gone, an unused device is freed now
  }
  for (let i = 0; i < DETACH_SETTLE.tries; i++) {
    const now = (await list()).find((d) => d.device === device);
    if (now?.backingFile !== mapped) return; // gone, or already reused for another file
    await sleep(DETACH_SETTLE.delayMs);
  }
  throw new DriverError(
    "FailedPrecondition",
    `loop device ${device} (${mapped}) is still in use (mounted or open); the kernel will detach it when the last user closes it`,
  );
}

/** Make the loop device see the current size of its backing file (after the image grew). */
export async function refreshSize(device: string): Promise<void> {
  await runRetrying("losetup", ["--set-capacity", device]);
}
