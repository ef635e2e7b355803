/** Test-side access to the machine helpers (devices, mounts, clean-up), which scripts/lib also uses. */
export * from "../../scripts/lib/machine.js";

import { loopsUnder, mountsLeftUnder } from "../../scripts/lib/machine.js";
import { readMounts } from "../../services/node-agent/src/adapters/mount.js";

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
