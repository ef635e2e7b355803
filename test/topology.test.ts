/**
 * Topology end to end: a cluster whose two pools are each reachable from one node, two
 * registered node-agents, the controller's gRPC socket. Volumes go where the requisite and
 * preferred topologies say, answer their accessible topology, and are not published to a node
 * that cannot reach their pool.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { decomposeVolumeId, TOPOLOGY_KEY } from "@csi/contracts";
import { type CsiClient, csiClient } from "@csi/runtime";
import { type ServiceProcess, spawnService, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";

const MiB = 1024 ** 2;
const at = (node: string) => ({ segments: { [TOPOLOGY_KEY]: node } });
const mountCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };
let env: TestServers;
let ctrl: CsiClient<"Controller">;
let node1: CsiClient<"Node">;
const procs: ServiceProcess[] = [];

const code = async (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );
const create = (name: string, accessibility_requirements?: { requisite?: object[]; preferred?: object[] }) =>
  ctrl.CreateVolume({
    name,
    volume_capabilities: [mountCap],
    capacity_range: { required_bytes: String(MiB) },
    ...(accessibility_requirements ? { accessibility_requirements } : {}),
  });
const poolIdOf = (volumeId: string) => decomposeVolumeId(volumeId).poolID;

before(async () => {
  env = await startTestServers();
  const clustersFile = await writeClustersFile(env.dir, [
    {
      clusterID: "t1",
      pools: [
        { name: "near", topology: [{ [TOPOLOGY_KEY]: "node-1" }] }, // id 1, the default
        { name: "far", topology: [{ [TOPOLOGY_KEY]: "node-2" }] }, // id 2
      ],
    },
  ]);
  const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "t1" }));
  for (const id of ["node-1", "node-2"]) {
    procs.push(await spawnService("node-agent", base, { args: ["--endpoint", `unix://${path.join(env.dir, `${id}.sock`)}`, "--nodeid", id] }));
  }
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  procs.push(await spawnService("controller", base, { args: ["--endpoint", sock] }));
  ctrl = csiClient(sock, "Controller");
  node1 = csiClient(`unix://${path.join(env.dir, "node-1.sock")}`, "Node");
});

after(async () => {
  ctrl?.close();
  node1?.close();
  await Promise.all(procs.map((p) => p.stop()));
  await env?.dispose();
});

describe("placement", () => {
  test("no requirements: the default pool, with its topology", async () => {
    const v = (await create("topo-default")).volume!;
    assert.equal(poolIdOf(v.volume_id), 1);
    assert.deepEqual(v.accessible_topology, [at("node-1")]);
  });

  test("a requisite only one pool reaches: that pool", async () => {
    const v = (await create("topo-far", { requisite: [at("node-2")] })).volume!;
    assert.equal(poolIdOf(v.volume_id), 2);
    assert.deepEqual(v.accessible_topology, [at("node-2")]);
    const again = (await create("topo-far", { requisite: [at("node-2")] })).volume!;
    assert.equal(again.volume_id, v.volume_id, "idempotent");
  });

  test("preferred decides among the requisite pools", async () => {
    const v = (await create("topo-pref", { requisite: [at("node-1"), at("node-2")], preferred: [at("node-2")] })).volume!;
    assert.equal(poolIdOf(v.volume_id), 2);
  });

  test("a requisite no pool reaches is RESOURCE_EXHAUSTED, and nothing is created", async () => {
    const count = async () => (await ctrl.ListVolumes({})).entries.length;
    const before = await count();
    assert.equal(await code(create("topo-nowhere", { requisite: [at("node-3")] })), 8);
    assert.equal(await count(), before, "no volume was added");
  });

  test("a clone stays in its source's pool", async () => {
    const src = (await create("topo-src", { requisite: [at("node-2")] })).volume!;
    const clone = (
      await ctrl.CreateVolume({ name: "topo-clone", volume_capabilities: [mountCap], volume_content_source: { volume: { volume_id: src.volume_id } } })
    ).volume!;
    assert.equal(poolIdOf(clone.volume_id), 2);
    assert.deepEqual(clone.accessible_topology, [at("node-2")]);
  });
});

describe("nodes", () => {
  test("NodeGetInfo reports the node's segment", async () => {
    const info = await node1.NodeGetInfo({});
    assert.deepEqual(info.accessible_topology?.segments, { [TOPOLOGY_KEY]: "node-1" });
  });

  test("publishing to a node that cannot reach the volume's pool is FAILED_PRECONDITION; the reaching node is fine", async () => {
    const v = (await create("topo-pub", { requisite: [at("node-2")] })).volume!;
    const pub = (node_id: string) => ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id, volume_capability: mountCap });
    assert.equal(await code(pub("node-1")), 9);
    assert.equal(await code(pub("node-2")), 0);
    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-2" });
  });

  test("GetCapacity answers for the pool a topology reaches, 0 where none does", async () => {
    const far = await ctrl.GetCapacity({ accessible_topology: at("node-2") });
    assert.ok(Number(far.available_capacity) > 0);
    const none = await ctrl.GetCapacity({ accessible_topology: at("node-3") });
    assert.equal(none.available_capacity, "0");
  });
});
