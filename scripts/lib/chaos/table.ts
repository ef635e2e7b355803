/**
 * Plain-text tables for the chaos report. Plain padEnd rather than a table library: the report
 * is a few small tables of short cells, and a dependency would add nothing but install weight.
 * Pure.
 */
export type Cell = string | number;

/** Columns padded to their widest cell; numeric columns (header included) right-aligned; a rule under the header. */
export function formatTable(header: readonly string[], rows: readonly (readonly Cell[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, c) => Math.max(...all.map((r) => String(r[c] ?? "").length)));
  const numeric = header.map((_, c) => rows.length > 0 && rows.every((r) => typeof r[c] === "number"));
  const line = (r: readonly Cell[]) =>
    r
      .map((cell, c) => {
        const w = widths[c] ?? 0;
        return numeric[c] ? String(cell).padStart(w) : String(cell).padEnd(w);
      })
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** A duration for people: "850 ms", "2.4 s", "—" when unknown. */
export const ms = (v: number | undefined): string => (v === undefined ? "—" : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(1)} s`);
