/**
 * ControllerModifyVolume and mutable_parameters end to end, over the controller's and the
 * node-agent's gRPC sockets with a real journal, NATS and Redis: validation before anything is
 * sent, the modification as one event in the volume's history, idempotent repeats, the values in
 * ControllerGetVolume/ListVolumes — and, as root on this machine, the limits in a cgroup's blkio
 * throttle files (or io.max) for the staged volume's loop device: set at stage, changed by a
 * modify (also one sent while the node-agent was down), removed at unstage, and biting on an
 * O_DIRECT write. The test makes its own cgroup and removes it afterwards.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, realpath, rmdir } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import { cleanupUnder, loopsUnder, type ServiceProcess, spawnService, startTestServers, type TestServers, whyNoDevices, writeClustersFile } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const MiB = 1024 * 1024;
const NODE = "node-mv";
const SANITY = { readBytesPerSecond: "1048576", writeIOPS: "100" }; // the csi-sanity mutable-parameters file
const mountCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] } };
const code = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );

/** A cgroup of the test's own where the node-agent puts its limits, and how to read them back. */
interface TestCgroup {
  dir: string;
  mode: "v1" | "v2";
  /** The device's limits as the kernel shows them (keys without a rule are absent). */
  limits(majMin: string): Promise<Record<string, string>>;
}

const V1_FILES = {
  readBytesPerSecond: "read_bps_device",
  writeBytesPerSecond: "write_bps_device",
  readIOPS: "read_iops_device",
  writeIOPS: "write_iops_device",
};
const V2_NAMES = { rbps: "readBytesPerSecond", wbps: "writeBytesPerSecond", riops: "readIOPS", wiops: "writeIOPS" } as Record<string, string>;

const V1_ROOT = "/sys/fs/cgroup/blkio";
const V2_ROOT = "/sys/fs/cgroup";
/** Which throttling this machine offers a test cgroup (decided when the file loads, so tests can be skipped). */
const cgroupMode: "v1" | "v2" | undefined = existsSync(`${V1_ROOT}/blkio.throttle.read_bps_device`)
  ? "v1"
  : existsSync(`${V2_ROOT}/cgroup.subtree_control`) && readFileSync(`${V2_ROOT}/cgroup.subtree_control`, "utf8").split(/\s+/).includes("io")
    ? "v2"
    : undefined;

async function makeTestCgroup(mode: "v1" | "v2"): Promise<TestCgroup> {
  const dir = path.join(mode === "v1" ? V1_ROOT : V2_ROOT, `csi-modify-test-${process.pid}`);
  await mkdir(dir);
  const rule = async (file: string, majMin: string) => (await readFile(path.join(dir, file), "utf8")).split("\n").find((l) => l.split(" ")[0] === majMin);
  const limits = async (majMin: string) => {
    const out: Record<string, string> = {};
    if (mode === "v1") {
      for (const [key, file] of Object.entries(V1_FILES)) {
        const line = await rule(`blkio.throttle.${file}`, majMin);
        if (line) out[key] = line.split(" ")[1] as string;
      }
      return out;
    }
    for (const part of (await rule("io.max", majMin))?.split(" ").slice(1) ?? []) {
      const [name, value] = part.split("=");
      if (name && value && value !== "max" && V2_NAMES[name]) out[V2_NAMES[name]] = value;
    }
    return out;
  };
  return { dir, mode, limits };
}

/** Poll until `check` passes (or throw its last failure after `ms`). */
async function eventually<T>(check: () => Promise<T>, ms = 10_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

let env: TestServers;
let root = "";
let base: Record<string, string> = {};
let nodeSock = "";
let agent: ServiceProcess | undefined;
let agentEnv: Record<string, string> = {};
let ctrl: CsiClient<"Controller">;
let node: CsiClient<"Node">;
let nc: NatsConnection;
let journal: JournalClient;
let cgroup: TestCgroup | undefined;
const procs: ServiceProcess[] = [];
const devices = whyNoDevices();

async function startAgent(extra: Record<string, string> = {}) {
  agent = await spawnService(
    "node-agent",
    { ...base, NODE_STATE_DIR: path.join(root, "node-state"), HEARTBEAT_MS: "1000", ...agentEnv, ...extra },
    { args: ["--endpoint", nodeSock, "--nodeid", NODE] },
  );
  node?.close();
  node = csiClient(nodeSock, "Node");
}

const create = (name: string, more: Record<string, unknown> = {}) =>
  ctrl.CreateVolume({ name, volume_capabilities: [mountCap], capacity_range: { required_bytes: String(64 * MiB) }, ...more });
const modify = (volume_id: string, mutable_parameters: Record<string, string>) => ctrl.ControllerModifyVolume({ volume_id, mutable_parameters });
const context = async (volume_id: string) => (await ctrl.ControllerGetVolume({ volume_id })).volume?.volume_context ?? {};
const limitsOf = (ctx: Record<string, string>) => Object.fromEntries(Object.entries(ctx).filter(([k]) => k in V1_FILES));
const history = async (volumeId: string) => (await journal.call("c1", "volume.history", { uuid: decomposeVolumeId(volumeId).uuid })).events.map((e) => e.event);
const modifications = async (volumeId: string) => (await history(volumeId)).filter((e) => e.type === "VolumeModified");
const names = async () => (await journal.call("c1", "volume.list", {})).entries.map((v) => v.name);

before(async () => {
  env = await startTestServers();
  root = await realpath(env.dir);
  const clustersFile = await writeClustersFile(root, [{ clusterID: "c1", pools: ["default"] }]);
  base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: root };
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "c1" }));
  const ctrlSock = `unix://${path.join(root, "controller.sock")}`;
  procs.push(await spawnService("controller", base, { args: ["--endpoint", ctrlSock] }));
  ctrl = csiClient(ctrlSock, "Controller");
  if (!devices && cgroupMode) cgroup = await makeTestCgroup(cgroupMode);
  // Never the machine's own kubepods cgroup: the test's cgroup, or one that does not exist.
  agentEnv = { IO_LIMITS_CGROUP: cgroup?.dir ?? `/sys/fs/cgroup/csi-modify-test-${process.pid}` };
  nodeSock = `unix://${path.join(root, "node.sock")}`;
  await startAgent();
  nc = await connect({ servers: env.nats.url });
  journal = new JournalClient(nc, 10_000);
});

after(async () => {
  ctrl?.close();
  node?.close();
  await agent?.stop();
  await Promise.all(procs.map((p) => p.stop()));
  await nc?.close();
  await env?.stopServers(); // their data is under root: stopped before it is removed
  if (root) await cleanupUnder(root);
  if (cgroup) await rmdir(cgroup.dir).catch((err) => console.error(`# could not remove test cgroup ${cgroup?.dir}: ${err}`));
  await env?.dispose();
});

describe("ControllerModifyVolume and mutable_parameters", () => {
  test("capability; argument errors first, then NOT_FOUND", async () => {
    const rpcs = (await ctrl.ControllerGetCapabilities({})).capabilities.map((c) => String(c.rpc?.type));
    assert.ok(rpcs.includes("MODIFY_VOLUME"));
    assert.equal(await code(modify("", SANITY)), 3, "no volume id");
    assert.equal(await code(modify("non-existing-volume-id", SANITY)), 5, "csi-sanity's unknown volume");
    const ghost = (await create("pvc-mv-ghost")).volume?.volume_id as string;
    await ctrl.DeleteVolume({ volume_id: ghost });
    assert.equal(await code(modify(ghost, SANITY)), 5, "a deleted volume");
    assert.equal(await code(modify("non-existing-volume-id", { XXX_FakeKey: "XXX_FakeValue" })), 3, "bad parameters are refused before existence is checked");
  });

  test("csi-sanity's ModifyVolume specs, with its mutable-parameters file", async () => {
    assert.equal(await code(modify("", SANITY)), 3, "should fail if no volume id is given");
    assert.equal(await code(modify("non-existing-volume-id", SANITY)), 5, "should fail if volume does not exist");
    const plain = (await create("sanity-modify-volume-plain")).volume?.volume_id as string;
    assert.equal(await code(modify(plain, { XXX_FakeKey: "XXX_FakeValue" })), 3, "should fail if specified mutable parameters are not supported by the volume");
    await modify(plain, SANITY); // should modify a volume created without a volume attribute class
    const vac = (await create("sanity-modify-volume-vac", { mutable_parameters: SANITY })).volume?.volume_id as string; // should create volume with a volume attribute class
    await modify(vac, SANITY); // should modify a volume created with a volume attribute class
    assert.equal(await code(modify(vac, { XXX_FakeKey: "XXX_FakeValue" })), 3, "should fail to modify … if new mutable parameters are not supported");
    assert.equal(
      await code(create("sanity-vol-bad-vac", { mutable_parameters: { XXX_FakeKey: "XXX_FakeValue" } })),
      3,
      "should not create volume with an invalid volume attribute class",
    );
    for (const id of [plain, vac]) await ctrl.DeleteVolume({ volume_id: id });
  });

  test("CreateVolume refuses unknown keys and bad values, creating nothing", async () => {
    const before = await names();
    assert.equal(await code(create("pvc-mv-bad-key", { mutable_parameters: { XXX_FakeKey: "XXX_FakeValue" } })), 3);
    assert.equal(await code(create("pvc-mv-bad-value", { mutable_parameters: { writeIOPS: "-1" } })), 3);
    assert.equal(await code(create("pvc-mv-too-big", { mutable_parameters: { readIOPS: "4294967296" } })), 3);
    assert.equal(await code(create("pvc-mv-bad-param", { parameters: { readBytesPerSecond: "1" } })), 3, "a limit key in parameters is validated the same way");
    assert.deepEqual(await names(), before, "nothing was reserved");
  });

  test("create with mutable_parameters: GetVolume and ListVolumes show them; a repeat is judged on the creation-time set", async () => {
    const v = (await create("pvc-mv-create", { mutable_parameters: SANITY, parameters: { readIOPS: "50", tier: "gold" } })).volume;
    const id = v?.volume_id as string;
    assert.deepEqual(
      limitsOf(v?.volume_context ?? {}),
      { readBytesPerSecond: "1048576", readIOPS: "50", writeIOPS: "100" },
      "StorageClass parameters give defaults",
    );
    assert.equal(v?.volume_context?.tier, "gold");
    assert.deepEqual(limitsOf(await context(id)), { readBytesPerSecond: "1048576", readIOPS: "50", writeIOPS: "100" });
    const listed = (await ctrl.ListVolumes({})).entries.find((e) => e.volume?.volume_id === id);
    assert.deepEqual(limitsOf(listed?.volume?.volume_context ?? {}), { readBytesPerSecond: "1048576", readIOPS: "50", writeIOPS: "100" });

    const again = (more: Record<string, unknown>) => create("pvc-mv-create", { parameters: { tier: "gold" }, ...more });
    assert.equal(
      (await again({ mutable_parameters: { ...SANITY, readIOPS: "050" } })).volume?.volume_id,
      id,
      "same effective limits (canonical values, parameters or mutable_parameters)",
    );
    assert.equal(await code(again({ mutable_parameters: { readBytesPerSecond: "2097152" } })), 6, "other limits: ALREADY_EXISTS");
    assert.equal(await code(again({ mutable_parameters: {} })), 6, "no limits where there were some: ALREADY_EXISTS");
    const validate = (mutable_parameters: Record<string, string>) =>
      ctrl.ValidateVolumeCapabilities({ volume_id: id, volume_capabilities: [mountCap], parameters: { tier: "gold", readIOPS: "7" }, mutable_parameters });
    assert.deepEqual(
      (await validate({ writeIOPS: "0200" })).confirmed?.mutable_parameters,
      { writeIOPS: "200" },
      "valid limits are confirmed (they can be changed)",
    );
    const refused = await validate({ XXX_FakeKey: "x" });
    assert.equal(refused.confirmed, null);
    assert.match(refused.message, /unknown key "XXX_FakeKey"/);
    const reserved = (await history(id)).find((e) => e.type === "VolumeReserved");
    assert.deepEqual(reserved?.mutableParameters, { readBytesPerSecond: "1048576", readIOPS: "50", writeIOPS: "100" }, "the reservation records the set");
  });

  test("modify: bad input changes nothing; a change is one VolumeModified; repeats and empty maps append nothing", async () => {
    const id = (await create("pvc-mv-modify", { mutable_parameters: SANITY })).volume?.volume_id as string;
    const before = (await history(id)).length;
    assert.equal(await code(modify(id, { XXX_FakeKey: "XXX_FakeValue" })), 3);
    assert.equal(await code(modify(id, { writeBytesPerSecond: "2097152", writeIOPS: "lots" })), 3, "one bad value refuses the whole request");
    assert.equal(await code(modify(id, { readBytesPerSecond: "100" })), 3, "below the minimum");
    assert.equal((await history(id)).length, before, "history unchanged");
    assert.deepEqual(limitsOf(await context(id)), SANITY, "values unchanged");

    await modify(id, { writeBytesPerSecond: "2097152", writeIOPS: "0" });
    const want = { readBytesPerSecond: "1048576", writeBytesPerSecond: "2097152" };
    assert.deepEqual(limitsOf(await context(id)), want, "only the keys given changed; 0 removed writeIOPS");
    const listed = (await ctrl.ListVolumes({})).entries.find((e) => e.volume?.volume_id === id);
    assert.deepEqual(limitsOf(listed?.volume?.volume_context ?? {}), want);
    let mods = await modifications(id);
    assert.equal(mods.length, 1);
    assert.deepEqual(mods[0]?.mutableParameters, want, "the event carries the whole resulting set");

    await modify(id, { writeBytesPerSecond: "2097152" });
    await modify(id, { writeIOPS: "0", readBytesPerSecond: "01048576" });
    await modify(id, {});
    mods = await modifications(id);
    assert.equal(mods.length, 1, "idempotent: no second event");
    assert.equal((await create("pvc-mv-modify", { mutable_parameters: SANITY })).volume?.volume_id, id, "a retried create still matches after a modify");
  });

  describe("on this node's devices", { skip: devices }, () => {
    test("without cgroup support the stage goes on, and the history says why", async () => {
      // The agent looks for its cgroup at each use: take the test cgroup away for this test (no restart needed).
      if (cgroup) await rmdir(cgroup.dir);
      try {
        const id = (await create("pvc-mv-nocg", { mutable_parameters: SANITY })).volume?.volume_id as string;
        const pub = await ctrl.ControllerPublishVolume({ volume_id: id, node_id: NODE, volume_capability: mountCap, readonly: false });
        const staging = path.join(root, "staging", "nocg");
        await mkdir(path.dirname(staging), { recursive: true }); // the CO's part
        await node.NodeStageVolume({ volume_id: id, staging_target_path: staging, volume_capability: mountCap, publish_context: pub.publish_context });
        const failed = await eventually(async () => {
          const f = (await history(id)).find((e) => e.type === "DeviceStateReported" && e.state === "failed");
          assert.ok(f, "a failed report");
          return f;
        });
        assert.match(String(failed.reason), /I\/O limits \(readBytesPerSecond=1048576 writeIOPS=100\) not applied: cgroup .* does not exist/);
        const states = (await history(id)).filter((e) => e.type === "DeviceStateReported").map((e) => e.state);
        assert.ok(states.includes("staged"), "the stage itself went on");
        await node.NodeUnstageVolume({ volume_id: id, staging_target_path: staging });
        await ctrl.ControllerUnpublishVolume({ volume_id: id, node_id: NODE });
      } finally {
        if (cgroup) await mkdir(cgroup.dir);
      }
    });

    test("limits land on the staged volume's loop device, follow modifications (also while the node-agent is down), and go at unstage", {
      skip: !cgroupMode && "no cgroup v1 blkio or v2 io controller here",
    }, async (t) => {
      const cg = cgroup as TestCgroup;
      const id = (await create("pvc-mv-node", { mutable_parameters: SANITY })).volume?.volume_id as string;
      const pub = await ctrl.ControllerPublishVolume({ volume_id: id, node_id: NODE, volume_capability: mountCap, readonly: false });
      assert.equal(pub.publish_context.readBytesPerSecond, "1048576");
      assert.match(pub.publish_context.ioLimitsSeq ?? "", /^[0-9]+$/);
      const staging = path.join(root, "staging", "node");
      await mkdir(path.dirname(staging), { recursive: true }); // the CO's part
      const uuid = decomposeVolumeId(id).uuid;
      const badCtx = { ...pub.publish_context, writeIOPS: "lots" };
      assert.equal(await code(node.NodeStageVolume({ volume_id: id, staging_target_path: staging, volume_capability: mountCap, publish_context: badCtx })), 3);
      assert.ok(!(await loopsUnder(root)).some((d) => d.backingFile?.includes(uuid)), "a malformed publish context attaches nothing");
      await node.NodeStageVolume({ volume_id: id, staging_target_path: staging, volume_capability: mountCap, publish_context: pub.publish_context });
      const device = (await loopsUnder(root)).find((d) => d.backingFile?.includes(uuid))?.device as string;
      assert.ok(device, "the volume's loop device");
      const majMin = readFileSync(`/sys/class/block/${path.basename(device)}/dev`, "utf8").trim();

      assert.deepEqual(await cg.limits(majMin), SANITY, "set at stage");

      await modify(id, { writeBytesPerSecond: "1048576", writeIOPS: "0" });
      await eventually(async () => assert.deepEqual(await cg.limits(majMin), { readBytesPerSecond: "1048576", writeBytesPerSecond: "1048576" }), 10_000);

      // The write limit bites: 4 MiB of O_DIRECT writes from inside the cgroup at 1 MiB/s take about 3-4 s
      // (an unthrottled write here takes milliseconds); 2 s leaves a generous margin.
      const started = performance.now();
      const dd = spawn(
        "sh",
        ["-c", 'echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=1M count=4 oflag=direct', "sh", cg.dir, path.join(staging, "dd.bin")],
        { stdio: "ignore" },
      );
      const exit = await new Promise<number | null>((resolve) => dd.once("exit", resolve));
      const seconds = (performance.now() - started) / 1000;
      assert.equal(exit, 0, "dd succeeded");
      t.diagnostic(`4 MiB of O_DIRECT writes at writeBytesPerSecond=1048576 took ${seconds.toFixed(2)} s`);
      assert.ok(seconds >= 2, `4 MiB at 1 MiB/s took ${seconds.toFixed(2)} s`);

      // A modification while the node-agent is down waits in its work queue.
      await agent?.stop();
      await modify(id, { writeBytesPerSecond: "2097152" });
      assert.equal((await modifications(id)).length, 2);
      await startAgent();
      await eventually(async () => assert.deepEqual(await cg.limits(majMin), { readBytesPerSecond: "1048576", writeBytesPerSecond: "2097152" }), 15_000);

      await node.NodeUnstageVolume({ volume_id: id, staging_target_path: staging });
      assert.deepEqual(await cg.limits(majMin), {}, "removed at unstage");
      await ctrl.ControllerUnpublishVolume({ volume_id: id, node_id: NODE });
      const reports = (await history(id)).filter((e) => e.type === "DeviceStateReported" && e.state === "limited").map((e) => String(e.reason));
      assert.ok(
        reports.some((r) => r.includes("readBytesPerSecond=1048576 writeIOPS=100")),
        "the history shows the limits set at stage",
      );
      assert.ok(
        reports.some((r) => r.startsWith("I/O limits removed")),
        "and their removal",
      );
    });
  });
});
