/**
 * csictl's entry (bin/csictl.mjs loads it: its source through tsx in a checkout, dist/main.js where
 * built; the image runs dist/main.js directly): parse, run, and turn whatever went wrong into one
 * line on stderr and a meaningful exit status (errors.ts). CSICTL_DEBUG=1 adds stacks. A reader
 * that goes away (`csictl volume list | head -2`) ends csictl quietly (closed-pipe.ts).
 *
 * Once the command is done, csictl ends: whatever a library may still hold open then (a socket a
 * failed connect left, a gRPC call past csictl's own bound) does not keep it alive more than
 * LINGER_MS, and then only until stdout and stderr have handed all they hold to their readers (a
 * pipe's writes are asynchronous: an exit before would cut the output). The status is the command's.
 */
import { closedPipeExit } from "./closed-pipe.js";
import { explain } from "./errors.js";
import { buildProgram, CommanderError, commanderExit } from "./program.js";

/** How long csictl waits, after its command is done, for the event loop to empty by itself. */
const LINGER_MS = 200;

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

/** Exit once everything written to stdout and stderr is out (an empty write's callback runs after those before it). */
function exitWhenWritten(): void {
  let left = 2;
  for (const stream of [process.stdout, process.stderr])
    stream.write("", () => {
      left -= 1;
      if (left === 0) process.exit();
    });
}
setTimeout(exitWhenWritten, LINGER_MS).unref();
