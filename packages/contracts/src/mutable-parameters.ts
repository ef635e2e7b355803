/**
 * Mutable parameters (CSI `mutable_parameters`; Kubernetes VolumeAttributesClass): the I/O limits
 * a volume's block device gets on every node that stages it. One schema for the controller (which
 * refuses bad input before anything is sent), the journal (events, records) and the node-agent
 * (publish context, node work).
 *
 *   readBytesPerSecond, writeBytesPerSecond   bytes per second: 0 = no limit, else 4096 … 2^50
 *   readIOPS, writeIOPS                       I/O operations per second: 0 = no limit, else 1 … 10^9
 *
 * Values are decimal digits as strings (no sign, no unit, at most 20 characters); they are kept
 * canonical ("0100" → "100"). A volume's limits "in force" are the keys whose value is not 0: a
 * key set to 0 is removed, so a volume without limits has an empty map.
 */
import { z } from "zod";
import { quote } from "./bounds.js";
import { invalidArgument } from "./errors.js";

export const MUTABLE_PARAMETER_KEYS = ["readBytesPerSecond", "writeBytesPerSecond", "readIOPS", "writeIOPS"] as const;
export type MutableParameterKey = (typeof MUTABLE_PARAMETER_KEYS)[number];

/** The smallest and largest non-zero value of each key (0 always means "no limit"). */
export const MUTABLE_PARAMETER_BOUNDS: Record<MutableParameterKey, { min: number; max: number }> = {
  // Below one 4 KiB page per second a single write would stall the device for seconds.
  readBytesPerSecond: { min: 4096, max: 2 ** 50 },
  writeBytesPerSecond: { min: 4096, max: 2 ** 50 },
  // The kernel keeps IOPS limits in 32 bits (a larger value silently wraps); 10^9 is far past any device.
  readIOPS: { min: 1, max: 1_000_000_000 },
  writeIOPS: { min: 1, max: 1_000_000_000 },
};

const limitValue = (key: MutableParameterKey) => {
  const { min, max } = MUTABLE_PARAMETER_BOUNDS[key];
  return z
    .string()
    .regex(/^[0-9]{1,20}$/, "must be a non-negative decimal integer (digits only, at most 20)")
    .transform((s, ctx) => {
      const n = Number(s);
      if (n !== 0 && (n < min || n > max)) {
        ctx.addIssue({ code: "custom", message: `must be 0 (no limit) or between ${min} and ${max}` });
        return z.NEVER;
      }
      return String(n);
    });
};

/** The four keys, each optional; unknown keys are refused. Output values are canonical decimal strings. */
export const MutableParameters = z.strictObject({
  readBytesPerSecond: limitValue("readBytesPerSecond").optional(),
  writeBytesPerSecond: limitValue("writeBytesPerSecond").optional(),
  readIOPS: limitValue("readIOPS").optional(),
  writeIOPS: limitValue("writeIOPS").optional(),
});
export type MutableParameters = z.output<typeof MutableParameters>;

const isKey = (k: string): k is MutableParameterKey => (MUTABLE_PARAMETER_KEYS as readonly string[]).includes(k);
/**
 * Validate a CSI map as mutable parameters. Throws InvalidArgument with a bounded message naming
 * at most three unknown keys (each cut to 64 characters) and never echoing a value.
 */
export function parseMutableParameters(map: Record<string, string>, field = "mutable_parameters"): MutableParameters {
  const unknown = Object.keys(map).filter((k) => !isKey(k));
  if (unknown.length > 0) {
    const shown =
      unknown
        .slice(0, 3)
        .map((k) => quote(k))
        .join(", ") + (unknown.length > 3 ? ` and ${unknown.length - 3} more` : "");
    throw invalidArgument(`${field}: unknown key ${shown}; the mutable parameters are ${MUTABLE_PARAMETER_KEYS.join(", ")}`);
  }
  const parsed = MutableParameters.safeParse(map);
  if (!parsed.success) throw invalidArgument(`${field}: ${parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`).join("; ")}`);
  return parsed.data;
}

/** The limits in force: every key whose value is not 0, in key order. */
export function inForce(p: MutableParameters): MutableParameters {
  const out: MutableParameters = {};
  for (const k of MUTABLE_PARAMETER_KEYS) if (p[k] !== undefined && p[k] !== "0") out[k] = p[k];
  return out;
}

/** A modification: only the keys asked change (CSI: absent keys are left alone); 0 removes a limit. */
export function applyMutableParameters(current: MutableParameters, asked: MutableParameters): MutableParameters {
  return inForce({ ...current, ...asked });
}

export function sameMutableParameters(a: MutableParameters, b: MutableParameters): boolean {
  const x = inForce(a);
  const y = inForce(b);
  return MUTABLE_PARAMETER_KEYS.every((k) => x[k] === y[k]);
}

/** Split a CSI map into our keys (unvalidated) and the rest. */
export function pickMutableParameters(map: Record<string, string>): { picked: Record<string, string>; rest: Record<string, string> } {
  const picked: Record<string, string> = {};
  const rest: Record<string, string> = {};
  for (const [k, v] of Object.entries(map)) (isKey(k) ? picked : rest)[k] = v;
  return { picked, rest };
}

/**
 * The publish context carries the limits in force and `ioLimitsSeq`: the volume's position in
 * the event log at which they were read. A node keeps whichever it heard with the highest
 * sequence (this context or a later modification sent as node work).
 */
export const IO_LIMITS_SEQ_KEY = "ioLimitsSeq";

export function limitsToContext(p: MutableParameters, seq: number): Record<string, string> {
  return { ...inForce(p), [IO_LIMITS_SEQ_KEY]: String(seq) };
}

/** The limits a publish context carries; undefined when it carries none (an older journal). Throws InvalidArgument when malformed. */
export function limitsFromContext(ctx: Record<string, string>): { limits: MutableParameters; seq: number } | undefined {
  const seqText = ctx[IO_LIMITS_SEQ_KEY];
  if (seqText === undefined) return undefined;
  if (!/^[0-9]{1,15}$/.test(seqText)) throw invalidArgument(`publish_context.${IO_LIMITS_SEQ_KEY} must be a decimal sequence number`);
  return { limits: inForce(parseMutableParameters(pickMutableParameters(ctx).picked, "publish_context")), seq: Number(seqText) };
}
