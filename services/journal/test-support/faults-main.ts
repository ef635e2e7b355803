/**
 * The journal with fault injection, for tests only (never built into dist/, never in an image):
 * tools/testkit's spawnService runs this instead of src/main.ts when a test gives one of these
 * variables, read here and nowhere else:
 *
 *   JOURNAL_CRASH_AFTER=<event type | image:<op>>   SIGKILL right after appending such an event, or after that pool step returned
 *   JOURNAL_FREEZE_AFTER=<event type | image:<op>>  SIGSTOP there instead (its locks then expire)
 *   JOURNAL_TEST_HOLD_COPY_MS=<ms>                  hold every file-pool copy this long, temp file in the pool, before publishing it
 */
import { runJournal } from "../src/run.js";

const holdCopyMs = Number(process.env.JOURNAL_TEST_HOLD_COPY_MS ?? 0);
if (!Number.isSafeInteger(holdCopyMs) || holdCopyMs < 0)
  throw new Error(`JOURNAL_TEST_HOLD_COPY_MS: not a number of ms: ${process.env.JOURNAL_TEST_HOLD_COPY_MS}`);
await runJournal(process.argv.slice(2), process.env, {
  crashAfter: process.env.JOURNAL_CRASH_AFTER || undefined,
  freezeAfter: process.env.JOURNAL_FREEZE_AFTER || undefined,
  holdCopyMs,
});
