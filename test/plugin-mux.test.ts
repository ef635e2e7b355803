/**
 * The Swarm plugin's mux (services/controller/src/plugin/mux.ts) in front of a real controller and
 * node-agent (NodeStack: journal, controller and node-agent on real nats-server and redis-server):
 * one socket answers Identity, Controller and Node; a whole volume life through it; a refusal keeps
 * the code and message the service gave; no socket until both services answer; Probe is not ready
 * while the node-agent is down.
 * `npm run e2e` runs the same mux under Docker Swarm.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { GrpcCode } from "@csi/contracts";
import { type RunningMux, startPluginMux } from "@csi/controller/testing";
import { csiClient } from "@csi/runtime";
import { FS_MIN_BYTES, mountCap, NodeStack, whyNoDevices } from "@csi/testkit";
import { pino } from "pino";

describe("the plugin mux: one CSI socket for Identity, Controller and Node", { skip: whyNoDevices(), timeout: 180_000 }, () => {
  let s: NodeStack;
  let mux: RunningMux;
  let endpoint: string;
  before(async () => {
    s = await NodeStack.start({ nodeId: "mux-node" });
    endpoint = `unix://${path.join(s.root, "mux.sock")}`;
    mux = await startPluginMux({
      endpoint,
      controllerEndpoint: `unix://${path.join(s.root, "controller.sock")}`,
      nodeEndpoint: `unix://${path.join(s.root, "node.sock")}`,
      log: pino({ level: "silent" }),
    });
  });
  after(async () => {
    await mux?.stop();
    await s?.stop();
  });

  it("answers Identity (Probe asks both services), Controller and Node calls from the right service", async () => {
    const id = csiClient(endpoint, "Identity");
    const ctl = csiClient(endpoint, "Controller");
    const node = csiClient(endpoint, "Node");
    try {
      assert.equal((await id.Probe({})).ready?.value, true);
      const caps = (await id.GetPluginCapabilities({})).capabilities.map((c) => c.service?.type);
      assert.ok(caps.includes("CONTROLLER_SERVICE"), "the controller's plugin capabilities");
      assert.ok((await ctl.ControllerGetCapabilities({})).capabilities.length > 0);
      assert.equal((await node.NodeGetInfo({})).node_id, "mux-node", "NodeGetInfo from the node-agent");
    } finally {
      for (const c of [id, ctl, node]) c.close();
    }
  });

  it("a volume's whole life through the one socket, as Swarm drives it", async () => {
    const ctl = csiClient(endpoint, "Controller");
    const node = csiClient(endpoint, "Node");
    const cap = mountCap();
    try {
      const v = (await ctl.CreateVolume({ name: "mux-vol", volume_capabilities: [cap], capacity_range: { required_bytes: String(FS_MIN_BYTES) } })).volume;
      assert.ok(v?.volume_id);
      const ctx = (await ctl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: "mux-node", volume_capability: cap, readonly: false })).publish_context;
      const staging = s.kubelet("staged", "mux-vol");
      const target = s.kubelet("published", "mux-vol");
      await node.NodeStageVolume({ volume_id: v.volume_id, staging_target_path: staging, volume_capability: cap, publish_context: ctx });
      await node.NodePublishVolume({
        volume_id: v.volume_id,
        staging_target_path: staging,
        target_path: target,
        volume_capability: cap,
        readonly: false,
        publish_context: ctx,
      });
      await node.NodeUnpublishVolume({ volume_id: v.volume_id, target_path: target });
      await node.NodeUnstageVolume({ volume_id: v.volume_id, staging_target_path: staging });
      await ctl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "mux-node" });
      for (let i = 0; ; i++) {
        const err = await ctl.DeleteVolume({ volume_id: v.volume_id }).then(
          () => undefined,
          (e: { code: number }) => e,
        );
        if (!err) break;
        // The node's reports of letting go travel asynchronously: a delete right after may be refused once (docs/controller.md).
        assert.ok(err.code === GrpcCode.FAILED_PRECONDITION && i < 50, `DeleteVolume: ${JSON.stringify(err)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      ctl.close();
      node.close();
    }
  });

  it("a refusal keeps the service's gRPC code and message", async () => {
    const direct = csiClient(`unix://${path.join(s.root, "controller.sock")}`, "Controller");
    const viaMux = csiClient(endpoint, "Controller");
    try {
      const refused = (c: typeof direct) =>
        c.CreateVolume({ name: "", volume_capabilities: [mountCap()] }).then(
          () => assert.fail("CreateVolume without a name answered"),
          (e: { code: number; details: string }) => ({ code: e.code, details: e.details }),
        );
      const want = await refused(direct);
      assert.equal(want.code, GrpcCode.INVALID_ARGUMENT);
      assert.deepEqual(await refused(viaMux), want);
    } finally {
      direct.close();
      viaMux.close();
    }
  });

  it("binds its socket only once both services answer Probe ready (Swarm takes a failed first Probe for a plugin without a controller)", async () => {
    const socket = path.join(s.root, "early.sock");
    const started = startPluginMux({
      endpoint: `unix://${socket}`,
      controllerEndpoint: `unix://${path.join(s.root, "controller.sock")}`,
      nodeEndpoint: `unix://${path.join(s.root, "no-node-yet.sock")}`,
      log: pino({ level: "silent" }),
      readyWithinMs: 1_500,
    });
    await assert.rejects(started, /the node did not answer Probe ready within 1500 ms/);
    assert.equal(existsSync(socket), false, "no socket while a service does not answer");
  });

  it("Probe is not ready while the node-agent is down, and ready again once it is back", async () => {
    const id = csiClient(endpoint, "Identity");
    try {
      await s.restartAgent({
        meanwhile: async () => {
          const r = await id.Probe({}).then(
            (x) => x.ready?.value,
            (e: { code: number }) => e.code,
          );
          assert.ok(r === false || r === GrpcCode.UNAVAILABLE, `Probe with the node-agent down: ${r}`);
        },
      });
      // The mux's client reconnects with gRPC's backoff: UNAVAILABLE until it has, as a CO's retries see it.
      const end = Date.now() + 30_000;
      for (;;) {
        const ready = await id.Probe({}).then(
          (x) => x.ready?.value === true,
          () => false,
        );
        if (ready) break;
        assert.ok(Date.now() < end, "Probe ready again within 30 s of the node-agent's restart");
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      id.close();
    }
  });
});
