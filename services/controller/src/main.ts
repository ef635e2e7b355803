#!/usr/bin/env -S npx tsx
/** The controller process: `csi-controller --endpoint unix:///path/csi-controller.sock`. */
import { configOrExit, createLogger, runMain } from "@csi/runtime";
import { controllerConfig, startController } from "./index.js";

const cfg = configOrExit("controller", () => controllerConfig(process.argv.slice(2), process.env));
await runMain("controller", createLogger("controller", cfg.logLevel), (log, ops) => startController(cfg, log, ops), cfg);
