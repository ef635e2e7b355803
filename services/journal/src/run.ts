/** The journal's process, from its command line and environment (main.ts; the test harness's faults entry adds `faults`). */
import { mainConfig, runMain } from "@csi/runtime";
import { JOURNAL_SETTINGS, JournalConfig } from "./config.js";
import { JOURNAL_VERSION, type JournalFaults, startJournal } from "./index.js";

export async function runJournal(argv: string[], env: NodeJS.ProcessEnv, faults: JournalFaults = {}): Promise<void> {
  const cfg = mainConfig(
    {
      service: "journal",
      summary: "the single writer of one storage cluster's volume and snapshot history (event log in NATS JetStream, projection in Redis)",
      schema: JournalConfig,
      settings: JOURNAL_SETTINGS,
      packageJson: new URL("../package.json", import.meta.url),
    },
    argv,
    env,
  );
  await runMain("journal", cfg, (log, ops) => startJournal(cfg, log, ops, faults), JOURNAL_VERSION);
}
