/**
 * I/O limits on a node, as pure rules: which limits a volume should have (the newest the node
 * heard, by log sequence), whether its device needs a write, and the text of the cgroup files.
 *
 * cgroup v2: one line in `io.max`:   "MAJ:MIN rbps=N wbps=N riops=N wiops=N" ("max" = no limit)
 * cgroup v1: one line per file:      "MAJ:MIN N" in blkio.throttle.{read,write}_{bps,iops}_device
 *                                    (N = 0 removes the device's rule)
 */
import { inForce, MUTABLE_PARAMETER_KEYS, type MutableParameterKey, MutableParameters } from "@csi/contracts";
import { z } from "zod";

export type CgroupMode = "v1" | "v2";

export const V1_FILES: Record<MutableParameterKey, string> = {
  readBytesPerSecond: "blkio.throttle.read_bps_device",
  writeBytesPerSecond: "blkio.throttle.write_bps_device",
  readIOPS: "blkio.throttle.read_iops_device",
  writeIOPS: "blkio.throttle.write_iops_device",
};
const V2_KEYS: Record<MutableParameterKey, string> = { readBytesPerSecond: "rbps", writeBytesPerSecond: "wbps", readIOPS: "riops", writeIOPS: "wiops" };

/** The v1 writes for a device: every file gets a line, so keys that are gone lose their rule. */
export function v1Lines(majMin: string, limits: MutableParameters): { file: string; line: string }[] {
  return MUTABLE_PARAMETER_KEYS.map((k) => ({ file: V1_FILES[k], line: `${majMin} ${limits[k] ?? "0"}` }));
}

/** The v2 io.max line for a device (all four keys, "max" where there is no limit). */
export function v2Line(majMin: string, limits: MutableParameters): string {
  return `${majMin} ${MUTABLE_PARAMETER_KEYS.map((k) => `${V2_KEYS[k]}=${limits[k] && limits[k] !== "0" ? limits[k] : "max"}`).join(" ")}`;
}

/** A device's value in a v1 throttle file (undefined: no rule). */
export function v1Value(text: string, majMin: string): string | undefined {
  for (const line of text.split("\n")) {
    const [dev, value] = line.trim().split(/\s+/);
    if (dev === majMin) return value;
  }
  return undefined;
}

/** A device's limits in io.max (empty: no line, or every key "max"). */
export function v2Limits(text: string, majMin: string): MutableParameters {
  const line = text.split("\n").find((l) => l.trim().split(/\s+/)[0] === majMin);
  const out: MutableParameters = {};
  for (const part of line?.trim().split(/\s+/).slice(1) ?? []) {
    const [name, value] = part.split("=");
    const key = MUTABLE_PARAMETER_KEYS.find((k) => V2_KEYS[k] === name);
    if (key && value && value !== "max") out[key] = value;
  }
  return out;
}

export const describeLimits = (limits: MutableParameters): string => {
  const set = Object.entries(inForce(limits));
  return set.length === 0 ? "no limits" : set.map(([k, v]) => `${k}=${v}`).join(" ");
};

/** What the node knows of one volume's limits, persisted (io-limits.json next to the state file). */
export const LimitsEntry = z.object({
  /** The newest limits heard (publish context or node work) and their log sequence. */
  seq: z.number().int().nonnegative(),
  limits: MutableParameters,
  /** When they were heard (pending entries of volumes never staged here are dropped oldest first). */
  at: z.string(),
  /** What was last done on the device: for which sequence, on which device, and whether rules of ours may be there. */
  applied: z.object({ seq: z.number().int().nonnegative(), device: z.string(), majMin: z.string(), written: z.boolean() }).optional(),
});
export type LimitsEntry = z.infer<typeof LimitsEntry>;
export const LimitsState = z.object({ version: z.literal(1), volumes: z.record(z.string(), LimitsEntry) });
export type LimitsState = z.infer<typeof LimitsState>;
export const emptyLimitsState = (): LimitsState => ({ version: 1, volumes: {} });

/** Remember limits heard with `seq` if they are newer than what is known; returns the entry to keep. */
export function hear(entry: LimitsEntry | undefined, heard: { limits: MutableParameters; seq: number }, at: string): LimitsEntry {
  if (entry && heard.seq <= entry.seq) return entry;
  return { seq: heard.seq, limits: inForce(heard.limits), at, ...(entry?.applied ? { applied: entry.applied } : {}) };
}

export type SyncPlan =
  | { kind: "none" }
  /** Write `limits` on majMin; first remove our rules from `clearFirst` (the device the volume had before). */
  | { kind: "write"; limits: MutableParameters; clearFirst?: { device: string; majMin: string } };

/**
 * What to do for a staged volume on its device now: nothing when this sequence was already done
 * on this device, or when there are no limits and no rules of ours to remove; else write.
 */
export function planSync(entry: LimitsEntry, majMin: string): SyncPlan {
  const a = entry.applied;
  const moved = a !== undefined && a.majMin !== majMin;
  if (a && !moved && a.seq === entry.seq) return { kind: "none" };
  const oursHere = !moved && a?.written === true;
  const oursElsewhere = moved && a?.written === true;
  if (Object.keys(entry.limits).length === 0 && !oursHere && !oursElsewhere) return { kind: "none" };
  return { kind: "write", limits: entry.limits, ...(oursElsewhere && a ? { clearFirst: { device: a.device, majMin: a.majMin } } : {}) };
}

/** Keep at most `max` entries of volumes that were never applied here (oldest dropped first). */
export function prunePending(volumes: Record<string, LimitsEntry>, max: number): string[] {
  const pending = Object.entries(volumes).filter(([, e]) => !e.applied);
  if (pending.length <= max) return [];
  return pending
    .sort(([, a], [, b]) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0))
    .slice(0, pending.length - max)
    .map(([id]) => id);
}
