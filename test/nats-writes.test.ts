/**
 * `connectNats` coalesces a connection's socket writes per event-loop turn
 * (packages/runtime/src/nats/connect.ts), against a real nats-server: what is published in an I/O
 * or timer callback is still buffered after the microtask checkpoint and leaves at setImmediate
 * (a plain nats.js connection has written it by then); messages published from many separate
 * callbacks all arrive, in order; a request gets its reply; a publish larger than the pending
 * limit is written at once. The first test fails when a nats-core release changes the shape
 * that is patched (coalesceWrites then returns false).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { coalesceWrites, connectNats, pendingBytes } from "@csi/runtime";
import { startTestServers, type TestServers } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";

let env: TestServers;
const open: NatsConnection[] = [];
const conn = async (coalesced: boolean) => {
  const nc = coalesced ? await connectNats({ servers: env.nats.url }) : await connect({ servers: env.nats.url });
  open.push(nc);
  return nc;
};

before(async () => {
  env = await startTestServers();
});
after(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await env.dispose();
});

/** Publishes in a timer callback (as a request handler would) and reports the buffered bytes after its microtasks, then after setImmediate. */
function publishInCallback(
  nc: NatsConnection,
  payload: Uint8Array | string = "x",
): Promise<{ afterMicrotasks: number | undefined; afterImmediate: number | undefined }> {
  return new Promise((resolve) => {
    setTimeout(() => {
      nc.publish("t.write", payload);
      queueMicrotask(() =>
        queueMicrotask(() => {
          const afterMicrotasks = pendingBytes(nc);
          setImmediate(() => resolve({ afterMicrotasks, afterImmediate: pendingBytes(nc) }));
        }),
      );
    }, 1);
  });
}

test("a publish waits for the end of the loop turn; a plain connection writes it at the microtask checkpoint", async () => {
  const coalesced = await conn(true);
  const plain = await conn(false);
  assert.equal(coalesceWrites(await conn(false)), true, "nats-core's ProtocolHandler has the shape connect.ts patches");
  const c = await publishInCallback(coalesced);
  assert.ok((c.afterMicrotasks ?? 0) > 0, `still buffered after the microtasks: ${c.afterMicrotasks}`);
  assert.equal(c.afterImmediate, 0, "written at setImmediate");
  const p = await publishInCallback(plain);
  assert.equal(p.afterMicrotasks, 0, "a plain connection has written it already");
});

test("messages published from many separate callbacks all arrive, in order; requests are answered", async () => {
  const pub = await conn(true);
  const sub = await conn(true);
  const got: number[] = [];
  const s = sub.subscribe("t.order", {
    callback: (_e, m) => {
      got.push(Number(m.string()));
    },
  });
  await sub.flush();
  const N = 2000;
  const sent: number[] = [];
  const publish = (i: number) => {
    sent.push(i);
    pub.publish("t.order", String(i));
  };
  await Promise.all(Array.from({ length: N }, (_, i) => new Promise<void>((r) => setTimeout(() => r(publish(i)), i % 7))));
  await pub.flush();
  const deadline = Date.now() + 5000;
  while (got.length < N && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.equal(got.length, N);
  // Order per publisher is kept for messages published in one turn; across turns they leave in turn order.
  const sorted = [...got].sort((a, b) => a - b);
  assert.deepEqual(
    sorted,
    Array.from({ length: N }, (_, i) => i),
  );
  s.unsubscribe();

  sub.subscribe("t.echo", {
    callback: (_e, m) => {
      m.respond(`re:${m.string()}`);
    },
  });
  await sub.flush();
  const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => pub.request("t.echo", String(i), { timeout: 5000 })));
  assert.deepEqual(
    answers.map((m) => m.string()),
    Array.from({ length: 50 }, (_, i) => `re:${i}`),
  );
});

test("a publish larger than the pending limit is written at once", async () => {
  const nc = await conn(true);
  const big = new Uint8Array(200 * 1024); // nats.js pendingLimit is 32 KiB
  await publishInCallback(nc, "small"); // leave the buffer empty
  const r = await new Promise<number | undefined>((resolve) =>
    setTimeout(() => {
      nc.publish("t.big", "first");
      nc.publish("t.big", big);
      resolve(pendingBytes(nc));
    }, 1),
  );
  assert.equal(r, 0, "flushed inline once over the limit");
});
