import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MountEntry } from "./mountinfo.js";
import type { VolumeState } from "./node-state.js";
import { type PathSeen, placeMount, planUnpublish } from "./placement.js";

const mnt = (source: string, fsType = "ext4"): MountEntry => ({
  mountId: 1,
  parentId: 0,
  majorMinor: "7:0",
  root: "/",
  mountPoint: "/t",
  options: ["rw"],
  optionalFields: [],
  fsType,
  source,
  superOptions: [],
});
const seen = (more: Partial<PathSeen> = {}): PathSeen => ({ path: "/t", kind: "absent", empty: false, parentIsDir: true, mounts: [], ...more });
const ours = (m: MountEntry) => m.source === "/dev/loop1";
const kind = (p: { kind: string; code?: string }) => (p.code ? `${p.kind}:${p.code}` : p.kind);

describe("placeMount", () => {
  for (const [name, s, want, expect] of [
    ["nothing there, parent exists → create", seen(), "dir", "mount"],
    ["nothing there, no parent → refuse", seen({ parentIsDir: false }), "dir", "refuse:FailedPrecondition"],
    ["an empty directory → mount on it", seen({ kind: "dir", empty: true }), "dir", "mount"],
    ["a directory with entries → refuse", seen({ kind: "dir", empty: false }), "dir", "refuse:FailedPrecondition"],
    ["a file for a filesystem → refuse", seen({ kind: "file", empty: true }), "dir", "refuse:FailedPrecondition"],
    ["an empty file for a device → mount on it", seen({ kind: "file", empty: true }), "file", "mount"],
    ["a file with data for a device → refuse", seen({ kind: "file", empty: false }), "file", "refuse:FailedPrecondition"],
    ["a directory for a device → refuse", seen({ kind: "dir", empty: true }), "file", "refuse:FailedPrecondition"],
    ["a symlink or device node → refuse", seen({ kind: "other" }), "dir", "refuse:FailedPrecondition"],
    ["our mount → already there", seen({ kind: "dir", mounts: [mnt("/dev/loop1")] }), "dir", "mounted"],
    ["a foreign mount → refuse", seen({ kind: "dir", mounts: [mnt("tmpfs", "tmpfs")] }), "dir", "refuse:FailedPrecondition"],
    ["a foreign mount over ours → refuse", seen({ kind: "dir", mounts: [mnt("/dev/loop1"), mnt("tmpfs", "tmpfs")] }), "dir", "refuse:FailedPrecondition"],
  ] as const) {
    it(name, () => assert.equal(kind(placeMount(s, want, ours)), expect));
  }
  it("says whether the agent creates the path", () => {
    assert.deepEqual(placeMount(seen(), "dir", ours), { kind: "mount", create: true });
    assert.deepEqual(placeMount(seen({ kind: "dir", empty: true }), "dir", ours), { kind: "mount", create: false });
  });
});

describe("planUnpublish", () => {
  const vol = (publishes: VolumeState["publishes"]): VolumeState => ({
    volumeId: "v",
    clusterID: "c",
    uuid: "u",
    imagePath: "/p/i.img",
    readOnly: false,
    publishes,
  });
  it("unknown volume, nothing there → OK, nothing done", () => assert.deepEqual(planUnpublish(undefined, seen(), ours), { kind: "nothing" }));
  for (const [name, s] of [
    ["a regular file", seen({ kind: "file" })],
    ["a foreign mount", seen({ kind: "dir", mounts: [mnt("tmpfs", "tmpfs")] })],
    ["an empty directory", seen({ kind: "dir", empty: true })],
  ] as const) {
    it(`unknown volume, ${name} → NOT_FOUND, untouched`, () => assert.equal(kind(planUnpublish(undefined, s, ours)), "refuse:NotFound"));
  }
  it("recorded and made by the agent → unmount, remove", () =>
    assert.deepEqual(planUnpublish(vol([{ target: "/t", readOnly: false, made: true }]), seen({ kind: "dir", mounts: [mnt("/dev/loop1")] }), ours), {
      kind: "undo",
      remove: "made",
      recorded: true,
    }));
  it("recorded, made by the CO → unmount, keep the target", () =>
    assert.equal(planUnpublish(vol([{ target: "/t", readOnly: false, made: false }]), seen({ kind: "dir" }), ours).kind === "undo", true));
  it("recorded by an older agent → remove only an empty directory", () =>
    assert.deepEqual(planUnpublish(vol([{ target: "/t", readOnly: false }]), seen({ kind: "dir" }), ours), {
      kind: "undo",
      remove: "empty-dir",
      recorded: true,
    }));
  it("recorded, but a foreign mount covers it → FAILED_PRECONDITION", () =>
    assert.equal(
      kind(planUnpublish(vol([{ target: "/t", readOnly: false, made: true }]), seen({ kind: "dir", mounts: [mnt("/dev/loop1"), mnt("x", "tmpfs")] }), ours)),
      "refuse:FailedPrecondition",
    ));
  it("not recorded, but our mount is there (stopped before saving) → unmount, remove nothing", () =>
    assert.deepEqual(planUnpublish(vol([]), seen({ kind: "dir", mounts: [mnt("/dev/loop1")] }), ours), { kind: "undo", remove: "none", recorded: false }));
  it("not recorded, a foreign mount or a file → not published there: OK, nothing done", () => {
    assert.deepEqual(planUnpublish(vol([]), seen({ kind: "dir", mounts: [mnt("x", "tmpfs")] }), ours), { kind: "nothing" });
    assert.deepEqual(planUnpublish(vol([]), seen({ kind: "file" }), ours), { kind: "nothing" });
  });
});
