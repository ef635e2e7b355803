/** Sizes as people write them ("8Mi", "1G", "1073741824") and as csictl shows them. Pure. */
import { usageError } from "../errors.js";

const UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1e3,
  m: 1e6,
  g: 1e9,
  t: 1e12,
  ki: 2 ** 10,
  mi: 2 ** 20,
  gi: 2 ** 30,
  ti: 2 ** 40,
};

/** Bytes from "<number>[unit]", units k/M/G/T (powers of 1000) or Ki/Mi/Gi/Ti (powers of 1024), an optional B. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$/i.exec(text);
  const factor = m ? UNITS[(m[2] ?? "").toLowerCase()] : undefined;
  if (!m || factor === undefined) throw usageError(`not a size: ${JSON.stringify(text.slice(0, 40))} (e.g. 8Mi, 1Gi, 500M, 1073741824)`);
  const bytes = Number(m[1]) * factor;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw usageError(`size must be a whole number of bytes above 0: ${JSON.stringify(text.slice(0, 40))}`);
  return bytes;
}

/** "8 MiB", "1.5 GiB", "512 B". */
export function formatBytes(n: number | string): string {
  const v = Number(n);
  if (!Number.isFinite(v)) return String(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let x = v;
  while (Math.abs(x) >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${Number.isInteger(x) ? x : x.toFixed(1)} ${units[i]}`;
}
