#!/usr/bin/env node
/** The journal process: `csi-journal [--cluster ID] [--clusters-file FILE]`; `--help` lists every setting. */
import { mainConfig, runMain } from "@csi/runtime";
import { JOURNAL_SETTINGS, JournalConfig } from "./config.js";
import { JOURNAL_VERSION, startJournal } from "./index.js";

const cfg = mainConfig(
  {
    service: "journal",
    summary: "the single writer of one storage cluster's volume and snapshot history (event log in NATS JetStream, projection in Redis)",
    schema: JournalConfig,
    settings: JOURNAL_SETTINGS,
    packageJson: new URL("../package.json", import.meta.url),
  },
  process.argv.slice(2),
  process.env,
);
await runMain("journal", cfg, (log, ops) => startJournal(cfg, log, ops), JOURNAL_VERSION);
