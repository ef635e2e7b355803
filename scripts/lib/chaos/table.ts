/**
 * Plain-text tables for the chaos report. Plain padEnd rather than a table library: the report
 * is a few small tables of short cells, and a dependency would add nothing but install weight.
 * Pure.
 */
export type Cell = string | number;

/** Columns padded to their widest cell; numbers right-aligned; a rule under the header. */
export function formatTable(header: readonly string[], rows: readonly (readonly Cell[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, c) => Math.max(...all.map((r) => String(r[c] ?? "").length)));
  const line = (r: readonly Cell[]) =>
    r
      .map((cell, c) => {
        const w = widths[c] ?? 0;
        return typeof cell === "number" ? String(cell).padStart(w) : String(cell).padEnd(w);
      })
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** A duration for people: "850 ms", "2.4 s", "—" when unknown. */
export const ms = (v: number | undefined): string => (v === undefined ? "—" : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(1)} s`);
