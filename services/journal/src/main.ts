#!/usr/bin/env -S npx tsx
/** The journal process: `csi-journal [--cluster ID] [--clusters-file FILE]`. */
import { configOrExit, createLogger, runMain } from "@csi/runtime";
import { journalConfig, startJournal } from "./index.js";

const cfg = configOrExit("journal", () => journalConfig(process.argv.slice(2), process.env));
await runMain("journal", createLogger("journal", cfg.logLevel), (log, ops) => startJournal(cfg, log, ops), cfg);
