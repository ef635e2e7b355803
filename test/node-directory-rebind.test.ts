/**
 * Issue 39, item 5: "stream CSI_NODES unavailable" for good. A controller started while its
 * nats-server did not answer (frozen: a node's SIGSTOP, a cluster without a meta leader) asked
 * JetStream for its account info on its first node lookup (nats.js's jetstreamManager checks the
 * API), got a timeout, and kept that failed manager: every later ControllerPublishVolume failed
 * with "stream CSI_NODES unavailable" although NATS answered again (seen: 367 calls over ~285 s
 * in a chaos --ha run). The directory must bind again after a failed first bind.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { NodeDirectory } from "@csi/controller/testing";
import { fleetAccess } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";

let env: TestServers;
let nc: NatsConnection;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url, maxReconnectAttempts: -1 });
});
after(async () => {
  if (env?.nats.pid) process.kill(env.nats.pid, "SIGCONT");
  await nc?.close();
  await env?.dispose();
});

test("a node directory whose first lookup found NATS frozen answers once NATS does", { timeout: 120_000 }, async () => {
  const nodes = new NodeDirectory(nc, fleetAccess(false));
  const pid = env.nats.pid;
  assert.ok(pid);
  process.kill(pid, "SIGSTOP");
  try {
    await assert.rejects(nodes.get("node-1"), (err: unknown) => err instanceof DriverError && err.code === "Unavailable");
  } finally {
    process.kill(pid, "SIGCONT");
  }
  // The server answers again on the same connection: a lookup is "not registered", not Unavailable.
  await nc.flush();
  assert.equal(await nodes.get("node-1"), undefined);
});
