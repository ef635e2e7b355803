/**
 * The durable queue's graceful stop on a real nats-server (packages/runtime/src/nats/durable-queue.ts):
 * draining lets the message in hand, and those already pulled, finish and be acknowledged, and
 * takes nothing more (what is published afterwards waits in the stream for the next consumer);
 * a handler that outlives the bound is cut, and its message stays unacknowledged for redelivery.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { QueueSpec } from "@csi/contracts";
import { consumeQueue, drainAll } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import { z } from "zod";

const quiet = pino({ level: "silent" });
const Item = z.object({ n: z.number().int() });
let env: TestServers;
let nc: NatsConnection;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url });
});
after(async () => {
  await nc?.close();
  await env?.dispose();
});

const queue = (name: string): QueueSpec => ({ stream: name, subjects: [`${name}.>`], consumer: "c", filterSubject: `${name}.>` });
const publish = async (q: QueueSpec, n: number) => void (await jetstream(nc).publish(`${q.stream}.x`, JSON.stringify({ n })));
/** Messages not yet delivered, and delivered but not acknowledged. */
const pending = async (q: QueueSpec) => {
  const info = await (await jetstreamManager(nc)).consumers.info(q.stream, q.consumer);
  return { waiting: info.num_pending, unacked: info.num_ack_pending };
};
const until = async (what: string, ok: () => boolean) => {
  for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(ok(), what);
};

test("draining a queue consumer: the message in hand and those pulled finish and are acknowledged; later ones wait for the next consumer", async () => {
  const q = queue("DRAIN_A");
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const handled: number[] = [];
  const consumer = await consumeQueue(
    nc,
    q,
    Item,
    async ({ n }) => {
      if (n === 1) await gate;
      handled.push(n);
    },
    quiet,
    { what: "test items" },
  );
  for (const n of [1, 2, 3]) await publish(q, n);
  await until("the first message is in hand", () => consumer.inFlight() === 1);

  const draining = drainAll(quiet, 30_000, [consumer]);
  release();
  const report = await draining;
  assert.deepEqual({ waitedFor: report.waitedFor, cut: report.cut }, { waitedFor: { "test items": 1 }, cut: {} });
  const left = await pending(q);
  assert.equal(left.unacked, 0, "nothing is left unacknowledged (no message waits for the ack wait)");
  assert.equal(handled.length + left.waiting, 3, `every message was handled or waits in the stream (handled ${handled})`);
  assert.equal(handled[0], 1);

  await publish(q, 4);
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(!handled.includes(4), "a drained consumer takes nothing more");
  const next: number[] = [];
  const successor = await consumeQueue(nc, q, Item, async ({ n }) => void next.push(n), quiet);
  await until("the next consumer gets what was left", () => next.includes(4));
  await successor.drain();
  assert.deepEqual([...handled, ...next].sort(), [1, 2, 3, 4], "each message handled once");
});

test("draining a queue consumer whose handler outlives the bound: it is cut and its message stays unacknowledged for redelivery", async () => {
  const q = queue("DRAIN_B");
  const consumer = await consumeQueue(nc, q, Item, () => new Promise<void>(() => {}), quiet, { what: "stuck items" });
  await publish(q, 1);
  await until("the message is in hand", () => consumer.inFlight() === 1);
  const report = await drainAll(quiet, 200, [consumer]);
  assert.deepEqual(report.cut, { "stuck items": 1 });
  assert.deepEqual(await pending(q), { waiting: 0, unacked: 1 }, "delivered, not acknowledged: redelivered after the ack wait");
});
