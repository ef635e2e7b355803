/**
 * The node-agent with fault injection, for tests only (never built into dist/, never in an image):
 * tools/testkit's spawnService runs this instead of src/main.ts when a test gives one of these
 * variables, read here and nowhere else:
 *
 *   NODE_CRASH_AFTER=<device state>   SIGKILL right after a step reports it (e.g. attached)
 *   NODE_STALL_BEFORE=<command>       the first run of it (e.g. mount) blocks until the step's deadline kills it
 */
import { runNodeAgent } from "../src/run.js";

await runNodeAgent(process.argv.slice(2), process.env, {
  crashAfter: process.env.NODE_CRASH_AFTER || undefined,
  stallBefore: process.env.NODE_STALL_BEFORE || undefined,
});
