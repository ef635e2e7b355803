/**
 * In use means in use (docs/journal.md): a volume a node holds — by its own device reports — is
 * not deleted, whatever its claims say. The sequence Docker Swarm sends (a known swarmkit bug):
 * NodeStage, NodePublish, NodeUnpublish, ControllerUnpublish, DeleteVolume — never
 * NodeUnstageVolume. Real journal, controller and node-agent, real loop devices and mounts.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { GrpcCode, holdingKey, NODES_STREAM, nodeSubjects } from "@csi/contracts";
import { findByBackingFile, isMountPoint } from "@csi/node-agent/testing";
import { lastMessageOf } from "@csi/runtime";
import { codeOf, FS_MIN_BYTES, mountCap, NodeStack, whyNoDevices } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";

/** Until `probe` is true (each try after the event it waits for had its chance: a report's append), at most `tries` times. */
async function eventually(what: string, probe: () => Promise<boolean>, tries = 300): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${what}: not after ${tries} tries`);
}

describe("a volume a node holds is not deleted (the Swarm sequence)", { skip: whyNoDevices(), timeout: 180_000 }, () => {
  let s: NodeStack;
  before(async () => {
    s = await NodeStack.start();
  });
  after(async () => {
    await s?.stop();
  });

  /** Create, ControllerPublish, NodeStage, NodePublish: as a CO runs a task that uses the volume. */
  async function mounted(name: string) {
    const cap = mountCap();
    const v = await s.createAndPublish(name, cap, FS_MIN_BYTES);
    const staging = s.kubelet("staging", name);
    const target = s.kubelet("pods", name, "mount");
    await s.node.NodeStageVolume({ volume_id: v.id, publish_context: v.ctx, staging_target_path: staging, volume_capability: cap });
    await s.node.NodePublishVolume({
      volume_id: v.id,
      publish_context: v.ctx,
      staging_target_path: staging,
      target_path: target,
      volume_capability: cap,
      readonly: false,
    });
    return { v, staging, target };
  }

  /** mounted(), then NodeUnpublish: as Swarm ends a service's task. */
  async function swarmUntilUnpublish(name: string) {
    const { v, staging, target } = await mounted(name);
    await s.node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
    // The node's reports are appended asynchronously: wait until its "staged" is in the history.
    await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "unpublished"));
    return { v, staging, image: v.ctx.imagePath as string };
  }

  it("DeleteVolume after ControllerUnpublish with the volume still staged: FAILED_PRECONDITION naming the node and the staging path; a late NodeUnstageVolume detaches; then the delete goes", async () => {
    // The agent is stopped before the ControllerUnpublish: the node cannot let go by itself meanwhile.
    const { v, staging, image } = await swarmUntilUnpublish("swarm-late");
    await s.restartAgent({
      meanwhile: async () => {
        await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
        const err = await s.ctrl.DeleteVolume({ volume_id: v.id }).then(
          () => undefined,
          (e: { code: number; details: string }) => e,
        );
        assert.equal(err?.code, GrpcCode.FAILED_PRECONDITION, "refused while the node has it staged");
        assert.match(err?.details ?? "", new RegExp(`node ${s.nodeId} has it staged at ${staging.replace(/[/.]/g, "\\$&")}`));
        assert.ok(existsSync(image), "the image is still there");
      },
    });
    // Back: the node lets go (the unstage the controller queued, or this late one: both are idempotent).
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    assert.equal(await findByBackingFile(image, { evenDeleted: true }), undefined, "no loop device left on the image");
    assert.equal(await isMountPoint(staging), false, "the staging path is not mounted");
    await eventually("DeleteVolume once the node's reports say it let go", async () => (await codeOf(s.ctrl.DeleteVolume({ volume_id: v.id }))) === 0);
    assert.equal(existsSync(image), false, "the image deleted once nothing held it");
  });

  it("without any NodeUnstageVolume: ControllerUnpublish has the node let go by itself (node work), and DeleteVolume then succeeds with nothing left attached or mounted", async () => {
    const { v, staging, image } = await swarmUntilUnpublish("swarm-never");
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    await eventually("the node unstaged and detached it by itself", async () => (await findByBackingFile(image, { evenDeleted: true })) === undefined);
    const reports = await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "detached"));
    const last = reports.slice(-2).map((r) => `${r.state} via ${r.via}`);
    assert.deepEqual(last, ["unstaged via nats", "detached via nats"], "the node's own reports of letting go");
    assert.equal(await isMountPoint(staging), false);
    await eventually("DeleteVolume", async () => (await codeOf(s.ctrl.DeleteVolume({ volume_id: v.id }))) === 0);
    assert.equal(existsSync(image), false);
  });

  it("a let-go that comes after the node holds a claim again is stale: the new staging stays", async () => {
    const { v, staging, target } = await mounted("swarm-again");
    await s.node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
    // Staged, no target, and this node holds its claim (as after the CO published it here anew): an unstage asked now is refused.
    await s.work({
      id: `letgo-${v.uuid}-stale`,
      op: "unstage",
      afterRelease: true,
      volumeId: v.id,
      stagingPath: staging,
      capability: { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" },
    });
    assert.equal(await isMountPoint(staging), true, "the staging stays mounted");
    assert.notEqual(await findByBackingFile(v.ctx.imagePath as string, { evenDeleted: true }), undefined, "the loop device stays attached");
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    await eventually("DeleteVolume", async () => (await codeOf(s.ctrl.DeleteVolume({ volume_id: v.id }))) === 0);
  });

  it("a target still published stays: asked to let go, the node refuses by its own state and keeps the pod's mount; DeleteVolume stays refused", async () => {
    const { v, staging, target } = await mounted("swarm-mounted");
    await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "published"));
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    assert.equal(await codeOf(s.ctrl.DeleteVolume({ volume_id: v.id })), GrpcCode.FAILED_PRECONDITION);
    assert.equal(await isMountPoint(target), true, "the pod's mount is left alone");
    // The CO's own steps, late: then it goes.
    await s.node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    await eventually("DeleteVolume", async () => (await codeOf(s.ctrl.DeleteVolume({ volume_id: v.id }))) === 0);
  });
});

describe("the node says at once what it holds", { skip: whyNoDevices(), timeout: 180_000 }, () => {
  let s: NodeStack;
  before(async () => {
    // A heartbeat far longer than the test: any change of the registration is the node's own re-send.
    s = await NodeStack.start({ agentEnv: { HEARTBEAT_MS: "3600000" } });
  });
  after(async () => {
    await s?.stop();
  });

  /** What the node's last registration says it holds. */
  const holding = async () => {
    const m = await lastMessageOf(jetstreamManager(s.nc), NODES_STREAM, nodeSubjects.registration(s.nodeId));
    return (m?.json() as { holding?: string[] } | undefined)?.holding ?? [];
  };

  it("its registration lists a volume once NodeStageVolume answers and no longer once NodeUnstageVolume does; the delete right after goes", async () => {
    const cap = mountCap();
    const v = await s.createAndPublish("pvc-announced", cap, FS_MIN_BYTES);
    const staging = s.kubelet("staging", "pvc-announced");
    const key = holdingKey("c1", v.uuid);
    assert.ok(!(await holding()).includes(key), "not held before");
    await s.node.NodeStageVolume({ volume_id: v.id, publish_context: v.ctx, staging_target_path: staging, volume_capability: cap });
    assert.ok((await holding()).includes(key), "held as soon as NodeStageVolume answered");
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    assert.ok(!(await holding()).includes(key), "let go as soon as NodeUnstageVolume answered");
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    await s.ctrl.DeleteVolume({ volume_id: v.id }); // the registration is newer than the node's last reports: it let go
  });
});
