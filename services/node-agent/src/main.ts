#!/usr/bin/env node
/** The node-agent process: `csi-node-agent --endpoint unix:///path/csi-node.sock --nodeid NODE`; `--help` lists every setting. */
import { runNodeAgent } from "./run.js";

await runNodeAgent(process.argv.slice(2), process.env);
