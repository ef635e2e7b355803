/** The test safety net's own logic: which mounts `cleanupUnder` takes down, in which order. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseMountInfo } from "@csi/node-agent/testing";
import { mountsUnder } from "./machine.js";

const entries = parseMountInfo(
  [
    "27 1 254:0 / / rw - ext4 /dev/vda rw",
    "42 27 7:0 / /var/lib/kubelet/plugins/staging rw - ext4 /dev/loop0 rw",
    "45 42 0:28 / /var/lib/kubelet/plugins/staging/sub rw - tmpfs tmpfs rw",
    "46 27 7:1 / /var/lib/kubelet/plugins/staging rw - xfs /dev/loop1 rw",
    "47 27 7:2 / /var/lib/kubelet/plugins2 rw - xfs /dev/loop2 rw",
  ].join("\n"),
);

describe("mountsUnder", () => {
  it("lists mounts at and below a directory, deepest and latest first", () => {
    assert.deepEqual(
      mountsUnder(entries, "/var/lib/kubelet/plugins").map((e) => e.mountId),
      [45, 46, 42],
    );
  });
  it("accepts a trailing slash", () =>
    assert.deepEqual(
      mountsUnder(entries, "/var/lib/kubelet/plugins/staging/").map((e) => e.mountId),
      [45, 46, 42],
    ));
  it("does not match a sibling with a common prefix", () => assert.deepEqual(mountsUnder(entries, "/var/lib/kubelet/plugins2/x"), []));
  it("takes everything under /", () => assert.equal(mountsUnder(entries, "/").length, 5));
});
