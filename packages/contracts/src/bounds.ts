/**
 * Bounds every boundary shares: CSI's size limits (spec "Size Limits": a string is at most 128
 * bytes, a map at most 4 KiB, mount_flags at most 4 KiB in all), the one rule for a mount flag,
 * and how a page is cut to a byte budget (how a caller's text is quoted: text.ts, re-exported).
 * Pure: no I/O.
 */
import { invalidArgument } from "./errors.js";
import { hasUnsafeChar } from "./text.js";

// How a caller's text is shown in a message lives in text.ts (errors.ts needs it too, and bounds.ts needs errors.ts).
export { ERROR_MESSAGE_MAX_BYTES, QUOTE_MAX_CHARS, quote, sanitizeMessage } from "./text.js";

/** CSI: every string field (names, ids) is at most 128 bytes unless its description says otherwise. */
export const CSI_STRING_MAX_BYTES = 128;
export const CSI_NAME_MAX_BYTES = CSI_STRING_MAX_BYTES;
/** CSI: a map<string, string> is at most 4 KiB in all (keys and values). */
export const CSI_MAP_MAX_BYTES = 4096;
/** CSI: "The total size of this repeated field SHALL NOT exceed 4 KiB." */
export const MOUNT_FLAGS_MAX_BYTES = 4096;
/** Ours: at most this many mount flags, each at most this long. */
export const MOUNT_FLAGS_MAX_COUNT = 64;
export const MOUNT_FLAG_MAX_BYTES = 256;
/** Ours: a repeated field of a CSI request (capabilities, ids, topologies) has at most this many items. */
export const CSI_LIST_MAX_ITEMS = 128;
/** Ours: the most entries one journal list page holds (a larger max_entries is clamped: CSI lets us return fewer). */
export const MAX_PAGE_ENTRIES = 10_000;
/**
 * The one rule for mount flags (the controller checks it at create/publish/validate, the
 * node-agent again before mount(8)): at most 64 flags, 4 KiB in all, each one option of at
 * most 256 bytes that cannot smuggle another option or a command-line flag into mount(8) (no
 * ",", whitespace, NUL or leading "-"). Mount flags MAY be sensitive (CSI): messages name the
 * index, never the flag.
 */
export function validateMountFlags(flags: readonly string[], field = "mount_flags"): void {
  if (flags.length > MOUNT_FLAGS_MAX_COUNT) throw invalidArgument(`${field}: at most ${MOUNT_FLAGS_MAX_COUNT} mount flags (got ${flags.length})`);
  let total = 0;
  flags.forEach((f, i) => {
    const bytes = Buffer.byteLength(f, "utf8");
    total += bytes;
    if (bytes > MOUNT_FLAG_MAX_BYTES) throw invalidArgument(`${field}[${i}] must be at most ${MOUNT_FLAG_MAX_BYTES} bytes (got ${bytes})`);
    if (f === "" || f.includes(",") || /\s/u.test(f) || f.startsWith("-") || f.includes("\0") || hasUnsafeChar(f)) {
      throw invalidArgument(`${field}[${i}] is not a single mount option (it must be non-empty, without ",", whitespace, control characters or a leading "-")`);
    }
  });
  if (total > MOUNT_FLAGS_MAX_BYTES) throw invalidArgument(`${field} must be at most ${MOUNT_FLAGS_MAX_BYTES} bytes in all (got ${total})`);
}

export function mapBytes(m: Record<string, string>): number {
  let n = 0;
  for (const [k, v] of Object.entries(m)) n += Buffer.byteLength(k, "utf8") + Buffer.byteLength(String(v), "utf8");
  return n;
}

/** Map-typed fields of CSI messages (proto-loader hands maps over as plain objects, like messages). */
const MAP_FIELDS = new Set(["parameters", "secrets", "volume_context", "mutable_parameters", "publish_context", "segments", "manifest"]);

/**
 * Check a CSI request (as proto-loader decodes it) against CSI's size limits before anything
 * else looks at it: every string at most 128 bytes (or `longer[field]` for fields whose
 * description allows more), every map at most 4 KiB in all, mount flags by their own rule,
 * every repeated field at most 128 items. Throws InvalidArgument naming the field and the size,
 * never the content (maps may be secrets).
 */
export function checkCsiBounds(request: unknown, longer: Readonly<Record<string, number>> = {}): void {
  const walk = (v: unknown, path: string, field: string): void => {
    if (typeof v === "string") {
      const max = longer[field] ?? CSI_STRING_MAX_BYTES;
      // A JS string of n UTF-16 units is at least n bytes: skip the count on obviously huge ones.
      const bytes = v.length > max ? Math.max(v.length, max + 1) : Buffer.byteLength(v, "utf8");
      if (bytes > max) throw invalidArgument(`${path} must be at most ${max} bytes (got ${Buffer.byteLength(v, "utf8")})`);
      return;
    }
    if (v === null || typeof v !== "object" || Buffer.isBuffer(v)) return;
    if (Array.isArray(v)) {
      if (field === "mount_flags") {
        validateMountFlags(v.map(String), path);
        return;
      }
      if (v.length > CSI_LIST_MAX_ITEMS) throw invalidArgument(`${path} must have at most ${CSI_LIST_MAX_ITEMS} items (got ${v.length})`);
      for (const [i, x] of v.entries()) walk(x, `${path}[${i}]`, field);
      return;
    }
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      const at = path ? `${path}.${k}` : k;
      if (MAP_FIELDS.has(k) && x !== null && typeof x === "object") {
        const bytes = mapBytes(x as Record<string, string>);
        if (bytes > CSI_MAP_MAX_BYTES) throw invalidArgument(`${at} must be at most ${CSI_MAP_MAX_BYTES} bytes in all (got ${bytes})`);
      } else {
        walk(x, at, k);
      }
    }
  };
  walk(request, "", "");
}

/** NATS's default max_payload (a server's `max_payload`; a connection learns the real one from INFO). */
export const NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024;
/** Room a reply page leaves under max_payload for its envelope and headers. */
export const REPLY_HEADROOM_BYTES = 4096;
/** The bytes a page of a NATS reply may fill: the connection's max_payload less the headroom. */
export const replyBudget = (maxPayload = NATS_DEFAULT_MAX_PAYLOAD): number => maxPayload - REPLY_HEADROOM_BYTES;
/** The size of a value as JSON (how NATS replies are encoded). */
export const jsonBytes = (v: unknown): number => Buffer.byteLength(JSON.stringify(v) ?? "", "utf8");

/**
 * The longest prefix of `items` whose sizes fit in `budget` bytes, and whether items were left
 * over. With `atLeastOne` (the default) the first item is taken whatever its size, so a page
 * always advances (the sender guards a single item past its limit).
 */
export function takeWithin<T>(items: readonly T[], sizeOf: (item: T) => number, budget: number, atLeastOne = true): { taken: T[]; cut: boolean } {
  let used = 0;
  let n = 0;
  for (const item of items) {
    const size = sizeOf(item);
    if ((n > 0 || !atLeastOne) && used + size > budget) break;
    used += size;
    n++;
  }
  return { taken: items.slice(0, n), cut: n < items.length };
}
