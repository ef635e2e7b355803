/**
 * A node touches only its own work and its own volumes (docs/security.md, "Node work and reports"),
 * on one account (the account layout's server-side walls are tried in test/security.test.ts):
 *  - a work item on a node's own subject that names another node is refused, counted, never executed;
 *  - the journal records a node's device report only on a volume it has business with (a claim, or
 *    something it still holds), and at most a burst and a rate of them: a flood is cut, another node's
 *    reports keep flowing;
 *  - the upgrade from the one shared work stream (CSI_NODE_WORK) loses no queued work.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { LEGACY_NODE_WORK_STREAM, nameToken, nodeQueues, nodeWorkStream, subjects } from "@csi/contracts";
import { type JournalTestEnv, journalTestEnv, NodeStack, scrape, whyNoDevices } from "@csi/testkit";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";

const MiB = 1024 * 1024;
const CLUSTER = "ni";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

/** Until `probe` holds, at most `tries` looks (each after the event it waits for had its chance). */
async function until(what: string, probe: () => Promise<boolean>, tries = 200): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${what}: not after ${tries} tries`);
}

const dropped = async (url: string | undefined, source: string, reason: string) =>
  (await scrape(url ?? ""))
    .filter((x) => x.name === "csi_messages_dropped_total" && x.labels.source === source && x.labels.reason === reason)
    .reduce((n, x) => n + x.value, 0);

describe("the agent trusts nothing it is handed", { skip: whyNoDevices() }, () => {
  let s: NodeStack;
  before(async () => {
    s = await NodeStack.start();
  });
  after(async () => {
    await s?.stop();
  });

  it("a work item on this node's subject naming another node is refused, counted, never executed", async () => {
    const v = await s.createAndPublish("pvc-not-mine", { access_mode: { mode: "SINGLE_NODE_WRITER" }, block: {} }, 8 * MiB);
    const staging = s.kubelet("staging", "not-mine");
    await s.work({
      id: `w-${randomUUID()}`,
      nodeId: "someone-else",
      op: "stage",
      volumeId: v.id,
      stagingPath: staging,
      capability: { accessType: "block", accessMode: "SINGLE_NODE_WRITER" },
      publishContext: v.ctx,
    });
    await until("the agent dropped it", async () => (await dropped(s.metricsUrls().agent, "node-work", "refused")) >= 1);
    const reports = await s.deviceReports(v.uuid, () => false);
    assert.deepEqual(reports, [], "nothing done: no report of the volume");
  });

  it("work for a volume this node holds no claim on (its journal says) is refused, counted, never executed; with the claim, the same work runs", async () => {
    const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, block: {} };
    const v = await s.createAndPublish("pvc-unclaimed", cap, 8 * MiB);
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    const before = await dropped(s.metricsUrls().agent, "node-work", "refused");
    const stage = (id: string) =>
      s.work({
        id,
        op: "stage",
        volumeId: v.id,
        stagingPath: s.kubelet("staging", "unclaimed"),
        capability: { accessType: "block", accessMode: "SINGLE_NODE_WRITER" },
        publishContext: v.ctx,
      });
    await stage(`w-${randomUUID()}`);
    await until("the agent refused it", async () => (await dropped(s.metricsUrls().agent, "node-work", "refused")) > before);
    await s.agent.untilLog((l) => l.includes("holds no claim on volume"), "the refusal, logged");
    assert.deepEqual(await s.deviceReports(v.uuid, () => false), [], "nothing done: no report of the volume");

    await s.ctrl.ControllerPublishVolume({ volume_id: v.id, node_id: s.nodeId, volume_capability: cap, readonly: false });
    await stage(`w-${randomUUID()}`);
    const reports = await s.deviceReports(v.uuid, (r) => r.some((e) => e.state === "staged"));
    assert.ok(
      reports.some((e) => e.state === "staged"),
      `claimed: staged (${reports.map((e) => e.state).join()})`,
    );
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: s.kubelet("staging", "unclaimed") });
  });
});

describe("reports within a node's own business, and its bound", () => {
  let j: JournalTestEnv;
  before(async () => {
    j = await journalTestEnv(CLUSTER);
  });
  after(async () => {
    await j?.dispose();
  });
  const report = (nodeId: string, uuid: string, n: number) => ({
    requestId: `r-${n}`,
    uuid,
    nodeId,
    state: "failed",
    reason: `report ${n}`,
    via: "grpc",
    at: new Date().toISOString(),
  });
  const history = async (uuid: string) =>
    (await j.client.call(CLUSTER, "volume.history", { uuid })).events.filter((e) => e.event.type === "DeviceStateReported");

  it("a report on a volume the node has no claim on (or that never was) is dropped; a flood past the burst is cut, another node's reports flow", async () => {
    const journal = await j.spawnJournal({ REPORT_BURST: "5", REPORT_RATE: "0.5" });
    try {
      const v = await j.client.call(CLUSTER, "volume.create", { requestId: "c", name: "pvc-reports", sizeBytes: MiB, capabilities: [cap] });
      for (const node of ["n-a", "n-b"])
        await j.client
          .call(CLUSTER, "volume.publish", {
            requestId: `p-${node}`,
            uuid: v.uuid,
            nodeId: node,
            capability: { ...cap, accessMode: "MULTI_NODE_READER_ONLY" },
            readOnly: true,
          })
          .catch(() => {});
      const js = jetstream(j.nc);
      const send = (nodeId: string, uuid: string, n: number) =>
        js.publish(subjects.reports(CLUSTER, nodeId, uuid), JSON.stringify(report(nodeId, uuid, n)), { msgID: `${nodeId}-${uuid}-${n}` });
      const ghost = randomUUID();
      await send("n-a", ghost, 0); // a volume that never was
      await send("n-c", v.uuid, 0); // a node with no claim
      // A flood of 2,000 from n-a, while n-b reports and journal commands (what CSI calls become) run.
      const started = Date.now();
      const flood = (async () => {
        for (let n = 1; n <= 2000; n += 100) await Promise.all(Array.from({ length: 100 }, (_, i) => send("n-a", v.uuid, n + i)));
      })();
      const creates = Array.from({ length: 5 }, (_, i) =>
        j.client.call(CLUSTER, "volume.create", { requestId: `flood-c-${i}`, name: `pvc-during-flood-${i}`, sizeBytes: MiB, capabilities: [cap] }),
      );
      await send("n-b", v.uuid, 1);
      await flood;
      assert.equal((await Promise.all(creates)).length, 5, "every command answered during the flood");
      await until("n-b's report recorded", async () => (await history(v.uuid)).some((e) => "nodeId" in e.event && e.event.nodeId === "n-b"));
      const reportsQueue = nodeQueues.reports(CLUSTER);
      await until(
        "the flood handled",
        async () => (await (await jetstreamManager(j.nc)).consumers.info(reportsQueue.stream, reportsQueue.consumer)).num_pending === 0,
        1200,
      );
      const seconds = (Date.now() - started) / 1000;
      const got = await history(v.uuid);
      const fromA = got.filter((e) => "nodeId" in e.event && e.event.nodeId === "n-a").length;
      // A burst of 5 (the report on the ghost volume took one before it was dropped), then 0.5 a second.
      assert.ok(fromA >= 4 && fromA <= 6 + Math.ceil(0.5 * seconds), `the flood cut at its bound: ${fromA} of 2000 recorded in ${seconds} s`);
      assert.equal(got.filter((e) => "nodeId" in e.event && e.event.nodeId === "n-c").length, 0, "no claim, nothing held: dropped");
      assert.deepEqual(await history(ghost), [], "a volume that never was gets no history");
    } finally {
      await journal.stop();
    }
  });

  it("the upgrade from the one shared work stream: a journal moves every queued item into its node's own stream, then deletes the old one", async () => {
    const jsm = await jetstreamManager(j.nc);
    await jsm.streams.add({
      name: LEGACY_NODE_WORK_STREAM,
      subjects: ["csi.nodework.*"],
      storage: StorageType.File,
      retention: RetentionPolicy.Workqueue,
    });
    const js = jetstream(j.nc);
    const items = ["node-x", "node-x", "node-y"].map((node, i) => ({
      node,
      body: { id: `old-${i}`, op: "unstage", volumeId: `v${i}`, stagingPath: "/s", capability: cap },
    }));
    for (const it of items) await js.publish(`csi.nodework.${nameToken(it.node)}`, JSON.stringify(it.body), { msgID: it.body.id });
    const journal = await j.spawnJournal();
    try {
      await until(
        "the old stream gone",
        async () =>
          !(await jsm.streams.info(LEGACY_NODE_WORK_STREAM).then(
            () => true,
            () => false,
          )),
      );
      for (const [node, n] of [
        ["node-x", 2],
        ["node-y", 1],
      ] as const) {
        const info = await jsm.streams.info(nodeWorkStream(node));
        assert.equal(info.state.messages, n, `${node}'s items in its own stream`);
        const first = await jsm.streams.getMessage(nodeWorkStream(node), { seq: info.state.first_seq });
        assert.equal((first?.json() as { nodeId: string } | undefined)?.nodeId, node, "each now names its node");
      }
    } finally {
      await journal.stop();
    }
  });
});
