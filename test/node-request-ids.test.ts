/**
 * Device reports carry the request id of what asked for the step, so a volume's history links
 * each node step to its request: the gRPC call's `x-request-id` (or the id the server made),
 * the NATS work item's id, one id per healer run. Real servers, the real agent process, block
 * volumes on real loop devices; the history is read back from the journal (`volume.history`).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { type NodeWork, nodeWorkSubjects } from "@csi/contracts";
import { blockCap, type DeviceReportEvent, loopsUnder, MiB, NodeStack, type PublishedVolume, whyNoDevices } from "@csi/testkit";
import { Metadata } from "@grpc/grpc-js";
import { jetstream } from "@nats-io/jetstream";

const skip = whyNoDevices();
let s: NodeStack;

const withRequestId = (id: string) => {
  const md = new Metadata();
  md.set("x-request-id", id);
  return md;
};
const stateVia = (reports: DeviceReportEvent[]) => reports.map((r) => `${r.state}/${r.via}`);
const ofRequest = (id: string) => (reports: DeviceReportEvent[]) => reports.filter((r) => r.requestId === id);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe("device reports carry the request id of the step that caused them", { skip }, () => {
  before(async () => {
    s = await NodeStack.start();
  });
  after(async () => {
    await s?.stop();
  });

  const blockVolume = async (name: string) => {
    const v = await s.createAndPublish(name, blockCap(), 8 * MiB);
    return { ...v, staging: s.kubelet("plugins", "staging", v.uuid) };
  };
  const stage = (v: PublishedVolume & { staging: string }, md?: Metadata) =>
    s.node.NodeStageVolume({ volume_id: v.id, staging_target_path: v.staging, volume_capability: blockCap(), publish_context: v.ctx }, md);
  const unstage = (v: PublishedVolume & { staging: string }, md?: Metadata) =>
    s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: v.staging }, md);

  test("gRPC: a stage with x-request-id is 'attached' and 'staged' with that id; the unstage's reports carry its own", async () => {
    const v = await blockVolume("pvc-rid-grpc");
    const stageId = `stage-${randomUUID()}`;
    const unstageId = `unstage-${randomUUID()}`;
    await stage(v, withRequestId(stageId));
    await unstage(v, withRequestId(unstageId));
    const reports = await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "detached"));
    assert.deepEqual(stateVia(ofRequest(stageId)(reports)), ["attached/grpc", "staged/grpc"]);
    assert.deepEqual(stateVia(ofRequest(unstageId)(reports)), ["unstaged/grpc", "detached/grpc"]);
  });

  test("gRPC: a call without x-request-id, or with one no report could carry, gets an id of its own", async () => {
    const plain = await blockVolume("pvc-rid-none");
    const hostile = await blockVolume("pvc-rid-long");
    const tooLong = "x".repeat(200);
    await stage(plain);
    await stage(hostile, withRequestId(tooLong));
    for (const v of [plain, hostile]) {
      const reports = await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "staged"));
      assert.deepEqual(stateVia(reports), ["attached/grpc", "staged/grpc"], "the reports arrive");
      assert.equal(new Set(reports.map((r) => r.requestId)).size, 1, "one id for the call's two reports");
      assert.match(reports[0]?.requestId ?? "", UUID);
      await unstage(v);
    }
  });

  test("NATS work: the reports carry the work item's id", async () => {
    const v = await blockVolume("pvc-rid-nats");
    const js = jetstream(s.nc);
    const capability = { accessType: "block" as const, accessMode: "SINGLE_NODE_WRITER" as const };
    const send = (w: NodeWork) => js.publish(nodeWorkSubjects.forNode(s.nodeId), JSON.stringify(w), { msgID: w.id });
    const stageWork: NodeWork = {
      id: `work-${randomUUID()}`,
      nodeId: s.nodeId,
      op: "stage",
      volumeId: v.id,
      stagingPath: v.staging,
      capability,
      publishContext: v.ctx,
    };
    const unstageWork: NodeWork = { id: `work-${randomUUID()}`, nodeId: s.nodeId, op: "unstage", volumeId: v.id, stagingPath: v.staging, capability };
    await send(stageWork);
    await send(unstageWork);
    const reports = await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "detached"));
    assert.deepEqual(stateVia(ofRequest(stageWork.id)(reports)), ["attached/nats", "staged/nats"]);
    assert.deepEqual(stateVia(ofRequest(unstageWork.id)(reports)), ["unstaged/nats", "detached/nats"]);
  });

  test("one request id used again by a restarted agent: no report is taken for a duplicate of the earlier ones", async () => {
    // A fresh agent process numbers its reports from 1 again: a redelivered NATS work item (or
    // a CO that re-sends an id) must not have its reports dropped as duplicates of the first run's.
    const v = await blockVolume("pvc-rid-again");
    const id = `again-${randomUUID()}`;
    await s.restartAgent();
    await stage(v, withRequestId(id));
    await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "staged"));
    await s.restartAgent(); // nothing to heal: the volume is attached and staged as recorded
    await unstage(v, withRequestId(id));
    const reports = await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "detached"));
    assert.deepEqual(stateVia(ofRequest(id)(reports)), ["attached/grpc", "staged/grpc", "unstaged/grpc", "detached/grpc"]);
  });

  test("healer: the actions of one run share one id of their own", async () => {
    const vols = [await blockVolume("pvc-rid-heal-1"), await blockVolume("pvc-rid-heal-2")];
    const stageId = `stage-${randomUUID()}`;
    for (const v of vols) await stage(v, withRequestId(stageId));
    // The agent dies and the loop devices go behind its back: the next start re-attaches both.
    await s.restartAgent({
      kill: true,
      meanwhile: async () => {
        for (const l of await loopsUnder(s.root)) if (vols.some((v) => v.ctx.imagePath === l.backingFile)) execFileSync("losetup", ["--detach", l.device]);
      },
    });
    const healed = await Promise.all(vols.map((v) => s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "healed"))));
    const byHealer = healed.flat().filter((r) => r.via === "healer");
    assert.deepEqual(byHealer.map((r) => r.state).sort(), ["attached", "attached", "healed", "healed"]);
    const ids = new Set(byHealer.map((r) => r.requestId));
    assert.equal(ids.size, 1, `one id for the run: ${[...ids]}`);
    assert.ok(!ids.has(stageId));
    for (const v of vols) await unstage(v);
  });
});
