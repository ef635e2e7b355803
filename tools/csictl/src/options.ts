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
