/**
 * The event log adapter against a real nats-server: a log that cannot be reached is
 * Unavailable (the CO retries), never a raw NATS error that the journal would answer as
 * INTERNAL; a subject without events is simply empty. (Found by `npm run chaos`: a nats-server
 * restart during a replay answered INTERNAL.)
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { EventLog } from "../services/journal/src/adapters/event-log.js";
import { startTestServers, type TestServers } from "./support/servers.js";

let env: TestServers;
let nc: NatsConnection;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
});
after(async () => {
  await nc.close();
  await env.dispose();
});

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
