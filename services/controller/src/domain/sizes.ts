/**
 * Sizes (pure): the one place a volume's size is decided. A CSI CapacityRange becomes the size
 * the journal is asked for, in whole MiB; the journal makes exactly that size and only checks it
 * (docs/controller.md, "What the journal checks"). No I/O.
 *
 *   CreateVolume            no range (or both fields 0) → 1 GiB (at most limit_bytes); else
 *                           required_bytes (or limit_bytes alone) rounded up to whole MiB
 *   ControllerExpandVolume  required_bytes rounded up to whole MiB; limit_bytes alone grows nothing
 *   both                    the rounded size past limit_bytes → OUT_OF_RANGE; a negative count
 *                           → INVALID_ARGUMENT; required_bytes past MAX_VOLUME_BYTES → OUT_OF_RANGE;
 *                           limit_bytes past it limits nothing
 */
import { DriverError, GiB, invalidArgument, MiB, quote, roundUpToMiB } from "@csi/contracts";
import type { CapacityRangeMsg } from "@csi/runtime";

/** What CreateVolume makes when the range asks for no size. */
export const DEFAULT_VOLUME_BYTES = GiB;
/** The smallest volume (every size is whole MiB). */
export const MIN_VOLUME_BYTES = MiB;
/** The most bytes any volume may have: what a JS number holds exactly, in whole MiB (each pool's own maximum is the journal's check). */
export const MAX_VOLUME_BYTES = Math.floor(Number.MAX_SAFE_INTEGER / MiB) * MiB;

/** What the journal is asked for: `sizeBytes` a positive multiple of MiB; `limitBytes` 0 (none) or ≥ sizeBytes. */
export interface SizeAsk {
  sizeBytes: number;
  limitBytes: number;
}

/**
 * A CSI byte count (int64, a decimal string from proto-loader). Negative → INVALID_ARGUMENT.
 * A required size past MAX_VOLUME_BYTES is OUT_OF_RANGE (no volume can be that big); a limit
 * past it limits nothing and reads as MAX_VOLUME_BYTES.
 */
function toBytes(v: unknown, field: string, kind: "required" | "limit"): number {
  const s = String(v ?? "0");
  if (!/^-?[0-9]{1,40}$/.test(s)) throw invalidArgument(`${field} must be a byte count, got ${quote(s)}`);
  if (s.startsWith("-") && /[1-9]/.test(s)) throw invalidArgument(`${field} must not be negative`);
  const n = Number(s.replace(/^-/, ""));
  if (n <= MAX_VOLUME_BYTES) return n;
  if (kind === "limit") return MAX_VOLUME_BYTES;
  throw new DriverError("OutOfRange", `${field} ${s} is more than a volume can have (${MAX_VOLUME_BYTES} bytes)`);
}

function rangeOf(range: CapacityRangeMsg | null | undefined): { req: number; limit: number } {
  const req = toBytes(range?.required_bytes, "capacity_range.required_bytes", "required");
  const limit = toBytes(range?.limit_bytes, "capacity_range.limit_bytes", "limit");
  if (limit > 0 && req > limit) throw new DriverError("OutOfRange", `required_bytes ${req} exceeds limit_bytes ${limit}`);
  return { req, limit };
}

/** The size a range asks for, in whole MiB, if it fits under its limit. */
function roundedWithin(size: number, limit: number): number {
  const rounded = roundUpToMiB(size);
  if (limit > 0 && rounded > limit)
    throw new DriverError("OutOfRange", `the smallest size this driver makes, ${rounded} bytes (whole MiB), exceeds limit_bytes ${limit}`);
  return rounded;
}

/** CreateVolume: CapacityRange → the size to make and the limit. No range → the default size. */
export function createSize(range: CapacityRangeMsg | null | undefined, defaultBytes = DEFAULT_VOLUME_BYTES): SizeAsk {
  const { req, limit } = rangeOf(range);
  const size = req > 0 ? req : limit > 0 ? Math.min(defaultBytes, limit) : defaultBytes;
  return { sizeBytes: roundedWithin(size, limit), limitBytes: limit };
}

/**
 * ControllerExpandVolume's CapacityRange → the size to grow to (0 = none asked) and the limit.
 * The range is REQUIRED and CSI says at least one of its fields MUST be set: an empty one is
 * INVALID_ARGUMENT. Create's default size never applies: with only a limit nothing grows (the
 * current size answers if it is within the limit: `expandedSize`).
 */
export function expandSize(range: CapacityRangeMsg | null | undefined): SizeAsk {
  if (!range) throw invalidArgument("capacity_range is required");
  const { req, limit } = rangeOf(range);
  if (req === 0 && limit === 0) throw invalidArgument("capacity_range must set required_bytes or limit_bytes");
  return { sizeBytes: req > 0 ? roundedWithin(req, limit) : 0, limitBytes: limit };
}

/**
 * The size ControllerExpandVolume answers: the volume's size after the journal's answer (which
 * never shrinks a volume), unless it is past `limitBytes` (0 = none) → OUT_OF_RANGE.
 */
export function expandedSize(volumeBytes: number, limitBytes: number): number {
  if (limitBytes > 0 && volumeBytes > limitBytes) throw new DriverError("OutOfRange", `volume is ${volumeBytes} bytes, past limit_bytes ${limitBytes}`);
  return volumeBytes;
}

/** What one pool can give, as the journal's `pool.stat` answers it. */
export interface PoolSpace {
  freeBytes: number;
  maxImageBytes: number;
}

/** GetCapacity over the pools that answered (at least one): the free bytes summed, the largest one volume can get, the smallest. */
export function capacityAnswer(pools: PoolSpace[]) {
  return {
    available_capacity: String(pools.reduce((n, s) => n + s.freeBytes, 0)),
    maximum_volume_size: { value: String(Math.max(...pools.map((s) => Math.min(s.maxImageBytes, s.freeBytes)))) },
    minimum_volume_size: { value: String(MIN_VOLUME_BYTES) },
  };
}

/** GetCapacity where no pool can be used (a capability we do not serve, or no pool reached from the topology). */
export const noCapacity = () => ({ available_capacity: "0", maximum_volume_size: null, minimum_volume_size: null });
