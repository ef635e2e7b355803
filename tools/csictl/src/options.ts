/** Option values several commands share: comma lists and a stream replica count. */
import { usageError } from "./errors.js";

/** "a, b,,c" → ["a", "b", "c"]. */
export function commaList(v: string | undefined): string[] {
  return (v ?? "")
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);
}

/** `--replicas`: 1 to 5 (JetStream's range), undefined when not given; anything else is a usage error. */
export function replicasOption(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!(Number.isInteger(n) && n >= 1 && n <= 5)) throw usageError(`--replicas must be 1 to 5, got ${JSON.stringify(v)}`);
  return n;
}

/** The longest --timeout: Node's timers take at most 2^31−1 ms (about 24.8 days) and turn a longer delay into 1 ms. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** `--timeout`: whole milliseconds, 1 to MAX_TIMEOUT_MS; anything else is refused while the options are parsed (exit 2). */
export function timeoutOption(v: string): number {
  const n = Number(v);
  if (!(/^\s*\d+\s*$/.test(v) && Number.isSafeInteger(n) && n >= 1 && n <= MAX_TIMEOUT_MS))
    throw usageError(`--timeout must be a positive number of milliseconds up to ${MAX_TIMEOUT_MS} (about 24.8 days), got ${JSON.stringify(v.slice(0, 40))}`);
  return n;
}
