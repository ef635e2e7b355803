/**
 * Where csictl prints: the result (a table, or -o json|yaml|name for scripts) on stdout and
 * nothing else there; notes for a person (summaries, paging hints, what was skipped) and progress
 * on stderr, and none of them with a format for programs — so that stdout can be piped into jq,
 * awk or xargs whatever the command (docs/csictl.md, "Output"). The rendering is domain/format.ts.
 */
import { forMachines, type HumanOptions, type OutputFormat, render } from "./domain/format.js";

export { type Cell, type Column, fields, type HumanOptions, listing, TableTail, table } from "./domain/format.js";

export interface Printer {
  format: OutputFormat;
  /** A format for programs (json, yaml, name): notes and progress stay off. */
  json: boolean;
  /** The result: `value` as JSON/YAML, `human` as a table (its options: -o wide, --no-headers), `names` with -o name. */
  result(value: unknown, human: (o: HumanOptions) => string, names?: () => string[]): void;
  /** A note for a person (stderr; not with a format for programs). */
  note(text: string): void;
}

export function printer(
  format: OutputFormat,
  headers = true,
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Printer {
  const quiet = forMachines(format);
  return {
    format,
    json: quiet,
    result: (value, human, names) => {
      const text = render({ value, human, names }, format, headers);
      if (text) out.write(text);
    },
    note: (text) => {
      if (!quiet) err.write(`${text}\n`);
    },
  };
}
