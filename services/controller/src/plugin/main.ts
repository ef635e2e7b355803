#!/usr/bin/env node
/**
 * The plugin mux process (mux.ts): `node services/controller/dist/plugin/main.js --endpoint
 * unix:///run/docker/plugins/csi.sock --controller-endpoint ... --node-endpoint ...`; `--help`
 * lists its settings. deploy/swarm/entrypoint.sh starts it beside a controller and a node-agent.
 */
import { LOG_SETTINGS, logShape, mainConfig, runMain, type Settings } from "@csi/runtime";
import { z } from "zod";
import { CONTROLLER_VERSION } from "../index.js";
import { startPluginMux } from "./mux.js";

const MuxConfig = z.object({
  endpoint: z.string().default("unix:///run/docker/plugins/csi.sock"),
  controllerEndpoint: z.string().default("unix:///run/csi/csi-controller.sock"),
  nodeEndpoint: z.string().default("unix:///run/csi/csi-node.sock"),
  ...logShape,
});
const MUX_SETTINGS = {
  endpoint: { env: "CSI_ENDPOINT", flag: "endpoint", help: "the one CSI endpoint it serves (Identity, Controller, Node): unix:///path or tcp://host:port" },
  controllerEndpoint: {
    env: "CSI_CONTROLLER_ENDPOINT",
    flag: "controller-endpoint",
    help: "the controller's CSI endpoint, where Identity and Controller calls go",
  },
  nodeEndpoint: { env: "CSI_NODE_ENDPOINT", flag: "node-endpoint", help: "the node-agent's CSI endpoint, where Node calls go" },
  ...LOG_SETTINGS,
} as const satisfies Settings<z.input<typeof MuxConfig>>;

const cfg = mainConfig(
  {
    service: "plugin-mux",
    summary: "one CSI socket for Docker Swarm's managed plugin: Identity and Controller calls forwarded to the controller, Node calls to the node-agent",
    schema: MuxConfig,
    settings: MUX_SETTINGS,
    packageJson: new URL("../../package.json", import.meta.url),
  },
  process.argv.slice(2),
  process.env,
);
await runMain("plugin-mux", cfg, (log) => startPluginMux({ ...cfg, log }), CONTROLLER_VERSION);
