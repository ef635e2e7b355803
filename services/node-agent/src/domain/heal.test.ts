import assert from "node:assert/strict";
import { test } from "node:test";
import { planHeal } from "./heal.js";
import type { MountEntry } from "./mountinfo.js";
import type { NodeState, VolumeState } from "./node-state.js";

const mnt = (mountPoint: string, source: string): MountEntry => ({
  mountId: 1,
  parentId: 0,
  majorMinor: "7:0",
  root: "/",
  mountPoint,
  options: ["rw"],
  optionalFields: [],
  fsType: "ext4",
  source,
  superOptions: [],
});
const vol = (id: string, more: Partial<VolumeState> = {}): VolumeState => ({
  volumeId: id,
  clusterID: "c",
  uuid: id,
  imagePath: `/pool/${id}.img`,
  readOnly: false,
  staging: { path: `/stage/${id}`, capability: { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" } },
  publishes: [{ target: `/pub/${id}/a`, readOnly: false }],
  ...more,
});
const state = (...vs: VolumeState[]): NodeState => ({ version: 1, volumes: Object.fromEntries(vs.map((v) => [v.volumeId, v])) });

test("heal: everything in place → nothing to do", () => {
  const seen = { loops: [{ device: "/dev/loop1", backingFile: "/pool/v1.img" }], mounts: [mnt("/stage/v1", "/dev/loop1"), mnt("/pub/v1/a", "/dev/loop1")] };
  assert.deepEqual(planHeal(state(vol("v1")), seen, ["/pool"]), []);
});

test("heal: detached device → attach, remount staging from the stale device, re-publish", () => {
  const seen = { loops: [], mounts: [mnt("/stage/v1", "/dev/loop1")] };
  assert.deepEqual(planHeal(state(vol("v1", { device: "/dev/loop1" })), seen, ["/pool"]), [
    { kind: "attach", volumeId: "v1" },
    { kind: "mount-staging", volumeId: "v1", remountFrom: "/dev/loop1" },
    { kind: "publish", volumeId: "v1", target: "/pub/v1/a" },
  ]);
});

test("heal: an unmounted target → publish only", () => {
  const seen = { loops: [{ device: "/dev/loop1", backingFile: "/pool/v1.img" }], mounts: [mnt("/stage/v1", "/dev/loop1")] };
  assert.deepEqual(planHeal(state(vol("v1")), seen, ["/pool"]), [{ kind: "publish", volumeId: "v1", target: "/pub/v1/a" }]);
});

test("heal: leftovers of our pools are unmounted then detached; foreign loops are left alone", () => {
  const seen = {
    loops: [
      { device: "/dev/loop2", backingFile: "/pool/old.img" },
      { device: "/dev/loop3", backingFile: "/elsewhere/x.img" },
    ],
    mounts: [mnt("/stage/old", "/dev/loop2"), mnt("/pub/old", "/dev/loop2"), mnt("/mnt/x", "/dev/loop3")],
  };
  assert.deepEqual(planHeal(state(), seen, ["/pool"]), [
    { kind: "unmount", path: "/pub/old", reason: "leftover mount of /dev/loop2" },
    { kind: "unmount", path: "/stage/old", reason: "leftover mount of /dev/loop2" },
    { kind: "detach", device: "/dev/loop2", backingFile: "/pool/old.img", reason: "no volume on this node wants it" },
  ]);
});

test("heal: block volumes have no staging mount to check", () => {
  const v = vol("b1", { staging: { path: "/stage/b1", capability: { accessType: "block", accessMode: "SINGLE_NODE_WRITER" } }, publishes: [] });
  assert.deepEqual(planHeal(state(v), { loops: [], mounts: [] }, ["/pool"]), [{ kind: "attach", volumeId: "b1" }]);
});

test("heal: a foreign mount at a staging path or target is a conflict, never unmounted", () => {
  const seen = { loops: [{ device: "/dev/loop1", backingFile: "/pool/v1.img" }], mounts: [mnt("/stage/v1", "tmpfs"), mnt("/pub/v1/a", "/dev/loop9")] };
  assert.deepEqual(
    planHeal(state(vol("v1", { device: "/dev/loop1" })), seen, ["/pool"]).map((a) => `${a.kind} ${"path" in a ? a.path : ""}`),
    ["conflict /stage/v1", "conflict /pub/v1/a"],
  );
});

test("heal: a target still bound to the volume's old device is re-published in place of it", () => {
  const seen = { loops: [{ device: "/dev/loop2", backingFile: "/pool/v1.img" }], mounts: [mnt("/stage/v1", "/dev/loop2"), mnt("/pub/v1/a", "/dev/loop1")] };
  assert.deepEqual(planHeal(state(vol("v1", { device: "/dev/loop1" })), seen, ["/pool"]), [
    { kind: "publish", volumeId: "v1", target: "/pub/v1/a", replace: "/dev/loop1" },
  ]);
});
