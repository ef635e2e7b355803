import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startTestServers, type TestServers } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";

let env: TestServers;
before(async () => {
  env = await startTestServers();
});
after(async () => {
  await env?.dispose();
});

test("nats-server with JetStream survives a kill and a restart with its stream data", async () => {
  let nc = await connect({ servers: env.nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "H", subjects: ["h.>"] });
  const ack = await jetstream(nc).publish("h.one", "payload");
  assert.equal(ack.seq, 1);
  await nc.close();

  await env.nats.kill();
  assert.equal(env.nats.running, false);
  await assert.rejects(connect({ servers: env.nats.url, reconnect: false, timeout: 500 }));

  await env.nats.restart();
  nc = await connect({ servers: env.nats.url });
  const msg = await (await jetstreamManager(nc)).streams.getMessage("H", { last_by_subj: "h.one" });
  assert.equal(msg?.string(), "payload");
  await nc.close();
});

test("redis-server can be killed and restarted on the same port", async () => {
  const r = new Redis(env.redis.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  await r.connect();
  await r.set("k", "v");
  assert.equal(await r.get("k"), "v");
  r.disconnect();
  await env.redis.kill();
  const down = new Redis(env.redis.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  down.on("error", () => {});
  await assert.rejects(down.connect());
  down.disconnect();
  await env.redis.restart();
  const again = new Redis(env.redis.url);
  assert.equal(await again.ping(), "PONG");
  again.disconnect();
});
