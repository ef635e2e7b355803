/**
 * The safety net of tests that touch the machine (loop devices, mounts): whatever a test did or
 * failed to do, `cleanupUnder(dir)` unmounts every mount under `dir` (deepest first), detaches
 * every loop device whose backing file is under it, and only then removes it — never rm -rf
 * through a mount. Plus what this machine allows.
 */
import { existsSync, readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { type LoopDevice, list, type MountEntry, readMounts, run } from "@csi/node-agent/testing";

/** Why real-device tests cannot run here, or undefined when they can. */
export function whyNoDevices(): string | undefined {
  if (process.getuid?.() !== 0) return "needs root (loop devices and mounts)";
  if (!existsSync("/dev/loop-control")) return "needs /dev/loop-control (loop module)";
  return undefined;
}

/** Online ext4 resize needs CAP_SYS_RESOURCE (bit 24), which some containers drop even for root. */
export const canResizeExt4Online = (() => {
  const capEff = BigInt(`0x${/^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? "0"}`);
  return ((capEff >> 24n) & 1n) === 1n;
})();

export const hasXfs = ["/usr/sbin/mkfs.xfs", "/sbin/mkfs.xfs", "/usr/bin/mkfs.xfs"].some((p) => existsSync(p));

/** Loop devices whose backing file is under `dir` (deleted ones included). */
export async function loopsUnder(dir: string): Promise<LoopDevice[]> {
  return (await list()).filter((d) => d.backingFile?.startsWith(`${dir}/`));
}

/** Every mount at `dir` or below it, deepest first, and later mounts before earlier ones: the order to unmount them in. */
export function mountsUnder(entries: readonly MountEntry[], dir: string): MountEntry[] {
  const root = path.posix.normalize(dir).replace(/(.)\/$/, "$1");
  const prefix = root === "/" ? "/" : `${root}/`;
  const depth = (p: string) => p.split("/").length;
  return entries
    .map((e, order) => ({ e, order }))
    .filter(({ e }) => e.mountPoint === root || e.mountPoint.startsWith(prefix))
    .sort((a, b) => depth(b.e.mountPoint) - depth(a.e.mountPoint) || b.order - a.order)
    .map(({ e }) => e);
}

export async function mountsLeftUnder(dir: string): Promise<MountEntry[]> {
  return mountsUnder(await readMounts(), dir);
}

/**
 * Unmounts every mount under `dir` (deepest first) and detaches every loop device whose backing
 * file is under it; removes nothing. A mount that is busy because a loop device holds a file in it
 * (an rbd-fuse mount) is unmounted in the next round, once its loop devices are detached; only the
 * last round unmounts lazily.
 */
export async function releaseUnder(dir: string): Promise<void> {
  const detach = async () => {
    for (const d of await loopsUnder(dir)) await run("losetup", ["--detach", d.device]).catch(() => {});
  };
  for (let round = 0; round < 3; round++) {
    const mounts = await mountsLeftUnder(dir);
    if (mounts.length === 0) break;
    const last = round === 2;
    for (const m of mounts) await run("umount", [m.mountPoint]).catch(() => (last ? run("umount", ["--lazy", m.mountPoint]).catch(() => {}) : undefined));
    await detach();
  }
  await detach();
}

export async function cleanupUnder(dir: string): Promise<void> {
  await releaseUnder(dir);
  const left = await mountsLeftUnder(dir);
  if (left.length > 0) {
    console.error(`# NOT removing ${dir}: still mounted: ${left.map((m) => m.mountPoint).join(", ")}`);
    return;
  }
  await rm(dir, { recursive: true, force: true });
}

/**
 * The mount points a test's own objects make: mounts at or under `dir`, and mounts anywhere of a
 * loop device whose backing file is under `dir`. What "nothing changed on the machine" compares
 * for a test that keeps its files under `dir` — not every mount of the machine, which other test
 * files (running beside it) and people change meanwhile.
 */
export async function mountsOf(dir: string): Promise<string[]> {
  const devices = new Set((await loopsUnder(dir)).map((l) => l.device));
  const elsewhere = (await readMounts()).filter((m) => devices.has(m.source));
  return [...new Set([...(await mountsLeftUnder(dir)), ...elsewhere].map((m) => `${m.mountPoint} ${m.source}`))].sort();
}
