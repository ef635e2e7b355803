/**
 * csictl's entry (bin/csictl.mjs loads it: its source through tsx in a checkout, dist/main.js where
 * built; the image runs dist/main.js directly): parse, run, and turn whatever went wrong into one
 * line on stderr and a meaningful exit status (errors.ts). CSICTL_DEBUG=1 adds stacks. A reader
 * that goes away (`csictl volume list | head -2`) ends csictl quietly (closed-pipe.ts).
 */
import { closedPipeExit } from "./closed-pipe.js";
import { explain } from "./errors.js";
import { buildProgram, CommanderError, commanderExit } from "./program.js";

closedPipeExit(process.stdout);
closedPipeExit(process.stderr);
try {
  await buildProgram().parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    process.exitCode = commanderExit(err); // commander has printed its message (or the help) already
  } else {
    const { exitCode, message } = explain(err);
    process.stderr.write(`csictl: ${message}\n`);
    if (process.env.CSICTL_DEBUG) process.stderr.write(`${(err as Error)?.stack ?? String(err)}\n`);
    process.exitCode = exitCode;
  }
}
