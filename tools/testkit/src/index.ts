/**
 * `@csi/testkit`, the one entry of the helpers the tests share (test/), which `npm start`
 * (scripts/start.ts, scripts/lib), the chaos harness and the bench use too: real nats-server,
 * redis-server and Sentinel processes on free ports; the services run as real processes from their
 * sources (the one place that names their mains); csictl and `npm start` as child processes; the
 * machine's safety net (mounts and loop devices under a test's directory); /metrics parsing; the
 * deployment files' checks against the services' settings tables; the fenced-writers race. It
 * reaches the services only through their declared entries (`@csi/<service>`, `…/operator`,
 * `…/testing`). Nothing a service ships imports it.
 */
export * from "./build.js";
export * from "./ceph.js";
export * from "./compose-keys.js";
export * from "./csictl.js";
export * from "./deploy-checks.js";
export * from "./fenced-writers.js";
export * from "./journal-env.js";
export * from "./local-servers.js";
export * from "./machine.js";
export * from "./metrics.js";
export * from "./node-stack.js";
export * from "./npm-start.js";
export * from "./powercut.js";
export * from "./processes.js";
export * from "./rbd-node.js";
export * from "./redis-functions.js";
export * from "./servers.js";
export * from "./shared-process.js";
export * from "./sidecar-checks.js";
export * from "./sidecar-flags.js";
