/**
 * Reads of JetStream against a real nats-server: a stream that cannot be reached is Unavailable
 * (the CO retries), never a raw NATS error answered as INTERNAL and never "there is none".
 * Found by `npm run chaos`: a nats-server restart during a replay answered INTERNAL, and a
 * ControllerPublishVolume during one answered NOT_FOUND "node … is not registered".
 */
import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { NodeDirectory } from "../services/controller/src/adapters/nodes.js";
import { EventLog } from "../services/journal/src/adapters/event-log.js";
import { startTestServers, type TestServers } from "./support/servers.js";

let env: TestServers;
let nc: NatsConnection;

before(async () => {
  env = await startTestServers();
});
after(() => env.dispose());
// Each test has its own connection: the previous one may still be reconnecting to the restarted server.
beforeEach(async () => {
  nc = await connect({ servers: env.nats.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
});
afterEach(() => nc.close());

const unavailable = (err: unknown) => err instanceof DriverError && err.code === "Unavailable";

test("a subject without events is empty; with the server gone every read is Unavailable", async () => {
  const log = new EventLog(nc, { cluster: "e1" });
  await log.ensureStream();
  assert.equal(await log.lastOf("csi.e1.events.volume.none"), undefined, "no events: undefined, not an error");
  assert.equal(await log.lastSeq(), 0);
  try {
    await env.nats.kill();
    for (const [what, call] of [
      ["info", () => log.info()],
      ["lastOf", () => log.lastOf("csi.e1.events.volume.none")],
      ["read", () => log.read(1, async () => {})],
      ["history", () => log.history(["csi.e1.events.volume.none"])],
    ] as const) {
      await assert.rejects(call(), unavailable, `${what} with the server gone`);
    }
  } finally {
    await env.restartStopped();
  }
});

test("a node directory: an unknown node is undefined; with the server gone the lookup is Unavailable, not 'not registered'", async () => {
  const nodes = new NodeDirectory(nc);
  assert.equal(await nodes.get("nobody"), undefined, "no stream yet: nobody is registered");
  try {
    await env.nats.kill();
    await assert.rejects(nodes.get("nobody"), unavailable);
  } finally {
    await env.restartStopped();
  }
});
