/**
 * How a caller's text may appear in an error message or a log line: unsafe characters replaced,
 * quoted and cut to a bound. Pure, and imports nothing: errors.ts and bounds.ts both build on it.
 */

/** Ours: a status message (gRPC) or wire error message (NATS) is cut to this many bytes. */
export const ERROR_MESSAGE_MAX_BYTES = 1024;
/** Ours: how much of a caller's text an error message quotes. */
export const QUOTE_MAX_CHARS = 64;

/**
 * What never goes into a message or a log line as it is: C0 and C1 control characters (NUL
 * included), DEL, line/paragraph separators, zero-width and bidirectional formatting characters.
 */
const UNSAFE_CHARS = "\\u0000-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u2028-\\u202e\\u2066-\\u2069\\ufeff";
const UNSAFE = new RegExp(`[${UNSAFE_CHARS}]`, "u");
/** Whether `s` holds a character that never goes into a message as it is. */
export const hasUnsafeChar = (s: string): boolean => UNSAFE.test(s);
const UNSAFE_ALL = new RegExp(`[${UNSAFE_CHARS}]`, "gu");

const stripUnsafe = (s: string) => s.replace(UNSAFE_ALL, "?");

/**
 * A caller's text as an error message may show it: at most `max` characters (whole code
 * points), unsafe characters replaced by "?", JSON-quoted, and a cut marked with "…" and the
 * full size: `"abc…" (4096 bytes)`.
 */
export function quote(value: unknown, max = QUOTE_MAX_CHARS): string {
  const s = typeof value === "string" ? value : String(value);
  // Cheap on a huge string: look at a bounded prefix only (a code point is at most 2 UTF-16 units).
  const head = Array.from(s.slice(0, max * 2 + 2));
  const cut = head.length > max || s.length > max * 2 + 2;
  const shown = JSON.stringify(stripUnsafe(head.slice(0, max).join("")));
  return cut ? `${shown}… (${Buffer.byteLength(s, "utf8")} bytes)` : shown;
}

/** An error message made safe to send and log: unsafe characters replaced, at most `maxBytes` bytes (cut marked "…"). */
export function sanitizeMessage(message: string, maxBytes = ERROR_MESSAGE_MAX_BYTES): string {
  const safe = stripUnsafe(message.length > maxBytes * 2 ? message.slice(0, maxBytes * 2) : message);
  if (Buffer.byteLength(safe, "utf8") <= maxBytes && safe.length === message.length) return safe;
  let out = "";
  let bytes = 0;
  for (const ch of safe) {
    const b = Buffer.byteLength(ch, "utf8");
    if (bytes + b > maxBytes - 3) break;
    out += ch;
    bytes += b;
  }
  return `${out}…`;
}
