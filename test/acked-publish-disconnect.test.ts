/**
 * Issue 39, item 1: a JetStream publish waiting for its ack when the connection is lost (its
 * nats-server crashed, or evicted the client in lame-duck mode) ends at once, unacked, instead of
 * at its timeout: the ack of a message whose connection went away is never sent again, and the
 * journal's command behind it would answer (and be retried) only after the whole timeout.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AckedPublisher, PublishUnacked } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

let env: TestServers;
let nc: NatsConnection;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  await (await jetstreamManager(nc)).streams.add({ name: "ACKS", subjects: ["acks.>"] });
});
after(async () => {
  await nc?.close();
  await env?.dispose();
});

test("a publish in flight when the connection drops is unacked at once, not at its timeout", { timeout: 120_000 }, async () => {
  const publisher = new AckedPublisher(nc, 600_000);
  assert.equal(await publisher.publish("acks.one", "1"), 1, "acked while the server answers");
  const pid = env.nats.pid;
  assert.ok(pid);
  process.kill(pid, "SIGSTOP"); // the next publish gets no ack…
  const inFlight = publisher.publish("acks.two", "2");
  const outcome = inFlight.then(
    () => "acked",
    (err: unknown) => err,
  );
  await env.nats.kill(); // …and then the connection is lost
  const err = await outcome;
  assert.ok(err instanceof PublishUnacked, `unacked: ${String(err)}`);
  assert.match(err.message, /connection was lost/);
  await env.restartStopped();
});
