/**
 * How csictl prints: a table for people (cli-table3, borderless so that columns can be read by
 * eye and cut by awk), or JSON for scripts (`--json`), always on stdout; progress and notes go
 * to stderr so that stdout stays clean for a pipe.
 */
import Table from "cli-table3";

export function table(head: string[], rows: (string | number | boolean | undefined)[][]): string {
  const t = new Table({
    head,
    chars: {
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
    },
    style: { head: [], border: [], "padding-left": 0, "padding-right": 0, compact: true },
  });
  for (const r of rows) t.push(r.map((c) => (c === undefined ? "-" : String(c))));
  return t
    .toString()
    .split("\n")
    .map((l) => l.trimEnd())
    .join("\n");
}

/** Key/value lines for one object ("ID  0001-…"). */
export function fields(pairs: [string, string | number | boolean | undefined][]): string {
  return table(
    ["FIELD", "VALUE"],
    pairs.filter(([, v]) => v !== undefined && v !== ""),
  )
    .split("\n")
    .slice(1)
    .join("\n");
}

export interface Printer {
  json: boolean;
  /** The result: `value` as JSON with --json, else what `human` renders. */
  result(value: unknown, human: () => string): void;
  /** A note for a person (stderr; not with --json). */
  note(text: string): void;
}

export function printer(json: boolean, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr): Printer {
  return {
    json,
    result: (value, human) => {
      out.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
    },
    note: (text) => {
      if (!json) err.write(`${text}\n`);
    },
  };
}
