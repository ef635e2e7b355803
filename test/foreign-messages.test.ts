/**
 * Foreign and malformed messages on the queues and streams besides the event log, on a real
 * stack (nats-server, redis-server, a journal, the controller, a node-agent): garbage on the
 * device-report queue, on a node's work queue and on node registrations — bad JSON, messages off
 * their schema, a report of one node on another's subject, and JetStream API replies the server
 * wrote there because a requester named the subject as its reply — is dropped (never redelivered),
 * logged and counted (`csi_messages_dropped_total`), and every consumer goes on: a real report
 * after the garbage is appended, real work after it is done, the node's registration is read
 * again after its next heartbeat, and the readers of registrations (the controller, csictl
 * nodes) skip what is not one.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { type DeviceReport, NODES_STREAM, nodeQueues, nodeSubjects, nodeWorkStream, nodeWorkSubjects, subjects } from "@csi/contracts";
import { nodeRegistration } from "@csi/runtime";
import { CLUSTER, NodeStack, runCsictl, scrape } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

let s: NodeStack;
before(async () => {
  s = await NodeStack.start();
});
after(async () => {
  await s?.stop();
});

/** The value of `csi_messages_dropped_total` for `source` (and `reason`) at a service. */
async function dropped(url: string | undefined, source: string, reason?: string): Promise<number> {
  return (await scrape(url))
    .filter((x) => x.name === "csi_messages_dropped_total" && x.labels.source === source && (!reason || x.labels.reason === reason))
    .reduce((n, x) => n + x.value, 0);
}

/** Waits (polling the condition, bounded) until `check` holds. */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; !(await check()); i++) {
    assert.ok(i < 1000, `timed out waiting until ${what}`);
    await sleep(10);
  }
}

/** A JetStream API request whose reply subject is `subject`: the server writes its answer there. */
const jetstreamReplyOnto = (subject: string) => s.nc.publish("$JS.API.INFO", "", { reply: subject });

const report = (nodeId: string, uuid: string, requestId: string): DeviceReport => ({
  requestId,
  uuid,
  nodeId,
  state: "staged",
  via: "grpc",
  at: new Date().toISOString(),
  path: "/x",
});

test("the device-report queue: garbage is dropped and counted, and a real report after it is still appended", async () => {
  const js = jetstream(s.nc);
  // A volume this node has business with (its claim): the journal records only such reports.
  const uuid = (await s.createAndPublish("pvc-report-garbage", { access_mode: { mode: "SINGLE_NODE_WRITER" }, block: {} }, 8 * 1024 * 1024)).uuid;
  const subject = subjects.reports(CLUSTER, s.nodeId, uuid);
  await js.publish(subject, "{oops");
  await js.publish(subject, JSON.stringify({ requestId: "r", uuid, state: "exploded" }));
  jetstreamReplyOnto(subject);
  // A valid report of another node on this node's subject: refused (a node cannot pass off another's).
  await js.publish(subject, JSON.stringify(report("node-b", uuid, "impostor")));
  await js.publish(subject, JSON.stringify(report(s.nodeId, uuid, "after-garbage")));

  await until("the real report is in the volume's history", async () =>
    (await s.journal.call(CLUSTER, "volume.history", { uuid })).events.some((e) => e.event.requestId === "after-garbage"),
  );
  const history = await s.journal.call(CLUSTER, "volume.history", { uuid });
  assert.deepEqual(
    history.events.filter((e) => e.event.type === "DeviceStateReported").map((e) => e.event.requestId),
    ["after-garbage"],
    "only the real report became an event",
  );
  const journalUrl = s.metricsUrls().journal;
  assert.equal(await dropped(journalUrl, "reports", "malformed"), 3, "bad JSON, off its schema, a JetStream reply");
  assert.equal(await dropped(journalUrl, "reports", "refused"), 1, "another node's report on this node's subject");
  const q = nodeQueues.reports(CLUSTER);
  const info = await (await jetstreamManager(s.nc)).consumers.info(q.stream, q.consumer);
  assert.deepEqual([info.num_pending, info.num_ack_pending], [0, 0], "nothing left to redeliver");
});

test("a node's work queue: garbage is dropped and counted, and real work after it is done", async () => {
  const js = jetstream(s.nc);
  const subject = nodeWorkSubjects.forNode(s.nodeId);
  await js.publish(subject, "{oops");
  await js.publish(subject, JSON.stringify({ id: "w-1", op: "explode", volumeId: "x" }));
  await js.publish(subject, JSON.stringify({ id: "w-2", op: "stage" })); // fields missing
  jetstreamReplyOnto(subject);
  const volumeId = `0001-0002-${CLUSTER}-0000000000000001-${randomUUID()}`;
  await s.work({ id: "w-after", op: "limits", volumeId, mutableParameters: {}, seq: 1 } as never);

  const agentUrl = s.metricsUrls().agent;
  await until("the agent dropped the four", async () => (await dropped(agentUrl, "node-work")) >= 4);
  assert.equal(await dropped(agentUrl, "node-work", "malformed"), 4);
  const jsm = await jetstreamManager(s.nc);
  await until("the work queue is empty", async () => (await jsm.streams.info(nodeWorkStream(s.nodeId))).state.messages === 0);
  const info = await jsm.consumers.info(nodeWorkStream(s.nodeId), nodeWorkSubjects.consumer(s.nodeId));
  assert.deepEqual([info.num_pending, info.num_ack_pending], [0, 0], "the real work was done and acknowledged, nothing redelivered");
  await s.agent.untilLog((l) => l.includes("malformed message dropped") && l.includes(subject), "the dropped message");
});

test("node registrations: what is not a registration of its subject's node is skipped by every reader and counted", async () => {
  const js = jetstream(s.nc);
  const jsm = await jetstreamManager(s.nc);
  const journalUrl = s.metricsUrls().journal;
  const before = await dropped(journalUrl, "registrations");
  await js.publish(nodeSubjects.registration("node-z"), "{oops");
  const impostor = { nodeId: "node-y", maxVolumes: 0, topology: {}, capabilities: [], version: "x", time: new Date().toISOString(), heartbeatMs: 1000 };
  await js.publish(nodeSubjects.registration("node-z"), JSON.stringify(impostor)); // node-y's registration on node-z's subject
  jetstreamReplyOnto(nodeSubjects.registration("node-x"));
  // Garbage on the live node's own subject replaces its last registration until its next heartbeat.
  const { seq: garbageSeq } = await js.publish(nodeSubjects.registration(s.nodeId), "{oops");

  await until("the journal counted the four", async () => (await dropped(journalUrl, "registrations")) >= before + 4);
  assert.equal(await dropped(journalUrl, "registrations", "malformed"), before + 4);
  for (const nodeId of ["node-z", "node-y", "node-x"]) assert.equal(await nodeRegistration(jsm, nodeId), undefined, `${nodeId}: none, not an error`);
  await until("the node's next heartbeat replaced the garbage", async () => {
    const last = await jsm.streams.getMessage(NODES_STREAM, { last_by_subj: nodeSubjects.registration(s.nodeId) });
    return (last?.seq ?? 0) > garbageSeq;
  });
  assert.equal((await nodeRegistration(jsm, s.nodeId))?.nodeId, s.nodeId);

  const r = await runCsictl(["--json", "nodes"], { NATS_URL: s.env.nats.url, RUN_DIR: s.root });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(
    (JSON.parse(r.stdout) as { items: { nodeId: string }[] }).items.map((n) => n.nodeId),
    [s.nodeId],
    "only the real node; the garbage is skipped",
  );

  // The controller reads registrations too: publishing to the node still works.
  const v = await s.createAndPublish(`pvc-${randomUUID().slice(0, 6)}`, { access_mode: { mode: "SINGLE_NODE_WRITER" }, block: {} }, 4 * 1024 * 1024);
  assert.ok(v.ctx.imagePath);
});
