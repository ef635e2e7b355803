/**
 * The node-agent end to end, as root, with real loop devices and mounts: the CSI Node RPCs
 * driven over its gRPC socket (after the controller created and published the volume), the
 * healer after SIGKILL, durable NATS work, and the device-state history in the journal.
 * Whatever happens, `after` unmounts and detaches everything under the test's directory.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync } from "node:fs";
import { open, readFile, realpath, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type AccessMode, decomposeVolumeId, type NodeWork, nodeWorkStream, nodeWorkSubjects } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import {
  canResizeExt4Online,
  cleanupUnder,
  hasXfs,
  loopsUnder,
  mountsLeftUnder,
  mountsOf,
  releaseUnder,
  type ServiceProcess,
  SharedProcess,
  spawnService,
  startTestServers,
  type TestServers,
  whyNoDevices,
  writeClustersFile,
} from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const skip = whyNoDevices();
const MiB = 1024 * 1024;
const NODE = "node-a";
let env: TestServers;
let root = "";
let base: Record<string, string> = {};
let nodeSock = "";
let ctrl: CsiClient<"Controller">;
let node: CsiClient<"Node">;
let nc: NatsConnection;
let journal: JournalClient;
let controllerProc: ServiceProcess | undefined;

const fsType = hasXfs ? "xfs" : "ext4";
const mountCap = (mode: AccessMode = "SINGLE_NODE_WRITER", fs = fsType) => ({ access_mode: { mode }, mount: { fs_type: fs, mount_flags: [] } });
const blockCap = (mode: AccessMode = "SINGLE_NODE_WRITER") => ({ access_mode: { mode }, block: {} });
const code = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );
/** A path under the fake kubelet directory whose parent exists (the CO creates it; the agent only the last component). */
const kubelet = (...parts: string[]) => {
  const p = path.join(root, "kubelet", ...parts);
  mkdirSync(path.dirname(p), { recursive: true });
  return p;
};

const stateDir = () => path.join(root, "node-state");
async function startAgent(extra: Record<string, string> = {}) {
  const p = await spawnService(
    "node-agent",
    { ...base, NODE_STATE_DIR: stateDir(), HEARTBEAT_MS: "1000", ...extra },
    { args: ["--endpoint", nodeSock, "--nodeid", NODE] },
  );
  node?.close();
  node = csiClient(nodeSock, "Node");
  return p;
}
/** The node-agent and the journal every test can count on; a test that kills or stops one does it through `whileDown`. */
const agent = new SharedProcess(startAgent);
const journalProc = new SharedProcess(() => spawnService("journal", { ...base, CLUSTER_ID: "c1" }));

/**
 * A test on the machine. A passing test has taken down what it set up, through the agent (part of
 * what it checks). A failing one must not hand anything to the next test, so then the agent is
 * stopped, its pending NATS work dropped, every mount and loop device under the test directory
 * taken down, the agent's state file (from which the healer would bring them back) removed, and a
 * fresh agent started.
 */
async function onMachine(body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    await agent
      .whileDown(async () => {
        await (await jetstreamManager(nc)).streams.purge(nodeWorkStream(NODE)).catch(() => {});
        await releaseUnder(root);
        await rm(stateDir(), { recursive: true, force: true });
      })
      .catch((e) => console.error("# cleanup after a failed test:", e));
    throw err;
  }
}

async function createAndPublish(name: string, cap: object, size: number) {
  const v = (await ctrl.CreateVolume({ name, volume_capabilities: [cap], capacity_range: { required_bytes: String(size) } })).volume!;
  const pub = await ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: NODE, volume_capability: cap, readonly: false });
  return { id: v.volume_id as string, uuid: decomposeVolumeId(v.volume_id).uuid, ctx: pub.publish_context as Record<string, string> };
}

/** The device-state reports in a volume's history, waiting until `want` states are all there. */
async function deviceStates(uuid: string, want: string[] = [], via?: string): Promise<string[]> {
  for (let i = 0; ; i++) {
    const h = await journal.call("c1", "volume.history", { uuid });
    const states = h.events.filter((e) => e.event.type === "DeviceStateReported" && (!via || e.event.via === via)).map((e) => String(e.event.state));
    if (want.every((w) => states.includes(w)) || i > 50) return states;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const isMounted = async (p: string) => (await mountsLeftUnder(root)).some((m) => m.mountPoint === p);
const dfBytes = (p: string) => Number(execFileSync("df", ["-B1", "--output=size", p], { encoding: "utf8" }).split("\n")[1]);

describe("node-agent on real devices", { skip }, () => {
  before(async () => {
    env = await startTestServers();
    root = await realpath(env.dir);
    const clustersFile = await writeClustersFile(root, [{ clusterID: "c1", pools: ["default"] }]);
    base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: root };
    await journalProc.start();
    const ctrlSock = `unix://${path.join(root, "controller.sock")}`;
    controllerProc = await spawnService("controller", base, { args: ["--endpoint", ctrlSock] });
    ctrl = csiClient(ctrlSock, "Controller");
    nodeSock = `unix://${path.join(root, "node.sock")}`;
    await agent.start();
    nc = await connect({ servers: env.nats.url });
    journal = new JournalClient(nc, 10_000);
  });

  after(async () => {
    ctrl?.close();
    node?.close();
    await agent.stop();
    await Promise.all([journalProc.stop(), controllerProc?.stop()]);
    await nc?.close();
    await env?.stopServers(); // their data is under root: stopped before it is removed
    if (root) await cleanupUnder(root); // unmount + detach before anything is removed
    await env?.dispose();
  });

  test("full lifecycle through gRPC, every step twice, with reports in the history", () =>
    onMachine(async () => {
      const size = fsType === "xfs" ? 320 * MiB : 64 * MiB;
      const v = await createAndPublish("pvc-life", mountCap(), size);
      const staging = kubelet("plugins", "staging", v.uuid);
      const [a, b, ro] = ["a", "b", "ro"].map((p) => kubelet("pods", p, "volumes", "mount"));
      const stage = () => node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: mountCap(), publish_context: v.ctx });
      await stage();
      await stage();
      assert.ok(await isMounted(staging), "staged filesystem is mounted");
      assert.equal(
        await code(
          node.NodeStageVolume({
            volume_id: v.id,
            staging_target_path: staging,
            volume_capability: mountCap("SINGLE_NODE_READER_ONLY"),
            publish_context: v.ctx,
          }),
        ),
        6,
      );

      const publish = (target: string, readonly = false) =>
        node.NodePublishVolume({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: mountCap(), readonly });
      for (const t of [a, a, b, b]) await publish(t as string);
      await publish(ro as string, true);
      await writeFile(path.join(a as string, "hello.txt"), "written through target a");
      assert.equal(await readFile(path.join(b as string, "hello.txt"), "utf8"), "written through target a");
      await assert.rejects(writeFile(path.join(ro as string, "nope.txt"), "x"), /EROFS|read-only/);
      assert.equal(await code(publish(ro as string, false)), 6, "same target, read-only mismatch");

      for (let i = 0; i < 2; i++) await node.NodeUnpublishVolume({ volume_id: v.id, target_path: b });
      assert.ok(!existsSync(b as string), "target b removed");
      await node.NodeUnpublishVolume({ volume_id: v.id, target_path: ro });

      const stats = await node.NodeGetVolumeStats({ volume_id: v.id, volume_path: a });
      const bytes = stats.usage.find((u: { unit: string }) => u.unit === "BYTES");
      assert.ok(Number(bytes?.total) > 0 && Number(bytes?.used) > 0);
      assert.ok(stats.usage.some((u: { unit: string }) => u.unit === "INODES"));
      assert.equal(stats.volume_condition?.abnormal, false);
      assert.equal(await code(node.NodeGetVolumeStats({ volume_id: v.id, volume_path: b })), 5, "path where the volume is not");
      assert.equal(await code(node.NodeGetVolumeStats({ volume_id: "some-vol-id", volume_path: a })), 5);

      const before = dfBytes(a as string);
      const grown = size + 192 * MiB;
      for (let i = 0; i < 2; i++) {
        const r = await ctrl.ControllerExpandVolume({ volume_id: v.id, capacity_range: { required_bytes: String(grown) }, volume_capability: mountCap() });
        assert.equal(r.capacity_bytes, String(grown));
      }
      if (fsType === "ext4" && !canResizeExt4Online) {
        assert.equal(await code(node.NodeExpandVolume({ volume_id: v.id, volume_path: a })), 9, "online ext4 grow needs CAP_SYS_RESOURCE");
      } else {
        for (let i = 0; i < 2; i++) {
          const r = await node.NodeExpandVolume({ volume_id: v.id, volume_path: a, capacity_range: { required_bytes: String(grown) } });
          assert.equal(r.capacity_bytes, String(grown));
        }
        assert.ok(dfBytes(a as string) > before + 150 * MiB, `df agrees: ${before} → ${dfBytes(a as string)}`);
      }

      assert.equal(await code(node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging })), 9, "unstage while published");
      await node.NodeUnpublishVolume({ volume_id: v.id, target_path: a });
      for (let i = 0; i < 2; i++) await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
      assert.ok(!(await isMounted(staging)));
      assert.deepEqual(await loopsUnder(root), [], "device detached");
      await ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: NODE });
      await ctrl.DeleteVolume({ volume_id: v.id });

      const states = await deviceStates(v.uuid, ["attached", "staged", "published", "unpublished", "unstaged", "detached"]);
      for (const s of ["attached", "staged", "published", "unpublished", "unstaged", "detached"]) assert.ok(states.includes(s), `${s} in ${states}`);
    }));

  test("block volume: the device itself is published onto a file", () =>
    onMachine(async () => {
      const v = await createAndPublish("pvc-block", blockCap(), 16 * MiB);
      const staging = kubelet("plugins", "staging", v.uuid);
      const target = kubelet("pods", "blk", "volumeDevices", "dev");
      await node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
      for (let i = 0; i < 2; i++)
        await node.NodePublishVolume({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: blockCap(), readonly: false });
      const fh = await open(target, "r+");
      const pattern = Buffer.from("raw block bytes");
      await fh.write(pattern, 0, pattern.length, 4 * MiB);
      await fh.close();
      const img = await open(v.ctx.imagePath as string, "r");
      const back = Buffer.alloc(pattern.length);
      await img.read(back, 0, back.length, 4 * MiB);
      await img.close();
      assert.deepEqual(back, pattern, "bytes written through the target are in the image");
      const st = await node.NodeGetVolumeStats({ volume_id: v.id, volume_path: target });
      assert.equal(st.usage[0]?.total, String(16 * MiB));
      const ex = await node.NodeExpandVolume({ volume_id: v.id, volume_path: target });
      assert.equal(ex.capacity_bytes, String(16 * MiB));
      await node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
      assert.ok(!existsSync(target));
      await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
      assert.deepEqual(await loopsUnder(root), []);
      await ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: NODE });
      await ctrl.DeleteVolume({ volume_id: v.id });
    }));

  test("bad input gets the right code and changes nothing on the machine", () =>
    onMachine(async () => {
      const loops = (await loopsUnder(root)).length;
      const mounts = await mountsOf(root); // its own: other test files mount and unmount meanwhile
      const stagingPath = kubelet("bad", "staging");
      const valid = "0001-0002-c1-0000000000000001-0bba3be9-0a1c-41db-a619-26ffea20161e";
      const cases: [string, () => Promise<unknown>, number][] = [
        ["no volume id", () => node.NodeStageVolume({ staging_target_path: stagingPath, volume_capability: mountCap() }), 3],
        ["no staging path", () => node.NodeStageVolume({ volume_id: valid, volume_capability: mountCap() }), 3],
        ["no capability", () => node.NodeStageVolume({ volume_id: valid, staging_target_path: stagingPath }), 3],
        ["unknown volume", () => node.NodeStageVolume({ volume_id: valid, staging_target_path: stagingPath, volume_capability: mountCap() }), 5],
        ["malformed volume", () => node.NodeStageVolume({ volume_id: "some-vol-id", staging_target_path: stagingPath, volume_capability: mountCap() }), 5],
        [
          "hostile image name, unknown volume",
          () =>
            node.NodeStageVolume({
              volume_id: valid,
              staging_target_path: stagingPath,
              volume_capability: mountCap(),
              publish_context: { imageName: "../../etc/passwd" },
            }),
          5,
        ],
        [
          "publish unknown volume",
          () => node.NodePublishVolume({ volume_id: valid, staging_target_path: stagingPath, target_path: kubelet("bad", "t"), volume_capability: mountCap() }),
          5,
        ],
        ["publish no target", () => node.NodePublishVolume({ volume_id: valid, staging_target_path: stagingPath, volume_capability: mountCap() }), 3],
        ["unpublish no target", () => node.NodeUnpublishVolume({ volume_id: valid }), 3],
        ["unstage no volume", () => node.NodeUnstageVolume({ staging_target_path: stagingPath }), 3],
        ["expand unknown", () => node.NodeExpandVolume({ volume_id: valid, volume_path: stagingPath }), 5],
        ["stats no path", () => node.NodeGetVolumeStats({ volume_id: valid }), 3],
      ];
      for (const [what, call, want] of cases) assert.equal(await code(call()), want, what);
      assert.ok(!existsSync(stagingPath), "no staging dir was made");
      assert.equal((await loopsUnder(root)).length, loops);
      assert.deepEqual(await mountsOf(root), mounts);
      // Unknown targets and volumes are fine to unpublish/unstage (idempotent).
      assert.equal(await code(node.NodeUnpublishVolume({ volume_id: valid, target_path: kubelet("bad", "gone") })), 0);
      assert.equal(await code(node.NodeUnstageVolume({ volume_id: valid, staging_target_path: stagingPath })), 0);
      const info = await node.NodeGetInfo({});
      assert.equal(info.node_id, NODE);
      const caps = (await node.NodeGetCapabilities({})).capabilities.map((c) => String(c.rpc?.type));
      for (const c of ["STAGE_UNSTAGE_VOLUME", "EXPAND_VOLUME", "GET_VOLUME_STATS", "VOLUME_CONDITION"]) assert.ok(caps.includes(c), c);
    }));

  test("restart after SIGKILL: the healer re-attaches and re-mounts what was lost behind its back", () =>
    onMachine(async () => {
      const v1 = await createAndPublish("pvc-heal-1", mountCap(), fsType === "xfs" ? 320 * MiB : 32 * MiB);
      const v2 = await createAndPublish("pvc-heal-2", mountCap(), fsType === "xfs" ? 320 * MiB : 32 * MiB);
      const s1 = kubelet("plugins", "staging", v1.uuid);
      const s2 = kubelet("plugins", "staging", v2.uuid);
      const t1 = kubelet("pods", "h1", "mount");
      const t1b = kubelet("pods", "h1b", "mount");
      const t2 = kubelet("pods", "h2", "mount");
      await node.NodeStageVolume({ volume_id: v1.id, staging_target_path: s1, volume_capability: mountCap(), publish_context: v1.ctx });
      await node.NodeStageVolume({ volume_id: v2.id, staging_target_path: s2, volume_capability: mountCap(), publish_context: v2.ctx });
      for (const t of [t1, t1b]) await node.NodePublishVolume({ volume_id: v1.id, staging_target_path: s1, target_path: t, volume_capability: mountCap() });
      await node.NodePublishVolume({ volume_id: v2.id, staging_target_path: s2, target_path: t2, volume_capability: mountCap() });
      await writeFile(path.join(t1, "kept.txt"), "survives the crash");

      // SIGKILL; behind its back: v1 loses every mount and its loop device; v2 loses one target.
      await agent.whileDown(async () => {
        for (const p of [t1, t1b, s1]) execFileSync("umount", [p]);
        const dev1 = (await loopsUnder(root)).find((l) => l.backingFile === v1.ctx.imagePath)?.device as string;
        execFileSync("losetup", ["-d", dev1]);
        execFileSync("umount", [t2]);
        assert.equal(
          (await loopsUnder(root)).some((l) => l.backingFile === v1.ctx.imagePath),
          false,
        );

        await agent.start();
        for (const p of [s1, t1, t1b, s2, t2]) assert.ok(await isMounted(p), `${p} mounted again`);
        assert.equal(await readFile(path.join(t1b, "kept.txt"), "utf8"), "survives the crash");
        const h1 = await deviceStates(v1.uuid, ["healed"], "healer");
        const h2 = await deviceStates(v2.uuid, ["healed"], "healer");
        assert.ok(h1.includes("healed") && h1.includes("attached"), `v1 healer reports: ${h1}`);
        assert.ok(h2.includes("healed"), `v2 healer reports: ${h2}`);
      }, "kill");

      for (const [v, s, ts] of [
        [v1, s1, [t1, t1b]],
        [v2, s2, [t2]],
      ] as const) {
        for (const t of ts) await node.NodeUnpublishVolume({ volume_id: v.id, target_path: t });
        await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: s });
      }
      assert.deepEqual(await loopsUnder(root), []);
    }));

  test("SIGKILL mid-operation (attached, not yet recorded): the healer detaches the leftover; a retry stages cleanly", () =>
    onMachine(async () => {
      const v = await createAndPublish("pvc-midop", mountCap(), fsType === "xfs" ? 320 * MiB : 32 * MiB);
      const staging = kubelet("plugins", "staging", v.uuid);
      const stage = () => node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: mountCap(), publish_context: v.ctx });
      await agent.whileDown(async (own) => {
        const dying = await own({ NODE_CRASH_AFTER: "attached" });
        assert.notEqual(await code(stage()), 0, "the call dies with the agent");
        await dying.exited;
        assert.ok(
          (await loopsUnder(root)).some((l) => l.backingFile === v.ctx.imagePath),
          "the crash left the device attached",
        );
        await agent.start();
      });
      assert.ok(!(await loopsUnder(root)).some((l) => l.backingFile === v.ctx.imagePath), "the healer detached the leftover");
      await stage();
      assert.ok(await isMounted(staging));
      await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
      assert.deepEqual(await loopsUnder(root), []);
    }));

  test("work published on NATS while the agent is down is carried out when it starts", () =>
    onMachine(async () => {
      const v = await createAndPublish("pvc-nats", mountCap(), fsType === "xfs" ? 320 * MiB : 32 * MiB);
      const staging = kubelet("plugins", "staging", v.uuid);
      const target = kubelet("pods", "nats", "mount");
      const js = jetstream(nc);
      const send = (w: Omit<NodeWork, "nodeId">) => js.publish(nodeWorkSubjects.forNode(NODE), JSON.stringify({ ...w, nodeId: NODE }), { msgID: w.id });
      const capability = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const, fsType };
      await agent.whileDown(async () => {
        const stageWork: Omit<NodeWork, "nodeId"> = { id: randomUUID(), op: "stage", volumeId: v.id, stagingPath: staging, capability, publishContext: v.ctx };
        await send(stageWork);
        await send(stageWork); // a duplicate is de-duplicated by its message id
        await send({ id: randomUUID(), op: "publish", volumeId: v.id, stagingPath: staging, targetPath: target, capability });
        await agent.start();
      });
      for (let i = 0; i < 100 && !(await isMounted(target)); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(await isMounted(target), "the work was done after the agent came back");
      const states = await deviceStates(v.uuid, ["staged", "published"], "nats");
      assert.ok(states.includes("staged") && states.includes("published"), `nats reports: ${states}`);

      await send({ id: randomUUID(), op: "unpublish", volumeId: v.id, stagingPath: staging, targetPath: target, capability });
      await send({ id: randomUUID(), op: "unstage", volumeId: v.id, stagingPath: staging, capability });
      for (let i = 0; i < 100 && (await loopsUnder(root)).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(await loopsUnder(root), []);
      // The last work is acknowledged after its step has also saved the state file: wait for the ack, not only for the detach.
      const left = async () =>
        (await (await import("@nats-io/jetstream")).jetstreamManager(nc).then((m) => m.streams.info(nodeWorkStream(NODE)))).state.messages;
      for (let i = 0; i < 50 && (await left()) > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(await left(), 0, "every piece of work was acknowledged");
    }));

  test("reports made while the journal is down reach the volume's history when it is back", () =>
    onMachine(async () => {
      const v = await createAndPublish("pvc-reports", blockCap(), 8 * MiB);
      const staging = kubelet("plugins", "staging", v.uuid);
      // The only journal is down while the device changes state, and then back.
      const states = await journalProc.whileDown(async () => {
        await node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
        await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
        await journalProc.start();
        return deviceStates(v.uuid, ["attached", "staged", "unstaged", "detached"]);
      });
      assert.deepEqual(states, ["attached", "staged", "unstaged", "detached"], "every report arrived, in order");
      await ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: NODE });
      await ctrl.DeleteVolume({ volume_id: v.id });
    }));

  test("no mount and no loop device is left behind by the agent", async () => {
    assert.deepEqual(
      (await mountsLeftUnder(root)).map((m) => m.mountPoint),
      [],
    );
    assert.deepEqual(await loopsUnder(root), []);
  });
});
