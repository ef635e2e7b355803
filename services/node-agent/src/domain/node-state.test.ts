/** NodePublishVolume's checks on the node's own state (given the state, when a publish, then the refusal). */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { AccessMode } from "@csi/contracts";
import { checkPublish, type VolumeState } from "./node-state.js";

const staged = (accessMode: AccessMode, targets: string[]): VolumeState => ({
  volumeId: "v",
  clusterID: "c1",
  uuid: "00000000-0000-4000-8000-000000000001",
  imagePath: "/pools/default/csi-vol-1.img",
  readOnly: false,
  staging: { path: "/staging", capability: { accessType: "mount", accessMode } },
  publishes: targets.map((target) => ({ target, readOnly: false, made: true })),
});

test("publish: not staged, or staged elsewhere, is FailedPrecondition", () => {
  assert.equal(checkPublish(undefined, "/staging", "/t1", false)?.code, "FailedPrecondition");
  assert.equal(checkPublish(staged("SINGLE_NODE_WRITER", []), "/other", "/t1", false)?.code, "FailedPrecondition");
});

test("publish: SINGLE_NODE_SINGLE_WRITER at a second target path is FailedPrecondition; the same target again is fine", () => {
  const v = staged("SINGLE_NODE_SINGLE_WRITER", ["/t1"]);
  assert.equal(checkPublish(v, "/staging", "/t2", false)?.code, "FailedPrecondition");
  assert.equal(checkPublish(v, "/staging", "/t1", false), undefined);
  assert.equal(checkPublish(staged("SINGLE_NODE_SINGLE_WRITER", []), "/staging", "/t1", false), undefined);
});

test("publish: SINGLE_NODE_MULTI_WRITER and SINGLE_NODE_WRITER publish at several target paths", () => {
  for (const mode of ["SINGLE_NODE_MULTI_WRITER", "SINGLE_NODE_WRITER"] as const) {
    assert.equal(checkPublish(staged(mode, ["/t1"]), "/staging", "/t2", false), undefined, mode);
  }
});

test("publish: the same target with another read-only flag is AlreadyExists", () => {
  assert.equal(checkPublish(staged("SINGLE_NODE_WRITER", ["/t1"]), "/staging", "/t1", true)?.code, "AlreadyExists");
});
