#!/usr/bin/env -S npx tsx
/** The node-agent process: `csi-node-agent --endpoint unix:///path/csi-node.sock --nodeid NODE`. */
import { configOrExit, createLogger, runMain } from "@csi/runtime";
import { nodeAgentConfig, startNodeAgent } from "./index.js";

const cfg = configOrExit("node-agent", () => nodeAgentConfig(process.argv.slice(2), process.env));
await runMain("node-agent", createLogger("node-agent", cfg.logLevel), (log, ops) => startNodeAgent(cfg, log, ops), cfg);
