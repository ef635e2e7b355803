/**
 * Reads of JetStream against a real nats-server: a stream that cannot be reached is Unavailable
 * (the CO retries), never a raw NATS error answered as INTERNAL and never "there is none".
 * Found by `npm run chaos`: a nats-server restart during a replay answered INTERNAL, and a
 * ControllerPublishVolume during one answered NOT_FOUND "node … is not registered".
 */
import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverError, subjects } from "@csi/contracts";
import { NodeDirectory } from "@csi/controller/testing";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { T0, VOL, volumeReservedBody } from "@csi/journal/test-support";
import { fleetAccess } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { jetstream } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

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
  const nodes = new NodeDirectory(nc, fleetAccess(false));
  assert.equal(await nodes.get("nobody"), undefined, "no stream yet: nobody is registered");
  try {
    await env.nats.kill();
    await assert.rejects(nodes.get("nobody"), unavailable);
  } finally {
    await env.restartStopped();
  }
});

test("a read stopped early (onBatch false) or bounded by `to` hands over just that and leaves no timer behind", async () => {
  const log = new EventLog(nc, { cluster: "e2" });
  await log.ensureStream();
  const subject = subjects.volumeEvents("e2", VOL);
  const js = jetstream(nc);
  const meta = { v: 1, time: T0, requestId: "r", actor: { service: "t", replica: "1" } };
  // More events than one pull asks for, so a second pull is on its way when the reader stops.
  const n = 10_000;
  for (let i = 0; i < n; i += 1000) {
    await Promise.all(Array.from({ length: 1000 }, (_, j) => js.publish(subject, JSON.stringify({ ...volumeReservedBody(VOL, `pvc-${i + j}`), ...meta }))));
  }
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
  const before = timers();
  /**
   * The timer count once the stopped read has let go of its own, or after 3 s: long enough for a
   * busy machine to run the clean-up, shorter than a leaked read's watchdog (expires + 5 s = 7 s).
   */
  const timersSettled = async () => {
    for (const end = Date.now() + 3000; timers() !== before && Date.now() < end; ) await sleep(25);
    return timers();
  };
  const seen: number[] = [];
  const last = await log.read(
    1,
    async (b) => {
      seen.push(...b.map((e) => e.seq));
      return false;
    },
    { batch: 5 },
  );
  assert.equal(last, n, "the read answers the log's last sequence");
  assert.deepEqual(seen, [1, 2, 3, 4, 5], "stopped after the first batch");
  assert.equal(await timersSettled(), before, "no timer of the stopped read is left running (it kept the process alive)");

  const bounded: number[] = [];
  assert.equal(await log.read(11, async (b) => void bounded.push(...b.map((e) => e.seq)), { batch: 4, to: 17 }), 17);
  assert.deepEqual(bounded, [11, 12, 13, 14, 15, 16, 17], "from 11 up to and including `to`");
  assert.equal(await timersSettled(), before, "no timer left after a bounded read either");
});
