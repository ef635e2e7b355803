/**
 * The journal's NATS client against a real nats-server: a caller that goes away stops the wait
 * at once, and a cluster with no journal is Unavailable.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { JournalClient } from "@csi/runtime";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { type LocalServer, startServer } from "../scripts/lib/local-servers.js";
import { tempDir } from "./support/servers.js";

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
