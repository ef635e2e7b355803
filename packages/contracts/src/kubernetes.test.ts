/**
 * What the Kubernetes sidecars and the kubelet pass about the objects behind a call: read from the
 * keys they use, checked as Kubernetes checks the fields, a bad one refused naming its key and
 * never echoing its value; other keys of the prefix (secrets among them) never read. Pure.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "./errors.js";
import { namespacedName, podInfoOf, snapshotRequesterOf, volumeRequesterOf } from "./kubernetes.js";

const K = "csi.storage.k8s.io/";

/** The call throws InvalidArgument whose message matches `re` and does not contain `secret`. */
function refused(f: () => unknown, re: RegExp, secret?: string): void {
  assert.throws(f, (err: unknown) => {
    assert.ok(err instanceof DriverError, String(err));
    assert.equal(err.code, "InvalidArgument");
    assert.match(err.message, re);
    if (secret) assert.ok(!err.message.includes(secret), `the value is not echoed: ${err.message}`);
    return true;
  });
}

describe("Kubernetes metadata", () => {
  test("CreateVolume: external-provisioner's three keys; the rest of the parameters ignored", () => {
    const params = { [`${K}pvc/name`]: "data-db-0", [`${K}pvc/namespace`]: "shop", [`${K}pv/name`]: "pvc-0b1c", [`${K}fstype`]: "ext4", pool: "fast" };
    assert.deepEqual(volumeRequesterOf(params), { pvcNamespace: "shop", pvcName: "data-db-0", pvName: "pvc-0b1c" });
    assert.equal(volumeRequesterOf({ pool: "fast" }), undefined);
    assert.equal(volumeRequesterOf(undefined), undefined);
    assert.equal(volumeRequesterOf({ [`${K}pvc/name`]: "" }), undefined, "an empty value is no value");
  });

  test("CreateSnapshot: external-snapshotter's three keys", () => {
    const params = { [`${K}volumesnapshot/name`]: "daily", [`${K}volumesnapshot/namespace`]: "shop", [`${K}volumesnapshotcontent/name`]: "snapcontent-1" };
    assert.deepEqual(snapshotRequesterOf(params), { volumeSnapshotNamespace: "shop", volumeSnapshotName: "daily", volumeSnapshotContentName: "snapcontent-1" });
  });

  test("NodePublishVolume: the kubelet's pod keys; ephemeral as a boolean; the service account tokens never read", () => {
    const ctx = {
      [`${K}pod.name`]: "web-0",
      [`${K}pod.namespace`]: "shop",
      [`${K}pod.uid`]: "0b1c2d3e-0000-4000-8000-000000000001",
      [`${K}serviceAccount.name`]: "web",
      [`${K}ephemeral`]: "false",
      [`${K}serviceAccount.tokens`]: '{"":{"token":"SECRET-TOKEN"}}',
      clusterID: "local",
      imageName: "csi-vol-x",
    };
    const pod = podInfoOf(ctx);
    assert.deepEqual(pod, { namespace: "shop", name: "web-0", uid: "0b1c2d3e-0000-4000-8000-000000000001", serviceAccount: "web", ephemeral: false });
    assert.ok(!JSON.stringify(pod).includes("SECRET"), "no token kept");
    assert.equal(podInfoOf({ clusterID: "local" }), undefined, "a caller that names no pod (podInfoOnMount off, Nomad)");
    // A static pod's uid is a hash, not a UUID.
    assert.equal(podInfoOf({ [`${K}pod.uid`]: "5b0e1c0a6c3f4f0b9d8e7f6a5b4c3d2e" })?.uid, "5b0e1c0a6c3f4f0b9d8e7f6a5b4c3d2e");
  });

  test("bounds: names of 253 characters and namespaces of 63 pass; one more is refused, naming the key", () => {
    const long = (n: number) => `${"a".repeat(n - 1)}b`;
    const dotted = `${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`;
    assert.equal(dotted.length, 253);
    assert.equal(volumeRequesterOf({ [`${K}pv/name`]: dotted })?.pvName, dotted);
    assert.equal(volumeRequesterOf({ [`${K}pvc/namespace`]: long(63) })?.pvcNamespace, long(63));
    refused(() => volumeRequesterOf({ [`${K}pv/name`]: `${dotted}x` }), /parameters csi\.storage\.k8s\.io\/pv\/name: must be at most 253 characters/);
    refused(() => volumeRequesterOf({ [`${K}pvc/namespace`]: long(64) }), /csi\.storage\.k8s\.io\/pvc\/namespace: must be at most 63 characters/);
    refused(() => podInfoOf({ [`${K}pod.uid`]: "u".repeat(65) }), /volume_context csi\.storage\.k8s\.io\/pod\.uid/);
  });

  test("a value Kubernetes could not have made is InvalidArgument naming its key, the value not echoed", () => {
    refused(
      () => volumeRequesterOf({ [`${K}pvc/name`]: "Data DB\n\u001b[31m" }),
      /parameters csi\.storage\.k8s\.io\/pvc\/name: must be a Kubernetes object name/,
      "\u001b",
    );
    refused(() => volumeRequesterOf({ [`${K}pvc/namespace`]: "shop.eu" }), /pvc\/namespace: must be a Kubernetes namespace/, "shop.eu");
    refused(() => snapshotRequesterOf({ [`${K}volumesnapshot/name`]: "-daily" }), /volumesnapshot\/name: must be a Kubernetes object name/);
    refused(() => podInfoOf({ [`${K}ephemeral`]: "yes" }), /volume_context csi\.storage\.k8s\.io\/ephemeral: must be true or false/);
    refused(() => podInfoOf({ [`${K}pod.name`]: "web/0" }), /pod\.name: must be a Kubernetes object name/);
  });

  test("namespacedName", () => {
    assert.equal(namespacedName("shop", "web-0"), "shop/web-0");
    assert.equal(namespacedName(undefined, "web-0"), "web-0");
    assert.equal(namespacedName("shop", undefined), "");
  });
});
