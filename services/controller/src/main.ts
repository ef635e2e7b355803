#!/usr/bin/env node
/** The controller process: `csi-controller --endpoint unix:///path/csi-controller.sock`; `--help` lists every setting. */
import { mainConfig, runMain } from "@csi/runtime";
import { CONTROLLER_SETTINGS, ControllerConfig } from "./config.js";
import { CONTROLLER_VERSION, startController } from "./index.js";

const cfg = mainConfig(
  {
    service: "controller",
    summary: "the CSI Identity, Controller and GroupController services: stateless, each call routed to its cluster's journal over NATS",
    schema: ControllerConfig,
    settings: CONTROLLER_SETTINGS,
    packageJson: new URL("../package.json", import.meta.url),
  },
  process.argv.slice(2),
  process.env,
);
await runMain("controller", cfg, (log, ops) => startController(cfg, log, ops), CONTROLLER_VERSION);
