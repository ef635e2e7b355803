/**
 * End to end on a real single-node Ceph (skipped, with the reason, only where Ceph's packages
 * cannot be installed): a storage cluster mixing an RBD pool (`ceph`) and a file pool
 * (`default`), its journal and the controller as processes, driven through the controller's CSI
 * socket — CreateVolume, CreateSnapshot, CreateVolume from a snapshot and from a volume,
 * ControllerExpandVolume, ControllerPublishVolume (and a node-agent's NodeStageVolume with a
 * publish context naming another image, refused), DeleteSnapshot, DeleteVolume — each checked
 * with `rbd ls`, `rbd info`, `rbd snap ls`, `rbd image-meta list`. Then the journal's audit on the
 * RBD pool: `verify` finds a leaked image and `gc` removes it; and the crash test of
 * test/journal.test.ts against the RBD pool: a journal SIGKILLed between reserving and creating
 * an image leaves a reservation that `verify` finds and `gc` collects, and the CO's retry makes
 * exactly one image.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type DriverError, decomposeVolumeId, MiB } from "@csi/contracts";
import { META_PREFIX } from "@csi/journal/testing";
import { type CsiClient, csiClient } from "@csi/runtime";
import {
  type CephCluster,
  type JournalTestEnv,
  journalTestEnv,
  rbdTestPool,
  type ServiceProcess,
  SharedProcess,
  spawnService,
  startCeph,
  whyNoCeph,
} from "@csi/testkit";

const CLUSTER = "c1";
const noCeph = whyNoCeph();
let ceph: CephCluster;
let j: JournalTestEnv;
let controller: ServiceProcess | undefined;
let ctrl: CsiClient<"Controller">;
let agent: ServiceProcess | undefined;
let node: CsiClient<"Node">;
const journal = new SharedProcess((extra) => j.spawnJournal(extra));

const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] } };
const onCeph = { pool: "ceph" };
const ls = async () => (await ceph.rbdJson(["ls", "rbd"])) as string[];
const info = async (image: string) => (await ceph.rbdJson(["info", `rbd/${image}`])) as { size: number; parent?: { image: string; snapshot: string } };
const snapNames = async (image: string) => ((await ceph.rbdJson(["snap", "ls", `rbd/${image}`])) as { name: string }[]).map((s) => s.name);
const meta = async (image: string) => (await ceph.rbdJson(["image-meta", "list", `rbd/${image}`])) as Record<string, string>;
const trash = async () => ((await ceph.rbdJson(["trash", "ls", "--all", "rbd"])) as { name: string }[]).map((e) => e.name);
const code = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );
const uuidOf = (id: string) => decomposeVolumeId(id).uuid;

describe("RBD pool end to end", { skip: noCeph }, () => {
  before(async () => {
    ceph = await startCeph();
    j = await journalTestEnv(CLUSTER, { pools: [rbdTestPool("ceph", ceph), "default"], timeoutMs: 60_000 });
    await journal.start();
    const sock = `unix://${path.join(j.servers.dir, "controller.sock")}`;
    controller = await spawnService(
      "controller",
      { NATS_URL: j.servers.nats.url, REDIS_URL: j.servers.redis.url, CLUSTERS_FILE: j.clustersFile },
      { args: ["--endpoint", sock] },
    );
    ctrl = csiClient(sock, "Controller");
    const nodeSock = `unix://${path.join(j.servers.dir, "node.sock")}`;
    agent = await spawnService(
      "node-agent",
      {
        NATS_URL: j.servers.nats.url,
        REDIS_URL: j.servers.redis.url,
        CLUSTERS_FILE: j.clustersFile,
        DATA_DIR: j.servers.dir,
        NODE_STATE_DIR: path.join(j.servers.dir, "node-state"),
      },
      { args: ["--endpoint", nodeSock, "--nodeid", "node-r"] },
    );
    node = csiClient(nodeSock, "Node");
  });
  after(async () => {
    ctrl?.close();
    node?.close();
    await agent?.stop();
    await controller?.stop();
    await journal.stop();
    await j?.dispose();
    await ceph?.stop();
  });

  test("CreateVolume, CreateSnapshot, clones, ControllerExpandVolume, ControllerPublishVolume, deletes: real RBD images", async () => {
    const create = (name: string, size: number, more: object = {}) =>
      ctrl.CreateVolume({ name, volume_capabilities: [cap], capacity_range: { required_bytes: String(size) }, parameters: onCeph, ...more });
    const vol = (await create("pvc-rbd", 8 * MiB)).volume!;
    const volImage = `csi-vol-${uuidOf(vol.volume_id)}`;
    assert.ok((await ls()).includes(volImage));
    assert.equal((await info(volImage)).size, 8 * MiB);
    assert.deepEqual(await meta(volImage), {
      [`${META_PREFIX}kind`]: "volume",
      [`${META_PREFIX}uuid`]: uuidOf(vol.volume_id),
      [`${META_PREFIX}name`]: "pvc-rbd",
      [`${META_PREFIX}cluster`]: CLUSTER,
    });
    assert.equal((await create("pvc-rbd", 8 * MiB)).volume?.volume_id, vol.volume_id, "idempotent");
    assert.equal(await code(create("pvc-rbd", 16 * MiB, { capacity_range: { required_bytes: String(16 * MiB), limit_bytes: String(16 * MiB) } })), 6);

    const snap = (await ctrl.CreateSnapshot({ name: "snap-rbd", source_volume_id: vol.volume_id })).snapshot!;
    const snapImage = `csi-snap-${uuidOf(snap.snapshot_id)}`;
    assert.equal(snap.ready_to_use, true);
    assert.deepEqual(await snapNames(snapImage), [snapImage], "a snapshot image carries a snapshot of its own name");
    assert.equal((await info(snapImage)).parent?.image, volImage);
    assert.deepEqual(await snapNames(volImage), [], "no temporary snapshot left on the source");

    const restored = (await create("pvc-restored", 16 * MiB, { volume_content_source: { snapshot: { snapshot_id: snap.snapshot_id } } })).volume!;
    const restoredImage = `csi-vol-${uuidOf(restored.volume_id)}`;
    assert.deepEqual([(await info(restoredImage)).parent?.image, (await info(restoredImage)).size], [snapImage, 16 * MiB]);
    const cloned = (await create("pvc-cloned", 8 * MiB, { volume_content_source: { volume: { volume_id: vol.volume_id } } })).volume!;
    const clonedImage = `csi-vol-${uuidOf(cloned.volume_id)}`;
    assert.equal((await info(clonedImage)).parent?.image, volImage);

    const grown = await ctrl.ControllerExpandVolume({ volume_id: vol.volume_id, capacity_range: { required_bytes: String(32 * MiB) } });
    assert.equal(grown.capacity_bytes, String(32 * MiB));
    assert.equal((await info(volImage)).size, 32 * MiB);

    const pub = await ctrl.ControllerPublishVolume({ volume_id: vol.volume_id, node_id: "node-r", volume_capability: cap, readonly: false });
    const key = (await readFile(ceph.keyFile, "utf8")).trim();
    assert.deepEqual(
      [
        pub.publish_context?.poolKind,
        pub.publish_context?.cephPool,
        pub.publish_context?.imageName,
        pub.publish_context?.monitors,
        pub.publish_context?.cephUser,
      ],
      ["rbd", "rbd", volImage, ceph.monitors.join(","), ceph.user],
    );
    assert.ok(!JSON.stringify(pub.publish_context).includes(key), "never the key");
    // The node takes the image from the volume id: a publish context naming another image is refused before anything is mapped
    // (staging and publishing RBD volumes: test/rbd-node.test.ts).
    const staging = path.join(j.servers.dir, "kubelet", "stage");
    await mkdir(path.dirname(staging), { recursive: true });
    const stage = node.NodeStageVolume({
      volume_id: vol.volume_id,
      staging_target_path: staging,
      volume_capability: cap,
      publish_context: { ...pub.publish_context, imageName: snapImage },
    });
    await assert.rejects(stage, (e: { code: number; details: string }) => e.code === 3 && /not the image of volume/.test(e.details));
    await ctrl.ControllerUnpublishVolume({ volume_id: vol.volume_id, node_id: "node-r" });

    // The source goes first: its snapshot and clone outlive it (it waits in the trash for them).
    await ctrl.DeleteVolume({ volume_id: vol.volume_id });
    assert.ok(!(await ls()).includes(volImage));
    assert.equal((await info(clonedImage)).size, 8 * MiB);
    for (const id of [restored.volume_id, cloned.volume_id]) await ctrl.DeleteVolume({ volume_id: id });
    await ctrl.DeleteSnapshot({ snapshot_id: snap.snapshot_id });
    await ctrl.DeleteSnapshot({ snapshot_id: snap.snapshot_id });
    const left = (await ls()).filter((n) => [volImage, snapImage, restoredImage, clonedImage].includes(n));
    assert.deepEqual(left, []);
    assert.ok(!(await trash()).includes(snapImage), "nothing needed the snapshot image any more: purged at once");
  });

  test("GetCapacity answers for the RBD pool from the cluster's statistics", async () => {
    await ceph.mgrActive;
    const c = await ctrl.GetCapacity({ parameters: onCeph });
    assert.ok(Number(c.available_capacity) > 0, JSON.stringify(c));
  });

  test("verify finds a leaked RBD image (one named like ours, no reservation) and gc removes it", async () => {
    const leaked = `csi-vol-${randomUUID()}`;
    await ceph.rbd(["create", "--size", "4M", `rbd/${leaked}`]);
    const found = await j.client.call(CLUSTER, "audit.verify", { olderThanMs: 0 });
    assert.equal(found.counts.leakedImages, 1);
    assert.deepEqual(
      found.findings.map((f) => [f.type, "pool" in f ? f.pool : "", "imageName" in f ? f.imageName : ""]),
      [["leakedImage", "ceph", leaked]],
    );
    const gc = await j.client.call(CLUSTER, "audit.gc", { requestId: "gc-rbd", olderThanMs: 0, apply: true });
    assert.deepEqual(
      gc.actions.map((a) => [a.type, a.imageName, a.outcome]),
      [["removeLeakedImage", leaked, "done"]],
    );
    assert.ok(!(await ls()).includes(leaked));
    assert.equal((await j.client.call(CLUSTER, "audit.verify", { olderThanMs: 0 })).counts.leakedImages, 0);
  });

  test("a journal killed between reserving and creating an RBD image: verify finds it, gc collects it, the retry makes one image", async () => {
    const capability = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
    const createOn = (name: string, requestId: string, timeoutMs?: number) =>
      j.client.call(CLUSTER, "volume.create", { requestId, name, sizeBytes: 4 * MiB, pool: "ceph", capabilities: capability }, timeoutMs ? { timeoutMs } : {});
    let uuid = "";
    await journal.whileDown(async (own) => {
      const crashing = await own({ JOURNAL_CRASH_AFTER: "VolumeReserved", LOCK_TTL_MS: "1000" });
      const outcome = await createOn("pvc-crash", "crash", 10_000).then(
        () => "answered",
        (e: DriverError) => e.code,
      );
      assert.equal(outcome, "Unavailable", "the crashing replica never answers");
      assert.equal(await crashing.exited, null, "killed by signal");
      await journal.start();
    });
    const found = await j.client.call(CLUSTER, "audit.verify", { olderThanMs: 0 });
    const orphan = found.findings.find((f) => f.type === "orphanedReservation");
    assert.ok(orphan && "imageName" in orphan, JSON.stringify(found.findings));
    assert.deepEqual([found.counts.orphanedReservations, found.counts.leakedImages, orphan.pool], [1, 0, "ceph"]);
    uuid = "uuid" in orphan ? String(orphan.uuid) : "";
    assert.ok(!(await ls()).includes(`csi-vol-${uuid}`), "the image was never made");
    const gc = await j.client.call(CLUSTER, "audit.gc", { requestId: "gc-crash", olderThanMs: 0, apply: true });
    assert.deepEqual(
      gc.actions.map((a) => [a.type, a.outcome]),
      [["collectReservation", "done"]],
    );
    const clean = await j.client.call(CLUSTER, "audit.verify", { olderThanMs: 0 });
    assert.deepEqual([clean.counts.orphanedReservations, clean.counts.leakedImages], [0, 0]);
    const v = await createOn("pvc-crash", "retry");
    assert.notEqual(v.uuid, uuid);
    const ours = (await ls()).filter((n) => n.startsWith("csi-vol-"));
    const live = (await j.client.call(CLUSTER, "volume.list", {})).entries.map((x) => x.imageName);
    assert.deepEqual(
      ours.filter((n) => !live.includes(n)),
      [],
      "no orphan image",
    );
    assert.ok(ours.includes(`csi-vol-${v.uuid}`));
  });
});
