/**
 * A reader that goes away (`csictl volume list | head -2`, a closed terminal): csictl ends at
 * once and quietly, with status 141 (128 + SIGPIPE), as a Unix tool killed by SIGPIPE does (cat,
 * kubectl) — Node ignores SIGPIPE and would otherwise die of an unhandled EPIPE with a stack
 * trace. Nothing more is printed (the pipe is gone, and stderr may be the one that went).
 */
import { EXIT } from "./errors.js";

const isClosedPipe = (err: unknown) => {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED";
};

export function closedPipeExit(stream: NodeJS.WriteStream): void {
  stream.on("error", (err) => {
    if (isClosedPipe(err)) process.exit(EXIT.closedPipe);
    throw err;
  });
}
