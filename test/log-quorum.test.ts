/**
 * The log's end is asked only of a stream leader in touch with a quorum of its replicas
 * (JetStreamLog.info, `noQuorum`), and a journal's start waits for one (JetStreamLog.answers).
 *
 * A 3-node cluster (scripts/lib/ha-servers.ts), the journal's log stream at 3 replicas. Both
 * followers are SIGKILLed: the leader goes on answering its stream's info for seconds (until Raft
 * makes it step down), with the stream as it was and its replicas silent. Through that window the
 * raw stream info still has a leader; info() must answer UNAVAILABLE, and the start's wait must
 * not end, until the followers run again.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError, subjects } from "@csi/contracts";
import { JetStreamLog } from "@csi/journal/log";
import { type LocalServer, tempDir } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startJetStreamCluster, streamHealedOf, streamLeaderOf, until } from "../scripts/lib/ha-servers.js";

const CLUSTER = "quorum";
const STREAM = subjects.streamName(CLUSTER);
/** A replica silent this long is out of touch (REPLICA_SILENT_NS in the log is 3 s). */
const SILENT_NS = 3_000_000_000;

let dir: string;
const nodes: LocalServer[] = [];
let nc: NatsConnection;

before(async () => {
  dir = await tempDir("csi-log-quorum-");
  await startJetStreamCluster(path.join(dir, "servers"), {}, nodes);
  nc = await connect({ servers: nodes.map((n) => n.url), maxReconnectAttempts: -1, reconnectTimeWait: 100 });
});

after(async () => {
  await nc?.close();
  await Promise.all(nodes.map((n) => n.stop()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

const unavailable = (err: unknown) => err instanceof DriverError && err.code === "Unavailable";

test("a leader out of touch with its replicas does not tell the log's end, and a start waits for a quorum", async () => {
  const log = new JetStreamLog(nc, { cluster: CLUSTER, replicas: 3 });
  await log.ensureStream();
  await log.answers();
  await streamHealedOf(nodes, STREAM);
  assert.equal((await log.info()).last, 0, "a new stream, whole: its end told");

  const leader = await streamLeaderOf(nodes, STREAM);
  const followers = nodes.filter((n) => n !== leader);
  await Promise.all(followers.map((n) => n.kill()));

  // The raw answer of the leader itself (the only node left), beside ours, until the raw one shows
  // the stale window: a leader whose replicas have both been silent past the bound.
  const raw = await connect({ servers: [leader.url], timeout: 2000 });
  const jsm = await jetstreamManager(raw, { timeout: 2000, checkAPI: false });
  let ours: unknown;
  try {
    await until("the leader answering with both replicas silent", async () => {
      const info = await jsm.streams.info(STREAM);
      const peers = info.cluster?.replicas ?? [];
      const stale = info.cluster?.leader !== undefined && peers.length === 2 && peers.every((p) => p.offline || p.active >= SILENT_NS);
      if (!stale) return false;
      ours = await log.info().then(
        (i) => i,
        (err: unknown) => err,
      );
      return true;
    });
  } finally {
    await raw.close();
  }
  assert.ok(unavailable(ours), `info() from a leader out of touch: ${ours instanceof Error ? ours.message : JSON.stringify(ours)}`);
  assert.match((ours as Error).message, /in touch with 1 of its 3 replicas|has no leader/);

  // A start now waits (told why), and ends only once the followers run again.
  const why: string[] = [];
  let restarted = false;
  const started = new JetStreamLog(nc, { cluster: CLUSTER, replicas: 3 }).answers((w) => why.push(w)).then(() => restarted);
  await until("the start told to wait twice", async () => why.length >= 2);
  restarted = true;
  await Promise.all(followers.map((n) => n.restart()));
  assert.equal(await started, true, "the start's wait ended only after the followers were restarted");
  assert.ok(
    why.every((w) => /event log/.test(w)),
    why.join("; "),
  );
  await log.answers();
  assert.equal((await log.info()).last, 0);
});
