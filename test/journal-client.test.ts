/**
 * The journal's NATS client against a real nats-server: a caller that goes away stops the wait
 * at once, a cluster with no journal is Unavailable, and failover: a command whose replica goes
 * silent is sent again to another one; a replica that beats is waited for (stand-in replicas
 * here speak the journal's wire protocol; test/failover.test.ts kills real journals).
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { JournalClient } from "@csi/runtime";
import { type LocalServer, startServer, tempDir } from "@csi/testkit";
import { connect, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";

let dir: string;
let nats: LocalServer;
let nc: NatsConnection;

before(async () => {
  dir = await tempDir();
  nats = await startServer("nats", path.join(dir, "nats"));
  nc = await connect({ servers: nats.url });
});
after(async () => {
  await nc?.close();
  await nats?.stop();
  await rm(dir, { recursive: true, force: true });
});

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "OK",
    (e: unknown) => (e instanceof DriverError ? e.code : String(e)),
  );

test("an aborted call stops waiting for a journal that does not answer (the timeout is 30 s)", async () => {
  nc.subscribe("csi.slow.journal.volume.get", { callback: () => {} }); // takes the request, never answers
  const client = new JournalClient(nc, 30_000);
  const ac = new AbortController();
  const started = performance.now();
  const pending = codeOf(client.call("slow", "volume.get", { uuid: "6f1c6c1e-4a4b-4c1d-9c55-0d2a3c8e9b10" }, { signal: ac.signal }));
  setTimeout(() => ac.abort(new DriverError("DeadlineExceeded", "call cancelled")), 100);
  assert.equal(await pending, "DeadlineExceeded");
  assert.ok(performance.now() - started < 5_000, "answered long before the 30 s timeout");
});

test("a cluster without a journal is Unavailable", async () => {
  const client = new JournalClient(nc, 2_000);
  assert.equal(await codeOf(client.call("nobody", "volume.get", { uuid: "6f1c6c1e-4a4b-4c1d-9c55-0d2a3c8e9b10" })), "Unavailable");
});

const UUID = "6f1c6c1e-4a4b-4c1d-9c55-0d2a3c8e9b10";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const refusal = (code: string) => JSON.stringify({ ok: false, error: { code, message: `${code} from a stand-in replica` } });

/**
 * Stand-in replicas of cluster `cluster` in its queue group. `first` takes the first request and
 * (unless it `stays`) leaves the group; then `next` (if any) joins. `sent` has every request they got.
 */
async function replicas(cluster: string, o: { first: (m: Msg) => void; next?: (m: Msg) => void; stays?: boolean }) {
  const subject = `csi.${cluster}.journal.volume.get`;
  const sent: string[] = [];
  const subs: Subscription[] = [];
  const one = nc.subscribe(subject, {
    queue: "q",
    callback: (_e, m) => {
      sent.push(m.string());
      if (!o.stays) one.unsubscribe();
      const next = o.next;
      const take = (_e2: unknown, m2: Msg) => {
        sent.push(m2.string());
        next?.(m2);
      };
      if (next && subs.length === 1) subs.push(nc.subscribe(subject, { queue: "q", callback: take }));
      o.first(m);
    },
  });
  subs.push(one);
  await nc.flush();
  return {
    sent,
    close: () => {
      for (const s of subs) s.unsubscribe();
    },
  };
}

/** Beats to `m`'s inbox every 250 ms for `ms`, as a working journal replica does. */
async function beatFor(m: Msg, ms: number) {
  for (let t = 0; t < ms; t += 250) {
    m.respond(new Uint8Array(0));
    await sleep(250);
  }
}

test("a command whose replica dies is sent again and answered by another replica, long before the timeout", async () => {
  const r = await replicas("fo1", {
    first: () => {}, // takes the command and dies: no beat, no reply
    next: (m) => m.respond(refusal("NotFound")),
  });
  try {
    const client = new JournalClient(nc, 10_000);
    const started = performance.now();
    assert.equal(await codeOf(client.call("fo1", "volume.get", { uuid: UUID })), "NotFound", "the other replica's answer");
    const ms = performance.now() - started;
    assert.ok(ms < 5_000, `answered after ${Math.round(ms)} ms`);
    assert.equal(r.sent.length, 2, "sent twice");
    // The same request (its request id included), marked as sent again: a journal runs a resend
    // only if no run of it was answered (services/journal/src/commands/run-served.ts).
    assert.deepEqual(JSON.parse(r.sent[1] as string), { ...JSON.parse(r.sent[0] as string), resend: true }, "the same request, marked a resend");
    assert.equal(JSON.parse(r.sent[0] as string).resend, undefined, "the first send is not a resend");
  } finally {
    r.close();
  }
});

test("a replica that beats is waited for, however long it works: the command is not sent again", async () => {
  const r = await replicas("fo2", { first: (m) => void beatFor(m, 2_500).then(() => m.respond(refusal("NotFound"))), stays: true });
  try {
    const client = new JournalClient(nc, 10_000);
    assert.equal(await codeOf(client.call("fo2", "volume.get", { uuid: UUID })), "NotFound");
    assert.equal(r.sent.length, 1, "sent once");
  } finally {
    r.close();
  }
});

test("a resend that finds no other replica is Unavailable at once", async () => {
  const r = await replicas("fo3", { first: () => {} });
  try {
    const client = new JournalClient(nc, 10_000);
    const started = performance.now();
    assert.equal(await codeOf(client.call("fo3", "volume.get", { uuid: UUID })), "Unavailable");
    assert.ok(performance.now() - started < 5_000, "well before the timeout");
  } finally {
    r.close();
  }
});

test("an Aborted from the resend waits for the first replica when it turns out alive (it holds the lock)", async () => {
  const r = await replicas("fo4", {
    first: (m) => void sleep(1_500).then(() => beatFor(m, 1_500).then(() => m.respond(refusal("NotFound")))), // stalls, then carries on
    next: (m) => void sleep(2_000).then(() => m.respond(refusal("Aborted"))), // waited for the lock, in vain
  });
  try {
    const client = new JournalClient(nc, 10_000, { silenceMs: 1_000 }); // the timings above are made for a 1 s watchdog
    assert.equal(await codeOf(client.call("fo4", "volume.get", { uuid: UUID })), "NotFound", "the first replica's answer");
    assert.equal(r.sent.length, 2);
  } finally {
    r.close();
  }
});

test("quietMs: a replica that takes commands and never shows a sign of life (frozen) is Unavailable after quietMs; one that beats is waited for", async () => {
  const frozen = await replicas("q1", { first: () => {}, stays: true }); // keeps taking every resend, answers nothing
  const working = await replicas("q2", { first: (m) => void beatFor(m, 1_500).then(() => m.respond(refusal("NotFound"))), stays: true });
  try {
    const client = new JournalClient(nc, 30_000);
    const started = performance.now();
    assert.equal(await codeOf(client.call("q1", "volume.get", { uuid: UUID }, { quietMs: 600 })), "Unavailable");
    const ms = performance.now() - started;
    assert.ok(ms >= 550 && ms < 5_000, `Unavailable after ${Math.round(ms)} ms, not at the 30 s timeout`);
    assert.equal(await codeOf(client.call("q2", "volume.get", { uuid: UUID }, { quietMs: 600 })), "NotFound", "beats are signs of life");
  } finally {
    frozen.close();
    working.close();
  }
});
