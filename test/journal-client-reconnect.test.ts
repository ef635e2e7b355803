/**
 * Issue 39: a command in flight when the client's NATS connection drops (its server died, or
 * closed it in lame-duck mode) is sent again as soon as the connection is back: a reply sent while
 * it was down is lost, and the attempt's silence (here a minute) is not waited for. (Where the
 * replica itself is still reconnecting, the resend finds no responder and the original attempt's
 * silence sends it again, as before.) A stand-in
 * replica speaks the journal's wire protocol: it takes the first attempt and never answers it (as
 * if its reply was lost), and answers the next.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { JournalClient } from "@csi/runtime";
import { type LocalServer, startServer, tempDir } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";

let dir: string;
let nats: LocalServer;
let client: NatsConnection;
let replica: NatsConnection;

before(async () => {
  dir = await tempDir();
  nats = await startServer("nats", path.join(dir, "nats"));
  const opts = { servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 50 };
  [client, replica] = await Promise.all([connect(opts), connect(opts)]);
});
after(async () => {
  await client?.close();
  await replica?.close();
  await nats?.stop();
  await rm(dir, { recursive: true, force: true });
});

test("a command whose connection came back is sent again at once, not after its silence", { timeout: 30_000 }, async () => {
  const attempts: string[] = [];
  replica.subscribe("csi.rc.journal.volume.get", {
    callback: (_err, msg) => {
      attempts.push(msg.reply ?? "");
      if (attempts.length > 1) msg.respond(JSON.stringify({ ok: false, error: { code: "NotFound", message: "no such volume" } }));
    },
  });
  await replica.flush();
  const journal = new JournalClient(client, 25_000, { silenceMs: 60_000 });
  const call = journal.call("rc", "volume.get", { uuid: "6b131693-8210-4b03-acc4-9acebba04e87" }).then(
    () => "OK",
    (e: unknown) => (e instanceof DriverError ? e.code : String(e)),
  );
  while (attempts.length === 0) await new Promise((r) => setTimeout(r, 20));
  // The client's connection drops and comes back (nats.js's forced reconnect: what a dead node or a
  // lame-duck eviction does to it); the replica stays connected, so the resend finds it.
  await client.reconnect();
  assert.equal(await call, "NotFound", "answered by the attempt sent after the reconnect");
  assert.equal(attempts.length, 2);
});
