/** What the nodes hold of a volume, from their reports, corrected by their registrations (devices.ts). */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { JournalEvent } from "@csi/contracts";
import { deviceHolds, deviceUse, reconcileHolds } from "./devices.js";

const V = "6f0c3c2e-1111-4222-8333-444455556666";
const report = (state: string, at: string, more: Record<string, unknown> = {}, nodeId = "n1") =>
  ({
    type: "DeviceStateReported",
    uuid: V,
    nodeId,
    state,
    via: "grpc",
    at,
    v: 1,
    requestId: "r",
    actor: { service: "journal", replica: "1" },
    time: at,
    ...more,
  }) as JournalEvent;
const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();

test("holds: each step sets what it made and its undo clears it; failed, healed and limited change nothing; a node that let go is left out", () => {
  const staged = [report("attached", T(1), { device: "/dev/loop3" }), report("staged", T(2), { path: "/s" }), report("published", T(3), { path: "/t1" })];
  assert.deepEqual(deviceHolds(staged), [{ nodeId: "n1", device: "/dev/loop3", staged: "/s", published: ["/t1"], lastAt: T(3) }]);
  const undone = [
    ...staged,
    report("failed", T(4)),
    report("unpublished", T(5), { path: "/t1" }),
    report("unstaged", T(6), { path: "/s" }),
    report("detached", T(7)),
  ];
  assert.deepEqual(deviceHolds(undone), []);
  assert.deepEqual(deviceUse(undone).reported, 7);
  const two = [...staged, report("attached", T(4), { device: "/dev/loop9" }, "n2")];
  assert.deepEqual(
    deviceHolds(two).map((h) => h.nodeId),
    ["n1", "n2"],
  );
});

test("a registration later than a node's last report, not listing the volume, says the node let go (its report was lost); listing it, or earlier, or silent, changes nothing", () => {
  const use = deviceUse([report("attached", T(1), { device: "/dev/loop3" }), report("staged", T(2), { path: "/s" })]);
  const reg = (time: string, holding?: string[]) => new Map([["n1", { time, ...(holding ? { holding } : {}) }]]);
  assert.deepEqual(reconcileHolds(use, { clusterID: "c1", uuid: V }, reg(T(9), [])).holds, [], "let go");
  assert.deepEqual(
    reconcileHolds(use, { clusterID: "c1", uuid: V }, reg(T(9), [`c2/${V}`])).holds,
    [],
    "another cluster's volume of that uuid is not this one",
  );
  assert.equal(reconcileHolds(use, { clusterID: "c1", uuid: V }, reg(T(9), [`c1/${V}`])).holds.length, 1, "still held by its own state");
  assert.equal(reconcileHolds(use, { clusterID: "c1", uuid: V }, reg(T(1), [])).holds.length, 1, "a registration older than the report says nothing of it");
  assert.equal(reconcileHolds(use, { clusterID: "c1", uuid: V }, reg(T(9))).holds.length, 1, "an agent that lists nothing: the reports count");
  assert.equal(reconcileHolds(use, { clusterID: "c1", uuid: V }, new Map()).holds.length, 1, "no registration: the reports count");
});
