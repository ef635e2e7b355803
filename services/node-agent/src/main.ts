#!/usr/bin/env node
/** The node-agent process: `csi-node-agent --endpoint unix:///path/csi-node.sock --nodeid NODE`; `--help` lists every setting. */
import { mainConfig, runMain } from "@csi/runtime";
import { NODE_AGENT_SETTINGS, NodeAgentConfig } from "./config.js";
import { NODE_AGENT_VERSION, startNodeAgent } from "./index.js";

const cfg = mainConfig(
  {
    service: "node-agent",
    summary: "the CSI Identity and Node services of one node: loop devices, filesystems, mounts, I/O limits; registration and durable node work over NATS",
    schema: NodeAgentConfig,
    settings: NODE_AGENT_SETTINGS,
    packageJson: new URL("../package.json", import.meta.url),
  },
  process.argv.slice(2),
  process.env,
);
await runMain("node-agent", cfg, (log, ops) => startNodeAgent(cfg, log, ops), NODE_AGENT_VERSION);
