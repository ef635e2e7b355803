/**
 * Who asked, in a volume's history (docs/deploy.md, "Who asked: PVC, VolumeSnapshot, pod"): the
 * parameters Kubernetes' sidecars pass with --extra-create-metadata (CreateVolume: the PVC and PV;
 * CreateSnapshot: the VolumeSnapshot and its content) and the volume_context the kubelet passes to
 * NodePublishVolume with the CSIDriver's podInfoOnMount (the pod) are recorded, and `csictl
 * history` names them. Real servers, the journal, the controller and the node-agent as processes,
 * calls on their CSI sockets as the sidecars and the kubelet make them, a real loop device, a real
 * filesystem and bind mount; csictl run as `npx csictl` runs it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { DeviceStateReported, decomposeVolumeId, type JournalEvent, subjects } from "@csi/contracts";
import { CLUSTER, codeOf, FS_MIN_BYTES, loopsUnder, mountCap, NodeStack, runCsictl, whyNoDevices } from "@csi/testkit";
import { jetstream } from "@nats-io/jetstream";

const skip = whyNoDevices();
const K = "csi.storage.k8s.io/";
const INVALID_ARGUMENT = 3;
/** What external-provisioner --extra-create-metadata adds to CreateVolume's parameters. */
const PVC = { [`${K}pvc/name`]: "data-db-0", [`${K}pvc/namespace`]: "shop", [`${K}pv/name`]: "pvc-6f1d2a4e-1b7c-4c55-9c3e-0a1b2c3d4e5f" };
/** What the kubelet adds to NodePublishVolume's volume_context with podInfoOnMount: true (tokens only with tokenRequests). */
const POD = {
  [`${K}pod.name`]: "db-0",
  [`${K}pod.namespace`]: "shop",
  [`${K}pod.uid`]: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
  [`${K}serviceAccount.name`]: "db",
  [`${K}ephemeral`]: "false",
  [`${K}serviceAccount.tokens`]: '{"vault":{"token":"TOKEN-NEVER-KEPT","expirationTimestamp":"2026-01-01T00:00:00Z"}}',
};
const WAIT_MS = 60_000;

let s: NodeStack;

/** csictl against the stack's servers (as an operator runs it with NATS_URL and the clusters file). */
const csictl = (...args: string[]) =>
  runCsictl(["--cluster", CLUSTER, ...args], { NATS_URL: s.base.NATS_URL, REDIS_URL: s.base.REDIS_URL, CLUSTERS_FILE: s.clustersFile, RUN_DIR: s.root });

/** Wait for a volume's device report in `state` as it lands in the log (an ordered consumer of its device subject). */
async function deviceEvent(uuid: string, state: string): Promise<ReturnType<typeof DeviceStateReported.parse>> {
  const consumer = await jetstream(s.nc).consumers.get(subjects.streamName(CLUSTER), { filter_subjects: subjects.deviceEvents(CLUSTER, uuid) });
  const messages = await consumer.consume();
  const timer = setTimeout(() => messages.stop(new Error(`no ${state} report of ${uuid} within ${WAIT_MS} ms`)), WAIT_MS);
  try {
    for await (const m of messages) {
      const e = DeviceStateReported.parse(m.json());
      if (e.state === state) return e;
    }
    throw new Error(`the log's consumer of ${uuid} ended without a ${state} report`);
  } finally {
    clearTimeout(timer);
    messages.stop();
  }
}

describe("Kubernetes names the PVC, the VolumeSnapshot and the pod; the history shows them", { skip }, () => {
  before(async () => {
    s = await NodeStack.start();
  });
  after(async () => {
    await s?.stop();
  });

  const create = (name: string, parameters: Record<string, string>) =>
    s.ctrl.CreateVolume({ name, volume_capabilities: [mountCap()], capacity_range: { required_bytes: String(FS_MIN_BYTES) }, parameters });

  test("CreateVolume with the PVC, a node publish for a pod, its unpublish: csictl history names the PVC and the pod", async () => {
    const name = PVC[`${K}pv/name`] as string;
    const v = (await create(name, PVC)).volume!;
    const id = v.volume_id;
    const { uuid } = decomposeVolumeId(id);
    // The keys are metadata: not in the volume's parameters (its context), and a repeat with other ones is the same volume.
    assert.ok(!Object.keys(v.volume_context ?? {}).some((k) => k.startsWith(K)), "no csi.storage.k8s.io/ key in the volume_context");
    const again = (await create(name, { ...PVC, [`${K}pvc/name`]: "renamed" })).volume!;
    assert.equal(again.volume_id, id, "a repeat with other metadata is the same volume");

    const pub = await s.ctrl.ControllerPublishVolume({ volume_id: id, node_id: s.nodeId, volume_capability: mountCap(), readonly: false });
    const staging = s.kubelet("plugins", "kubernetes.io", "csi", "staging", uuid);
    const target = s.kubelet("pods", POD[`${K}pod.uid`] as string, "volumes", "kubernetes.io~csi", name, "mount");
    await s.node.NodeStageVolume({ volume_id: id, staging_target_path: staging, volume_capability: mountCap(), publish_context: pub.publish_context });
    // A pod name Kubernetes could not have made is refused before anything is mounted.
    const bad = { ...v.volume_context, ...POD, [`${K}pod.name`]: "DB 0" };
    const publish = (volume_context: Record<string, string>) =>
      s.node.NodePublishVolume({
        volume_id: id,
        staging_target_path: staging,
        target_path: target,
        volume_capability: mountCap(),
        readonly: false,
        publish_context: pub.publish_context,
        volume_context,
      });
    assert.equal(await codeOf(publish(bad)), INVALID_ARGUMENT);
    await publish({ ...v.volume_context, ...POD });
    await s.node.NodeUnpublishVolume({ volume_id: id, target_path: target });
    await s.node.NodeUnstageVolume({ volume_id: id, staging_target_path: staging });
    await s.ctrl.ControllerUnpublishVolume({ volume_id: id, node_id: s.nodeId });
    await deviceEvent(uuid, "detached");
    assert.deepEqual(await loopsUnder(s.root), [], "the device is detached");

    const table = await csictl("history", id);
    assert.equal(table.code, 0, table.stderr);
    const rowOf = (type: string, has = "") => table.stdout.split("\n").find((l) => l.includes(type) && l.includes(has)) ?? "";
    assert.match(rowOf("VolumeReserved"), /pvc shop\/data-db-0, pv pvc-6f1d2a4e-1b7c-4c55-9c3e-0a1b2c3d4e5f/, table.stdout);
    const forPod = /for pod shop\/db-0 \(uid 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d, service account db\)/;
    assert.match(rowOf("DeviceStateReported", "published"), forPod, table.stdout);
    assert.match(rowOf("DeviceStateReported", "unpublished"), forPod, "the unpublish names the pod its publish was for");
    assert.doesNotMatch(table.stdout, /TOKEN-NEVER-KEPT|renamed/, "no token; the repeat's metadata is not recorded");

    const json = await csictl("--json", "history", id);
    assert.equal(json.code, 0, json.stderr);
    const list = (JSON.parse(json.stdout) as { items: { events: { event: JournalEvent }[] }[] }).items.flatMap((f) => f.events.map((e) => e.event));
    const reserved = list.filter((e) => e.type === "VolumeReserved");
    assert.equal(reserved.length, 1, "one reservation: the repeat appended none");
    assert.deepEqual(reserved[0]?.type === "VolumeReserved" && reserved[0].kubernetes, {
      pvcNamespace: "shop",
      pvcName: "data-db-0",
      pvName: "pvc-6f1d2a4e-1b7c-4c55-9c3e-0a1b2c3d4e5f",
    });
    assert.ok(!JSON.stringify(reserved[0]?.type === "VolumeReserved" && reserved[0].parameters).includes(K), "the keys are not the volume's parameters");
    const published = list.find((e) => e.type === "DeviceStateReported" && e.state === "published");
    assert.deepEqual(published?.type === "DeviceStateReported" && published.pod, {
      namespace: "shop",
      name: "db-0",
      uid: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
      serviceAccount: "db",
      ephemeral: false,
    });
  });

  test("CreateSnapshot with the VolumeSnapshot: csictl history of the snapshot names it", async () => {
    const source = (await create("pvc-snap-source", {})).volume!;
    const snap = await s.ctrl.CreateSnapshot({
      name: "snapshot-2d4f6a8c",
      source_volume_id: source.volume_id,
      parameters: {
        [`${K}volumesnapshot/name`]: "db-nightly",
        [`${K}volumesnapshot/namespace`]: "shop",
        [`${K}volumesnapshotcontent/name`]: "snapcontent-2d4f6a8c",
      },
    });
    const h = await csictl("history", snap.snapshot!.snapshot_id);
    assert.equal(h.code, 0, h.stderr);
    assert.match(h.stdout, /SnapshotReserved .*volumesnapshot shop\/db-nightly, content snapcontent-2d4f6a8c/, h.stdout);
  });

  test("a PVC name Kubernetes could not have made is INVALID_ARGUMENT, and nothing is reserved", async () => {
    assert.equal(await codeOf(create("pvc-bad-meta", { ...PVC, [`${K}pvc/namespace`]: "Shop_EU" })), INVALID_ARGUMENT);
    assert.equal(await codeOf(create("pvc-bad-meta", { ...PVC, [`${K}pv/name`]: "x".repeat(254) })), INVALID_ARGUMENT);
    const h = await csictl("history", "--name", "pvc-bad-meta");
    assert.doesNotMatch(h.stdout, /VolumeReserved/, `${h.stdout}${h.stderr}`);
  });
});
