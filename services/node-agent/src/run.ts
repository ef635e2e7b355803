/** The node-agent's process, from its command line and environment (main.ts; the test harness's faults entry adds `faults`). */
import { mainConfig, runMain } from "@csi/runtime";
import { NODE_AGENT_SETTINGS, NodeAgentConfig } from "./config.js";
import { NODE_AGENT_VERSION, type NodeFaults, startNodeAgent } from "./index.js";

export async function runNodeAgent(argv: string[], env: NodeJS.ProcessEnv, faults: NodeFaults = {}): Promise<void> {
  const cfg = mainConfig(
    {
      service: "node-agent",
      summary: "the CSI Identity and Node services of one node: loop devices, filesystems, mounts, I/O limits; registration and durable node work over NATS",
      schema: NodeAgentConfig,
      settings: NODE_AGENT_SETTINGS,
      packageJson: new URL("../package.json", import.meta.url),
    },
    argv,
    env,
  );
  await runMain("node-agent", cfg, (log, ops) => startNodeAgent(cfg, log, ops, faults), NODE_AGENT_VERSION);
}
