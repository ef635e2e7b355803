/**
 * Bulk creation, pure: the names of a `volume create -f FILE` (one request name a line), checked
 * whole before anything is sent, and a bounded pool that runs one task per name. Pure: text in.
 */
import { MAX_ID_BYTES } from "@csi/contracts";
import { usageError } from "../errors.js";

/** Names in one run: a bound on what one process holds and reports (100,000 × 128 bytes at most). */
export const MAX_BULK_NAMES = 100_000;
/** The largest input read: every name at its longest, with a line end. */
export const MAX_BULK_BYTES = MAX_BULK_NAMES * (MAX_ID_BYTES + 2);
export const DEFAULT_CONCURRENCY = 16;
export const MAX_CONCURRENCY = 256;

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * One name a line (surrounding blanks trimmed; empty lines and `#` comments skipped). A line
 * that is no valid CSI name (over 128 bytes, control characters) or a name given twice is a usage
 * error naming the line, so that a batch is never half sent because of its input.
 */
export function parseNames(text: string, source: string, first: string[] = []): string[] {
  const seen = new Map<string, string>();
  const names: string[] = [];
  const given: [string, string][] = [
    ...first.map((n, i): [string, string] => [n, `argument ${i + 1}`]),
    ...text.split(/\r?\n/).map((raw, i): [string, string] => [raw, `${source}:${i + 1}`]),
  ];
  for (const [raw, where] of given) {
    const name = raw.trim();
    if (name === "" || name.startsWith("#")) continue;
    if (Buffer.byteLength(name, "utf8") > MAX_ID_BYTES) throw usageError(`${where}: a name is at most ${MAX_ID_BYTES} bytes`);
    if (CONTROL.test(name)) throw usageError(`${where}: a name has no control characters`);
    const before = seen.get(name);
    if (before) throw usageError(`${where}: ${JSON.stringify(name.slice(0, 40))} is given twice (first at ${before})`);
    seen.set(name, where);
    names.push(name);
    if (names.length > MAX_BULK_NAMES) throw usageError(`${where}: at most ${MAX_BULK_NAMES} names in one run`);
  }
  return names;
}

/** `--concurrency`: 1 to MAX_CONCURRENCY. */
export function concurrencyOption(text: string | undefined): number {
  if (text === undefined) return DEFAULT_CONCURRENCY;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > MAX_CONCURRENCY)
    throw usageError(`--concurrency must be 1 to ${MAX_CONCURRENCY}, got ${JSON.stringify(text.slice(0, 40))}`);
  return n;
}

/** `task` for every item, at most `limit` at once; the results in the items' order (a task's failure is its result, never thrown). */
export async function mapLimit<T, R>(items: T[], limit: number, task: (item: T, index: number) => Promise<R>, done?: (count: number) => void): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let finished = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await task(items[i] as T, i);
      done?.(++finished);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
