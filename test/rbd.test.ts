/**
 * End to end on a real single-node Ceph (skipped, with the reason, only where Ceph's packages
 * cannot be installed): a storage cluster mixing an RBD pool (`ceph`) and a file pool
 * (`default`), its journal and the controller as processes, driven through the controller's CSI
 * socket — CreateVolume, CreateSnapshot, CreateVolume from a snapshot and from a volume,
 * ControllerExpandVolume, ControllerPublishVolume (and a node-agent's NodeStageVolume with a
 * publish context naming another image, refused), DeleteSnapshot, DeleteVolume — each checked
 * with `rbd ls`, `rbd info`, `rbd snap ls`, `rbd image-meta list`. Then the journal's audit on the
 * RBD pool through csictl: `verify` traces a leaked image back by its metadata and `gc` removes it,
 * reports images not ours as foreign and leaves them, purges our trash, removes temporaries; and
 * the crash test of test/journal.test.ts against the RBD pool, at two points — a journal SIGKILLed
 * between reserving and creating an image, and between creating it and recording it — leaves
 * nothing that `csictl verify` does not find and `csictl gc --apply` does not remove (`rbd ls` as
 * the driver's user shows nothing left), and the CO's retry makes exactly one image.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type DriverError, decomposeVolumeId, type Finding, MiB, subjects } from "@csi/contracts";
import { META_PREFIX, OWNER_KEY } from "@csi/journal/pools";
import { type CsiClient, csiClient } from "@csi/runtime";
import {
  type CephCluster,
  csictlOf,
  type JournalTestEnv,
  journalTestEnv,
  rbdTestPool,
  type ServiceProcess,
  SharedProcess,
  spawnService,
  startCeph,
  whyNoCeph,
} from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";

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
    const stored = await meta(volImage);
    assert.deepEqual(Object.keys(stored), [OWNER_KEY], "one metadata write");
    const logId = (await (await jetstreamManager(j.nc)).streams.info(subjects.streamName(CLUSTER))).config.metadata?.csi_log_id;
    assert.ok(logId, "the log has an identity");
    assert.deepEqual(JSON.parse(stored[OWNER_KEY] ?? ""), { kind: "volume", uuid: uuidOf(vol.volume_id), cluster: CLUSTER, name: "pvc-rbd", log: logId });
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

  test("verify on RBD: a leaked image traced back by its metadata, gc removes it; images not ours are reported as foreign and left alone; trash and temporaries", async () => {
    const leaked = `csi-vol-${randomUUID()}`;
    const leakedUuid = leaked.slice("csi-vol-".length);
    await ceph.rbd(["create", "--size", "4M", `rbd/${leaked}`]);
    for (const [k, v] of Object.entries({ kind: "volume", uuid: leakedUuid, name: "pvc-leaked", cluster: CLUSTER }))
      await ceph.rbd(["image-meta", "set", `rbd/${leaked}`, `${META_PREFIX}${k}`, v]);
    // Named like ours but without our metadata, and another cluster's: neither is this journal's to remove.
    const bare = `csi-vol-${randomUUID()}`;
    const others = `csi-vol-${randomUUID()}`;
    await ceph.rbd(["create", "--size", "4M", `rbd/${bare}`]);
    await ceph.rbd(["create", "--size", "4M", `rbd/${others}`]);
    await ceph.rbd(["image-meta", "set", `rbd/${others}`, `${META_PREFIX}cluster`, "elsewhere"]);
    // Ours by name and cluster, made under another event log (the pool bound to it before a rebind, another stack's log).
    const otherLog = `csi-vol-${randomUUID()}`;
    await ceph.rbd(["create", "--size", "4M", `rbd/${otherLog}`]);
    const otherOwner = { kind: "volume", uuid: otherLog.slice("csi-vol-".length), cluster: CLUSTER, log: "another-log" };
    await ceph.rbd(["image-meta", "set", `rbd/${otherLog}`, OWNER_KEY, JSON.stringify(otherOwner)]);
    // A temporary of a build that never finished (its owner ended long ago: none here), made by us.
    const tmp = `.tmp-csi-snap-${randomUUID()}-0123456789ab`;
    await ceph.rbd(["create", "--size", "4M", `rbd/${tmp}`]);
    for (const [k, v] of Object.entries({ kind: "snapshot", uuid: randomUUID(), cluster: CLUSTER }))
      await ceph.rbd(["image-meta", "set", `rbd/${tmp}`, `${META_PREFIX}${k}`, v]);
    // An image of ours in the trash that nothing needs (a delete cut between the trash move and the purge).
    const trashed = `csi-vol-${randomUUID()}`;
    await ceph.rbd(["create", "--size", "4M", `rbd/${trashed}`]);
    for (const [k, v] of Object.entries({ kind: "volume", cluster: CLUSTER, deleted: "1" }))
      await ceph.rbd(["image-meta", "set", `rbd/${trashed}`, `${META_PREFIX}${k}`, v]);
    await ceph.rbd(["trash", "mv", `rbd/${trashed}`]);

    const csictl = csictlOf(() => j, CLUSTER);
    const verify = await csictl("--json", "verify", "--older-than", "0");
    assert.equal(verify.code, 1, verify.stderr);
    const found = JSON.parse(verify.stdout) as { counts: Record<string, number>; findings: Finding[] };
    const rows = found.findings.map((f) => [f.type, "imageName" in f ? f.imageName : ""]);
    assert.deepEqual(
      rows.filter(([, n]) => [leaked, bare, others, otherLog, tmp, trashed].includes(String(n))),
      [
        ["leakedImage", leaked],
        ...[
          ["foreignImage", bare],
          ["foreignImage", others],
          ["foreignImage", otherLog],
        ].sort((a, b) => (String(a[1]) < String(b[1]) ? -1 : 1)),
        ["tempImage", tmp],
        ["trashedImage", trashed],
      ],
    );
    const leak = found.findings.find((f) => f.type === "leakedImage");
    assert.deepEqual(
      leak && "owner" in leak && leak.owner,
      { kind: "volume", uuid: leakedUuid, name: "pvc-leaked", cluster: CLUSTER },
      "traced back without Redis",
    );
    assert.match(JSON.stringify(found.findings.find((f) => "imageName" in f && f.imageName === others)), /elsewhere/);
    assert.match(
      JSON.stringify(found.findings.find((f) => "imageName" in f && f.imageName === otherLog)),
      /names event log \\"another-log\\", not this pool's/,
    );
    const human = await csictl("verify", "--older-than", "0");
    assert.match(
      human.stdout,
      new RegExp(`^leakedImage\\s+ceph/${leaked}\\s+4 MiB, of volume ${leakedUuid} "pvc-leaked" in cluster ${CLUSTER}, no reservation owns it$`, "m"),
    );

    const gc = await csictl("--json", "gc", "--apply", "--older-than", "0", "--request-id", "gc-rbd");
    assert.equal(gc.code, 0, gc.stderr);
    const actions = (JSON.parse(gc.stdout) as { actions: { type: string; imageName: string; outcome: string }[] }).actions;
    assert.ok(!actions.some((a) => [bare, others, otherLog].includes(a.imageName)), "never a foreign image");
    // (The first test's source volume may wait in the trash too: its clones are gone, the pool's sweep has not come by yet.)
    assert.deepEqual(
      actions.filter((a) => [leaked, tmp, trashed].includes(a.imageName)).map((a) => [a.type, a.imageName, a.outcome]),
      [
        ["removeLeakedImage", leaked, "done"],
        ["removeTempImage", tmp, "done"],
        ["purgeTrash", trashed, "done"],
      ],
    );
    const left = (await ceph.rbdAsUser(["ls", "rbd"])) as string[];
    assert.deepEqual(
      [leaked, bare, others, otherLog, tmp].filter((n) => left.includes(n)),
      [bare, others, otherLog],
    );
    assert.ok(!(await trash()).includes(trashed), "purged from the trash");
    const after = await csictl("--json", "verify", "--older-than", "0");
    assert.equal(after.code, 0, `foreign images do not fail verify: ${after.stdout}`);
    assert.equal((JSON.parse(after.stdout) as { counts: { foreignImages?: number } }).counts.foreignImages, 3);
    for (const n of [bare, others, otherLog]) await ceph.rbd(["rm", `rbd/${n}`]);
  });

  for (const point of [
    { crashAfter: "image:create", what: "between creating the image and the reservation's one write", leaked: true },
    { crashAfter: "VolumeCreated", what: "after the reservation's one write, before the projection", leaked: false },
  ]) {
    test(`a journal SIGKILLed ${point.what}: csictl verify finds what it left, csictl gc --apply removes it, rbd ls shows nothing left, verify is clean`, async () => {
      const capability = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
      const name = `pvc-crash-${point.leaked ? "image" : "written"}`;
      const createOn = (requestId: string, timeoutMs?: number) =>
        j.client.call(
          CLUSTER,
          "volume.create",
          { requestId, name, sizeBytes: 4 * MiB, pool: "ceph", capabilities: capability },
          timeoutMs ? { timeoutMs } : {},
        );
      const ours = async () => ((await ceph.rbdAsUser(["ls", "rbd"])) as string[]).filter((n) => n.startsWith("csi-vol-") || n.startsWith(".tmp-")).sort();
      const before = await ours();
      await journal.whileDown(async (own) => {
        const crashing = await own({ JOURNAL_CRASH_AFTER: point.crashAfter, LOCK_TTL_MS: "1000" });
        const outcome = await createOn(`crash-${point.crashAfter}`, 10_000).then(
          () => "answered",
          (e: DriverError) => e.code,
        );
        assert.equal(outcome, "Unavailable", "the crashing replica never answers");
        assert.equal(await crashing.exited, null, "killed by signal");
        await journal.start();
      });
      const [image, ...more] = (await ours()).filter((n) => !before.includes(n));
      assert.ok(image && more.length === 0, "the dead writer made one image, before any event");
      assert.equal((JSON.parse((await meta(image))[OWNER_KEY] ?? "{}") as { name?: string }).name, name, "the image names its request");
      const csictl = csictlOf(() => j, CLUSTER);
      const verify = await csictl("--json", "verify", "--older-than", "0");
      assert.equal(verify.code, point.leaked ? 1 : 0, verify.stderr);
      const found = JSON.parse(verify.stdout) as { counts: Record<string, number>; findings: Finding[] };
      assert.deepEqual(
        [found.counts.leakedImages, found.counts.orphanedReservations],
        [point.leaked ? 1 : 0, 0],
        point.leaked ? "an image no record names: leaked" : "the one write landed whole: nothing to find",
      );
      if (point.leaked) {
        const leak = found.findings.find((f) => f.type === "leakedImage");
        assert.ok(leak?.type === "leakedImage" && leak.imageName === image && leak.owner?.name === name, verify.stdout);
        const gc = await csictl("--json", "gc", "--apply", "--older-than", "0", "--request-id", `gc-${point.crashAfter}`);
        assert.equal(gc.code, 0, gc.stderr);
        assert.deepEqual(
          (JSON.parse(gc.stdout) as { actions: { type: string; outcome: string }[] }).actions.map((a) => [a.type, a.outcome]),
          [["removeLeakedImage", "done"]],
        );
        assert.deepEqual(await ours(), before, "rbd ls (as the driver's user): nothing left");
        const clean = await csictl("verify", "--older-than", "0");
        assert.equal(clean.code, 0, `${clean.stdout}${clean.stderr}`);
        assert.match(clean.stderr, /^clean(;|$)/m);
      }

      // The CO's retry: a volume made afresh after a leak; the dead writer's own volume after its one write.
      const v = await createOn(`retry-${point.crashAfter}`);
      assert.equal(`csi-vol-${v.uuid}` === image, !point.leaked, point.leaked ? "a new volume" : "the volume the log holds");
      assert.deepEqual(await ours(), [...before, `csi-vol-${v.uuid}`].sort(), "exactly one image");
      await j.client.call(CLUSTER, "volume.delete", { requestId: `rm-${point.crashAfter}`, uuid: v.uuid });
      assert.deepEqual(await ours(), before);
    });
  }
});
