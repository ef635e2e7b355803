/**
 * How csictl shows a result, kubectl's way (`-o json|yaml|wide|name`, `--no-headers`), pure:
 * the value and its human rendering in, the text out. Tables are borderless (cli-table3) so that
 * columns can be read by eye and cut by awk; `-o wide` adds the columns marked wide; `-o name`
 * prints the ids alone, one a line (what the other commands take). JSON is the one shape per kind
 * the command builds (lists as `{items: […]}`, proto3 JSON names), YAML the same value as YAML.
 */
import Table from "cli-table3";
import { stringify as yamlStringify } from "yaml";
import { usageError } from "../errors.js";

export const OUTPUT_FORMATS = ["json", "yaml", "wide", "name"] as const;
export type OutputFormat = "table" | (typeof OUTPUT_FORMATS)[number];

/** What a human rendering may ask of the options: wide columns, the header row. */
export interface HumanOptions {
  wide: boolean;
  headers: boolean;
}

export type Cell = string | number | boolean | undefined | null;

/** `-o`, `--json` (an alias of `-o json`) as given: the format, or a usage error. */
export function outputFormat(o: { output?: string | undefined; json?: boolean | undefined }): OutputFormat {
  if (o.output === undefined) return o.json ? "json" : "table";
  if (!(OUTPUT_FORMATS as readonly string[]).includes(o.output))
    throw usageError(`-o takes one of ${OUTPUT_FORMATS.join(", ")}, got ${JSON.stringify(o.output.slice(0, 40))}`);
  if (o.json && o.output !== "json") throw usageError(`--json is -o json: not with -o ${o.output}`);
  return o.output as OutputFormat;
}

/** Whether the format is for a program (json, yaml, name): then csictl keeps stderr quiet too (no notes, no progress). */
export const forMachines = (f: OutputFormat) => f === "json" || f === "yaml" || f === "name";

const BORDERLESS = {
  top: "",
  "top-mid": "",
  "top-left": "",
  "top-right": "",
  bottom: "",
  "bottom-mid": "",
  "bottom-left": "",
  "bottom-right": "",
  left: "",
  "left-mid": "",
  mid: "",
  "mid-mid": "",
  right: "",
  "right-mid": "",
  middle: "  ",
};

/** Absent cells (undefined, null, "") show as "-": nothing is made up for what a server did not say. */
const cellText = (c: Cell) => (c === undefined || c === null || c === "" ? "-" : String(c));

/** A borderless table; without its header row when `headers` is false (`--no-headers`). */
export function table(head: string[], rows: Cell[][], o: Partial<HumanOptions> = {}): string {
  const t = new Table({
    ...(o.headers === false ? {} : { head }),
    chars: BORDERLESS,
    style: { head: [], border: [], "padding-left": 0, "padding-right": 0, compact: true },
  });
  for (const r of rows) t.push(r.map(cellText));
  return t
    .toString()
    .split("\n")
    .map((l) => l.trimEnd())
    .join("\n");
}

/**
 * Rows that go on below a table already printed (`history --follow`), in its columns: each cell
 * padded to its column's width so far, as `table` pads it; a column grows when a cell is wider
 * (what is printed above stays as it was).
 */
export class TableTail {
  readonly #widths: number[];
  constructor(head: string[], rows: Cell[][], headers: boolean) {
    this.#widths = head.map((h, i) => Math.max(headers ? h.length : 0, ...rows.map((r) => cellText(r[i]).length)));
  }

  line(cells: Cell[]): string {
    return cells
      .map((c, i) => {
        const text = cellText(c);
        const width = Math.max(this.#widths[i] ?? 0, text.length);
        this.#widths[i] = width;
        return text.padEnd(width);
      })
      .join(BORDERLESS.middle)
      .trimEnd();
  }
}

/** Key/value lines for one object ("ID  0001-…"); empty values are left out. */
export function fields(pairs: [string, Cell][]): string {
  return table(
    ["FIELD", "VALUE"],
    pairs.filter(([, v]) => v !== undefined && v !== null && v !== ""),
    { headers: false },
  );
}

/** A column of a listing: its header, its cell, and whether only `-o wide` shows it. */
export interface Column<T> {
  head: string;
  cell: (item: T) => Cell;
  wide?: boolean;
}

/** Items as a table of `columns` (the wide ones only with -o wide). */
export function listing<T>(columns: Column<T>[], items: T[], o: HumanOptions): string {
  const shown = columns.filter((c) => o.wide || !c.wide);
  return table(
    shown.map((c) => c.head),
    items.map((item) => shown.map((c) => c.cell(item))),
    o,
  );
}

/** What a command hands over: the value (json, yaml), the text for people, the ids (`-o name`). */
export interface View {
  value: unknown;
  human: (o: HumanOptions) => string;
  names?: (() => string[]) | undefined;
}

/** The text of a view in a format; "" when there is nothing to print (no names, an empty table without headers). */
export function render(view: View, format: OutputFormat, headers = true): string {
  switch (format) {
    case "json":
      return `${JSON.stringify(view.value, null, 2)}\n`;
    case "yaml":
      return yamlStringify(view.value, { lineWidth: 0 });
    case "name": {
      if (!view.names) throw usageError("-o name: this command prints no object names");
      return view
        .names()
        .map((n) => `${n}\n`)
        .join("");
    }
    default: {
      const text = view.human({ wide: format === "wide", headers });
      return text === "" ? "" : `${text}\n`;
    }
  }
}
