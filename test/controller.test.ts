/**
 * The controller end to end: its gRPC socket, with two clusters' journals, NATS, Redis and two
 * registered node-agents behind it, all real processes. Checks every Controller RPC, their CSI
 * error codes (arguments before existence, as csi-sanity checks), paging, idempotency,
 * routing over clusters, and that secrets never reach the logs.
 */
import assert from "node:assert/strict";
import { rename } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type AccessMode, decomposeVolumeId, PLUGIN_NAME_RE } from "@csi/contracts";
import { type CsiClient, csiClient } from "@csi/runtime";
import { type ServiceProcess, spawnService, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const SECRET = "s3cr3t-Pa55w0rd";
let env: TestServers;
let ctrl: CsiClient<"Controller">;
let identity: CsiClient<"Identity">;
let controllerProc: ServiceProcess;
const procs: ServiceProcess[] = [];

const mountCap = (mode: AccessMode = "SINGLE_NODE_WRITER") => ({ access_mode: { mode }, mount: { fs_type: "ext4", mount_flags: [] } });
const blockCap = (mode: AccessMode = "SINGLE_NODE_WRITER") => ({ access_mode: { mode }, block: {} });
const code = async (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );
const create = (name: string, more: Record<string, unknown> = {}) =>
  ctrl.CreateVolume({ name, volume_capabilities: [mountCap()], capacity_range: { required_bytes: String(64 * MiB) }, secrets: { password: SECRET }, ...more });

before(async () => {
  env = await startTestServers();
  const clustersFile = await writeClustersFile(env.dir, [
    { clusterID: "c1", pools: ["default", "fast"] },
    { clusterID: "c2", pools: ["default"] },
  ]);
  const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "c1" }));
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "c2" }));
  for (const [id, max] of [
    ["node-1", "64"],
    ["node-2.example.com", "2"],
  ] as const) {
    procs.push(
      await spawnService(
        "node-agent",
        { ...base, MAX_VOLUMES_PER_NODE: max },
        { args: ["--endpoint", `unix://${path.join(env.dir, `${id}.sock`)}`, "--nodeid", id] },
      ),
    );
  }
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  controllerProc = await spawnService("controller", { ...base, LOG_LEVEL: "debug" }, { args: ["--endpoint", sock] });
  procs.push(controllerProc);
  ctrl = csiClient(sock, "Controller");
  identity = csiClient(sock, "Identity");
});

after(async () => {
  ctrl?.close();
  identity?.close();
  await Promise.all(procs.map((p) => p.stop()));
  await env?.dispose();
});

describe("identity", () => {
  test("plugin info, capabilities, probe ready with a journal behind", async () => {
    const info = await identity.GetPluginInfo({});
    assert.match(info.name, PLUGIN_NAME_RE);
    const caps = (await identity.GetPluginCapabilities({})).capabilities;
    assert.ok(caps.some((c) => c.service?.type === "CONTROLLER_SERVICE"));
    assert.ok(caps.some((c) => c.volume_expansion?.type === "ONLINE"));
    assert.equal((await identity.Probe({})).ready?.value, true);
    const rpcs = (await ctrl.ControllerGetCapabilities({})).capabilities.map((c) => String(c.rpc?.type));
    for (const r of [
      "CREATE_DELETE_VOLUME",
      "PUBLISH_UNPUBLISH_VOLUME",
      "LIST_VOLUMES",
      "GET_CAPACITY",
      "CREATE_DELETE_SNAPSHOT",
      "LIST_SNAPSHOTS",
      "CLONE_VOLUME",
      "EXPAND_VOLUME",
      "GET_VOLUME",
      "VOLUME_CONDITION",
      "LIST_VOLUMES_PUBLISHED_NODES",
    ]) {
      assert.ok(rpcs.includes(r), r);
    }
    assert.equal(
      await code(ctrl.ControllerModifyVolume({ volume_id: "x" })),
      5,
      "implemented (test/modify-volume.test.ts): an id that names nothing is NOT_FOUND",
    );
  });
});

describe("CreateVolume / DeleteVolume", () => {
  test("argument errors come first", async () => {
    assert.equal(await code(ctrl.CreateVolume({ volume_capabilities: [mountCap()] })), 3, "no name");
    assert.equal(await code(ctrl.CreateVolume({ name: "v" })), 3, "no capabilities");
    assert.equal(await code(ctrl.CreateVolume({ name: "v", volume_capabilities: [{ mount: {} }] })), 3, "no access mode");
    assert.equal(await code(ctrl.CreateVolume({ name: "v", volume_capabilities: [{ access_mode: { mode: "SINGLE_NODE_WRITER" } }] })), 3, "no access type");
    assert.equal(await code(create("v", { capacity_range: { required_bytes: String(2 * GiB), limit_bytes: String(GiB) } })), 11, "limit < required");
    assert.equal(await code(create("v", { parameters: { clusterID: "nope" } })), 3, "unknown cluster");
    assert.equal(
      await code(create("v", { volume_content_source: { snapshot: { snapshot_id: "0001-0002-c1-0000000000000001-00000000-0000-0000-0000-000000000000" } } })),
      5,
      "missing snapshot",
    );
    assert.equal(await code(create("x".repeat(129))), 3, "name too long");
    assert.equal(await code(create("v", { capacity_range: { required_bytes: String(2 * 1024 * 1024 * GiB) } })), 11, "past the pool's max");
  });

  test("default size, context, idempotency, a 128-byte name, incompatible repeat", async () => {
    const res = await ctrl.CreateVolume({ name: "pvc-default", volume_capabilities: [mountCap()], parameters: { pool: "fast", team: "storage" } });
    const v = res.volume!;
    assert.equal(v.capacity_bytes, String(GiB));
    assert.equal(v.volume_context.clusterID, "c1");
    assert.equal(v.volume_context.pool, "fast");
    assert.equal(v.volume_context.team, "storage");
    assert.match(v.volume_context.imageName ?? "", /^csi-vol-/);
    assert.deepEqual(decomposeVolumeId(v.volume_id).poolID, 2);
    const again = await ctrl.CreateVolume({ name: "pvc-default", volume_capabilities: [mountCap()], parameters: { pool: "fast", team: "storage" } });
    assert.equal(again.volume?.volume_id, v.volume_id);
    assert.equal(
      await code(
        ctrl.CreateVolume({
          name: "pvc-default",
          volume_capabilities: [mountCap()],
          capacity_range: { required_bytes: String(3 * GiB) },
          parameters: { pool: "fast", team: "storage" },
        }),
      ),
      6,
    );
    const long = await create("n".repeat(128));
    assert.ok((long.volume?.volume_id.length ?? 999) <= 128);
  });

  test("delete: empty id is INVALID_ARGUMENT; malformed or unknown ids are OK; twice is OK", async () => {
    assert.equal(await code(ctrl.DeleteVolume({ volume_id: "" })), 3);
    assert.equal(await code(ctrl.DeleteVolume({ volume_id: "some-vol-id" })), 0);
    assert.equal(await code(ctrl.DeleteVolume({ volume_id: "0001-0002-c1-0000000000000001-0bba3be9-0a1c-41db-a619-26ffea20161e" })), 0);
    const v = (await create("pvc-del")).volume!;
    await ctrl.DeleteVolume({ volume_id: v.volume_id, secrets: { password: SECRET } });
    await ctrl.DeleteVolume({ volume_id: v.volume_id });
    assert.equal(await code(ctrl.ControllerGetVolume({ volume_id: v.volume_id })), 5);
  });

  test("routing: clusterID picks the cluster; its id routes every later call", async () => {
    const v = (await create("pvc-c2", { parameters: { clusterID: "c2" } })).volume!;
    assert.equal(decomposeVolumeId(v.volume_id).clusterID, "c2");
    assert.equal(decomposeVolumeId(v.volume_id).poolID, 1);
    const got = await ctrl.ControllerGetVolume({ volume_id: v.volume_id });
    assert.equal(got.volume?.volume_context.clusterID, "c2");
    const foreign = v.volume_id.replace("-0002-c2-", "-0002-zz-");
    assert.equal(await code(ctrl.ControllerGetVolume({ volume_id: foreign })), 5);
  });
});

describe("expand, get, validate, capacity", () => {
  test("ControllerExpandVolume returns the new capacity; node expansion only for mount", async () => {
    const v = (await create("pvc-expand")).volume!;
    const r = await ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { required_bytes: String(2 * GiB) }, volume_capability: mountCap() });
    assert.equal(r.capacity_bytes, String(2 * GiB));
    assert.equal(r.node_expansion_required, true);
    const b = (await ctrl.CreateVolume({ name: "pvc-expand-block", volume_capabilities: [blockCap()], capacity_range: { required_bytes: String(MiB) } }))
      .volume!;
    const rb = await ctrl.ControllerExpandVolume({
      volume_id: b.volume_id,
      capacity_range: { required_bytes: String(8 * MiB) },
      volume_capability: blockCap(),
    });
    assert.equal(rb.capacity_bytes, String(8 * MiB));
    assert.equal(rb.node_expansion_required, false);
    assert.equal(await code(ctrl.ControllerExpandVolume({ volume_id: v.volume_id })), 3, "no capacity range");
    assert.equal(await code(ctrl.ControllerExpandVolume({ volume_id: "", capacity_range: { required_bytes: "1" } })), 3);
    assert.equal(await code(ctrl.ControllerExpandVolume({ volume_id: "some-vol-id", capacity_range: { required_bytes: "1" } })), 5);
  });

  test("ControllerGetVolume has the volume condition; ValidateVolumeCapabilities confirms only what we support", async () => {
    const v = (await create("pvc-validate")).volume!;
    const got = await ctrl.ControllerGetVolume({ volume_id: v.volume_id });
    assert.equal(got.volume?.volume_id, v.volume_id);
    assert.equal(got.status?.volume_condition?.abnormal, false);
    assert.deepEqual(got.status?.published_node_ids, []);
    const ok = await ctrl.ValidateVolumeCapabilities({ volume_id: v.volume_id, volume_capabilities: [mountCap()] });
    assert.ok(ok.confirmed);
    const no = await ctrl.ValidateVolumeCapabilities({ volume_id: v.volume_id, volume_capabilities: [mountCap("MULTI_NODE_MULTI_WRITER")] });
    assert.equal(no.confirmed, null);
    assert.match(no.message, /block/);
    assert.equal(await code(ctrl.ValidateVolumeCapabilities({ volume_id: v.volume_id })), 3);
    assert.equal(await code(ctrl.ValidateVolumeCapabilities({ volume_id: "some-vol-id", volume_capabilities: [mountCap()] })), 5);

    // Its image gone from the pool: both ControllerGetVolume and its ListVolumes entry say so (external-health-monitor reads either).
    const { imagePath } = (await ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: "node-1", volume_capability: mountCap(), readonly: false }))
      .publish_context;
    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-1" });
    assert.ok(imagePath);
    await rename(imagePath, `${imagePath}.away`);
    try {
      const missing = { abnormal: true, message: `image ${v.volume_context.imageName} is missing from pool default` };
      assert.deepEqual((await ctrl.ControllerGetVolume({ volume_id: v.volume_id })).status?.volume_condition, missing);
      const listed = (await ctrl.ListVolumes({})).entries.find((e) => e.volume?.volume_id === v.volume_id);
      assert.deepEqual(listed?.status?.volume_condition, missing);
    } finally {
      await rename(`${imagePath}.away`, imagePath);
    }
  });

  test("GetCapacity reports the pool's free space", async () => {
    const c = await ctrl.GetCapacity({ parameters: { pool: "default" } });
    assert.ok(Number(c.available_capacity) > 0);
    assert.ok(Number(c.maximum_volume_size?.value) > 0);
    assert.equal(await code(ctrl.GetCapacity({ parameters: { clusterID: "nope" } })), 3);
  });
});

describe("publish / unpublish with claims", () => {
  test("claims: errors, idempotency, access modes, node limits, delete while published", async () => {
    const v = (await create("pvc-pub")).volume!;
    const pub = (node: string, more: Record<string, unknown> = {}) =>
      ctrl.ControllerPublishVolume({
        volume_id: v.volume_id,
        node_id: node,
        volume_capability: mountCap(),
        readonly: false,
        secrets: { password: SECRET },
        ...more,
      });
    assert.equal(await code(ctrl.ControllerPublishVolume({ volume_id: v.volume_id, volume_capability: mountCap() })), 3, "no node");
    assert.equal(await code(ctrl.ControllerPublishVolume({ node_id: "node-1", volume_capability: mountCap() })), 3, "no volume");
    assert.equal(await code(ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: "node-1" })), 3, "no capability");
    assert.equal(await code(pub("no-such-node")), 5, "unknown node");
    assert.equal(await code(ctrl.ControllerPublishVolume({ volume_id: "some-vol-id", node_id: "node-1", volume_capability: mountCap() })), 5, "unknown volume");

    const first = await pub("node-1");
    assert.equal(first.publish_context.imageName, v.volume_context.imageName);
    assert.ok(first.publish_context.imagePath?.endsWith(`${v.volume_context.imageName}.img`));
    for (let i = 0; i < 10; i++) assert.deepEqual((await pub("node-1")).publish_context, first.publish_context);
    assert.equal(await code(pub("node-1", { readonly: true })), 6, "same node, read-only mismatch");
    assert.equal(await code(pub("node-2.example.com")), 9, "single-node volume on a second node");
    assert.equal(await code(ctrl.DeleteVolume({ volume_id: v.volume_id })), 9, "delete while published");
    const got = await ctrl.ControllerGetVolume({ volume_id: v.volume_id });
    assert.deepEqual(got.status?.published_node_ids, ["node-1"]);
    const listed = (await ctrl.ListVolumes({})).entries.find((e) => e.volume?.volume_id === v.volume_id);
    assert.deepEqual(listed?.status?.published_node_ids, ["node-1"]);
    // VOLUME_CONDITION is advertised: every ListVolumes entry has a condition (CSI: then it MUST be set).
    assert.deepEqual(listed?.status?.volume_condition, { abnormal: false, message: "image present" });

    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-1" });
    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-1" });
    assert.equal(await code(ctrl.ControllerUnpublishVolume({ volume_id: "" })), 3);
    assert.equal(await code(ctrl.ControllerUnpublishVolume({ volume_id: "some-vol-id", node_id: "node-1" })), 0);
    await pub("node-2.example.com");

    // node-2 registered max 2 volumes: a third is RESOURCE_EXHAUSTED.
    const ro = (
      await ctrl.CreateVolume({ name: "pvc-ro", volume_capabilities: [mountCap("MULTI_NODE_READER_ONLY")], capacity_range: { required_bytes: String(MiB) } })
    ).volume!;
    const third = (await create("pvc-third")).volume!;
    await ctrl.ControllerPublishVolume({
      volume_id: ro.volume_id,
      node_id: "node-2.example.com",
      volume_capability: mountCap("MULTI_NODE_READER_ONLY"),
      readonly: true,
    });
    await ctrl.ControllerPublishVolume({ volume_id: ro.volume_id, node_id: "node-1", volume_capability: mountCap("MULTI_NODE_READER_ONLY"), readonly: true });
    assert.equal(
      await code(ctrl.ControllerPublishVolume({ volume_id: third.volume_id, node_id: "node-2.example.com", volume_capability: mountCap(), readonly: false })),
      8,
    );

    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-2.example.com" });
    await ctrl.DeleteVolume({ volume_id: v.volume_id });
  });
});

describe("snapshots, clones, listing", () => {
  test("snapshot lifecycle, restore and clone through CSI", async () => {
    const src = (await create("pvc-snap-src")).volume!;
    const other = (await create("pvc-snap-other")).volume!;
    assert.equal(await code(ctrl.CreateSnapshot({ name: "s1" })), 3, "no source");
    assert.equal(await code(ctrl.CreateSnapshot({ source_volume_id: src.volume_id })), 3, "no name");
    assert.equal(await code(ctrl.CreateSnapshot({ name: "s1", source_volume_id: "some-vol-id" })), 5);
    const s1 = (await ctrl.CreateSnapshot({ name: "s1", source_volume_id: src.volume_id, secrets: { password: SECRET } })).snapshot!;
    assert.equal(s1.ready_to_use, true);
    assert.equal(s1.size_bytes, String(64 * MiB));
    assert.equal(s1.source_volume_id, src.volume_id);
    assert.ok(Number(s1.creation_time?.seconds) > 1_700_000_000);
    assert.deepEqual((await ctrl.CreateSnapshot({ name: "s1", source_volume_id: src.volume_id })).snapshot, s1);
    assert.equal(await code(ctrl.CreateSnapshot({ name: "s1", source_volume_id: other.volume_id })), 6);
    const s2 = (await ctrl.CreateSnapshot({ name: "s2", source_volume_id: other.volume_id })).snapshot!;

    assert.deepEqual(
      (await ctrl.ListSnapshots({ snapshot_id: s1.snapshot_id })).entries.map((e) => e.snapshot?.snapshot_id),
      [s1.snapshot_id],
    );
    assert.deepEqual(
      (await ctrl.ListSnapshots({ source_volume_id: other.volume_id })).entries.map((e) => e.snapshot?.snapshot_id),
      [s2.snapshot_id],
    );
    assert.deepEqual((await ctrl.ListSnapshots({ snapshot_id: "some-snap-id" })).entries, []);
    const p1 = await ctrl.ListSnapshots({ max_entries: 1 });
    assert.equal(p1.entries.length, 1);
    assert.ok(p1.next_token);
    const p2 = await ctrl.ListSnapshots({ max_entries: 1, starting_token: p1.next_token });
    assert.notEqual(p2.entries[0]?.snapshot?.snapshot_id, p1.entries[0]?.snapshot?.snapshot_id);
    assert.equal((await ctrl.GetSnapshot({ snapshot_id: s1.snapshot_id })).snapshot?.snapshot_id, s1.snapshot_id);

    const restored = (await create("pvc-restored", { volume_content_source: { snapshot: { snapshot_id: s1.snapshot_id } } })).volume!;
    assert.equal(restored.content_source?.snapshot?.snapshot_id, s1.snapshot_id);
    const cloned = (await create("pvc-cloned", { volume_content_source: { volume: { volume_id: src.volume_id } } })).volume!;
    assert.equal(cloned.content_source?.volume?.volume_id, src.volume_id);

    await ctrl.DeleteSnapshot({ snapshot_id: s1.snapshot_id });
    await ctrl.DeleteSnapshot({ snapshot_id: s1.snapshot_id });
    assert.equal(await code(ctrl.DeleteSnapshot({ snapshot_id: "" })), 3);
    assert.equal(await code(ctrl.DeleteSnapshot({ snapshot_id: "some-snap-id" })), 0);
    assert.equal(await code(ctrl.GetSnapshot({ snapshot_id: s1.snapshot_id })), 5);
  });

  test("ListVolumes pages across both clusters; a bad token is ABORTED", async () => {
    // Volumes of its own in both clusters: more than one page of 3, whatever else exists.
    const mine: string[] = [];
    for (const [name, clusterID] of [
      ["pvc-list-1", "c1"],
      ["pvc-list-2", "c1"],
      ["pvc-list-3", "c2"],
      ["pvc-list-4", "c2"],
    ] as const) {
      mine.push((await create(name, { parameters: { clusterID } })).volume!.volume_id);
    }
    const all = (await ctrl.ListVolumes({})).entries.map((e) => String(e.volume?.volume_id));
    assert.ok(
      mine.every((id) => all.includes(id)),
      "every volume of this test is listed",
    );
    assert.ok(all.some((id: string) => decomposeVolumeId(id).clusterID === "c2"));
    const seen: string[] = [];
    let token = "";
    let pages = 0;
    do {
      const page = await ctrl.ListVolumes({ max_entries: 3, starting_token: token });
      assert.ok(page.entries.length <= 3);
      seen.push(...page.entries.map((e) => String(e.volume?.volume_id)));
      token = page.next_token;
      pages++;
    } while (token && pages < 50);
    assert.deepEqual([...seen].sort(), [...all].sort());
    assert.equal(await code(ctrl.ListVolumes({ starting_token: "garbage" })), 10);
    assert.equal(await code(ctrl.ListVolumes({ max_entries: -1 })), 3);
  });
});

describe("logging", () => {
  test("secrets passed in requests never appear in the logs; request ids do", async () => {
    // Calls of its own that carry secrets (create, snapshot, publish, delete), with a request id each.
    const v = (await create("pvc-secret-logs")).volume!;
    const s = (await ctrl.CreateSnapshot({ name: "s-secret-logs", source_volume_id: v.volume_id, secrets: { password: SECRET } })).snapshot!;
    await ctrl.ControllerPublishVolume({
      volume_id: v.volume_id,
      node_id: "node-1",
      volume_capability: mountCap(),
      readonly: false,
      secrets: { password: SECRET },
    });
    await ctrl.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: "node-1", secrets: { password: SECRET } });
    await ctrl.DeleteSnapshot({ snapshot_id: s.snapshot_id, secrets: { password: SECRET } });
    await ctrl.DeleteVolume({ volume_id: v.volume_id, secrets: { password: SECRET } });
    const logs = controllerProc.logs.join("\n");
    assert.ok(logs.includes('"method":"Controller.CreateVolume"'), "requests are logged at debug");
    assert.ok(logs.includes("***stripped***"), "secret values are replaced");
    assert.ok(!logs.includes(SECRET), "no secret value in any log line");
    assert.ok(
      controllerProc.logs.every((l) => !l.includes('"method"') || l.includes('"requestId"')),
      "every call log line carries a request id",
    );
  });
});
