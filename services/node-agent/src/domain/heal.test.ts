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

const fuseVol = (id: string, more: Partial<VolumeState> = {}) => vol(id, { imagePath: `/rbd/c-2-${id}/${id}`, mapping: "fuse", device: "/dev/loop1", ...more });

test("heal: rbd-fuse alive and everything mounted → nothing to do", () => {
  const seen = {
    loops: [{ device: "/dev/loop1", backingFile: "/rbd/c-2-r1/r1" }],
    mounts: [mnt("/stage/r1", "/dev/loop1"), mnt("/pub/r1/a", "/dev/loop1")],
    fuseMounts: ["/rbd/c-2-r1"],
  };
  assert.deepEqual(planHeal(state(fuseVol("r1")), seen, ["/rbd"]), []);
});

test("heal: rbd-fuse died → every mount of the stale loop device unmounted (latest first), the device detached, then attach, mount, publish anew", () => {
  const seen = {
    loops: [
      { device: "/dev/loop1", backingFile: "/rbd/c-2-r1/r1" },
      { device: "/dev/loop2", backingFile: "/rbd/c-2-r2/r2" },
    ],
    mounts: [mnt("/stage/r1", "/dev/loop1"), mnt("/stage/r2", "/dev/loop2"), mnt("/pub/r1/a", "/dev/loop1"), mnt("/pub/r2/a", "/dev/loop2")],
    deadMappings: ["/rbd/c-2-r1"],
    fuseMounts: ["/rbd/c-2-r1", "/rbd/c-2-r2"],
  };
  const plan = planHeal(state(fuseVol("r1"), fuseVol("r2", { device: "/dev/loop2" })), seen, ["/rbd"]);
  assert.deepEqual(
    plan.map((a) => `${a.kind} ${"path" in a ? a.path : "device" in a ? a.device : "target" in a ? a.target : a.volumeId}`),
    ["unmount /pub/r1/a", "unmount /stage/r1", "detach /dev/loop1", "attach r1", "mount-staging r1", "publish /pub/r1/a"],
  );
  assert.ok(
    plan.every((a) => !("remountFrom" in a) && !("replace" in a)),
    "nothing is left to replace: the stale mounts are gone first",
  );
  assert.deepEqual(
    plan.slice(0, 3).map((a) => ("volumeId" in a ? a.volumeId : undefined)),
    ["r1", "r1", "r1"],
    "the teardown names the volume whose repair waits for it",
  );
});

test("heal: rbd-fuse mount gone (after a reboot) → attach (which starts rbd-fuse), mount, publish", () => {
  assert.deepEqual(
    planHeal(state(fuseVol("r1")), { loops: [], mounts: [] }, ["/rbd"]).map((a) => a.kind),
    ["attach", "mount-staging", "publish"],
  );
});

test("heal: an rbd-fuse mount of ours no volume wants → its loop device detached, then unmapped", () => {
  const seen = { loops: [{ device: "/dev/loop3", backingFile: "/rbd/c-2-old/old" }], mounts: [mnt("/stage/old", "/dev/loop3")], fuseMounts: ["/rbd/c-2-old"] };
  assert.deepEqual(planHeal(state(), seen, ["/rbd"]), [
    { kind: "unmount", path: "/stage/old", reason: "leftover mount of /dev/loop3" },
    { kind: "detach", device: "/dev/loop3", backingFile: "/rbd/c-2-old/old", reason: "no volume on this node wants it" },
    { kind: "unmap", path: "/rbd/c-2-old", reason: "no volume on this node wants this rbd-fuse mount" },
  ]);
});

test("heal: a loop device whose image was deleted under it is detached when nothing mounts it; mounted, it is a conflict, left alone; a foreign one is not ours", () => {
  const deleted = { device: "/dev/loop4", backingFile: "/pool/v1.img" };
  const unstaged = vol("v1", { staging: undefined, publishes: [], device: "/dev/loop4" });
  assert.deepEqual(planHeal(state(unstaged), { loops: [], deletedLoops: [deleted], mounts: [] }, ["/pool"]), [
    { kind: "attach", volumeId: "v1" },
    { kind: "detach", device: "/dev/loop4", backingFile: "/pool/v1.img", reason: "its image was deleted", volumeId: "v1" },
  ]);
  const mounted = planHeal(state(vol("v1", { device: "/dev/loop4" })), { loops: [], deletedLoops: [deleted], mounts: [mnt("/stage/v1", "/dev/loop4")] }, [
    "/pool",
  ]);
  assert.ok(
    mounted.some((a) => a.kind === "conflict" && /deleted while it was mounted/.test(a.reason)),
    JSON.stringify(mounted),
  );
  assert.ok(!mounted.some((a) => a.kind === "detach" || a.kind === "unmount"), "never taken down: its data lives only in the device");
  assert.deepEqual(planHeal(state(), { loops: [], deletedLoops: [{ device: "/dev/loop5", backingFile: "/elsewhere/x.img" }], mounts: [] }, ["/pool"]), []);
});
