#!/usr/bin/env -S npx tsx
/** The journal process: `csi-journal [--cluster ID] [--clusters-file FILE]`. */
import { createLogger } from "@csi/contracts";
import { journalConfig, startJournal } from "./index.js";

const cfg = journalConfig(process.argv.slice(2), process.env);
const logger = createLogger("journal", cfg.logLevel);
try {
  const running = await startJournal(cfg, logger);
  const shutdown = async (signal: string) => {
    logger.info({ signal }, "stopping");
    await running.stop();
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
} catch (err) {
  logger.fatal({ err }, "journal failed to start");
  process.exit(1);
}
