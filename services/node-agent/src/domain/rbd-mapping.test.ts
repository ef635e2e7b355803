import assert from "node:assert/strict";
import { test } from "node:test";
import { RBD_MAPPING_KEY, TOPOLOGY_KEY } from "@csi/contracts";
import { chooseMapping, type MappingFacts, nodeTopology } from "./rbd-mapping.js";

const none: MappingFacts = {
  rbdModule: false,
  rbdBinary: false,
  nbdModule: false,
  rbdNbdBinary: false,
  rbdFuseBinary: false,
  fuseDevice: false,
  loopControl: false,
};
const fuse = { ...none, rbdFuseBinary: true, fuseDevice: true, loopControl: true };
const krbd = { ...none, rbdModule: true, rbdBinary: true };
const nbd = { ...none, nbdModule: true, rbdNbdBinary: true };

test("rbd mapping: this machine (no rbd or nbd module, FUSE and loop) → fuse", () => {
  assert.deepEqual(chooseMapping({ ...fuse, rbdBinary: true }), { kind: "fuse", available: ["fuse"], why: "maps RBD images by fuse" });
});

test("rbd mapping: the preference is krbd, rbd-nbd, fuse, among the kinds that are built", () => {
  const all: MappingFacts = { rbdModule: true, rbdBinary: true, nbdModule: true, rbdNbdBinary: true, rbdFuseBinary: true, fuseDevice: true, loopControl: true };
  assert.equal(chooseMapping(all, ["krbd", "rbd-nbd", "fuse"]).kind, "krbd");
  assert.equal(chooseMapping({ ...all, rbdModule: false }, ["krbd", "rbd-nbd", "fuse"]).kind, "rbd-nbd");
  assert.equal(chooseMapping({ ...all, rbdModule: false, nbdModule: false }, ["krbd", "rbd-nbd", "fuse"]).kind, "fuse");
  // As built today: only fuse; krbd is detected and said to be available, not chosen.
  const c = chooseMapping(all);
  assert.deepEqual([c.kind, c.available], ["fuse", ["krbd", "rbd-nbd", "fuse"]]);
  assert.match(c.why, /krbd, rbd-nbd available but not built/);
});

test("rbd mapping: a kind needs all of its parts", () => {
  assert.equal(chooseMapping({ ...fuse, loopControl: false }).kind, undefined);
  assert.equal(chooseMapping({ ...fuse, fuseDevice: false }).kind, undefined);
  assert.deepEqual(chooseMapping({ ...krbd, rbdBinary: false }, ["krbd"]).available, []);
  assert.deepEqual(chooseMapping({ ...nbd, nbdModule: false }, ["rbd-nbd"]).available, []);
});

test("rbd mapping: nothing to map with → no kind, and why", () => {
  const c = chooseMapping({ ...krbd, fuseDevice: true });
  assert.equal(c.kind, undefined);
  assert.deepEqual(c.available, ["krbd"]);
  assert.equal(c.why, "cannot map RBD images: fuse needs rbd-fuse, /dev/loop-control; krbd available but not built in this node-agent");
});

test("node topology: the node's segment, and the mapping kind only on nodes with an RBD pool", () => {
  assert.deepEqual(nodeTopology("n1", undefined), { [TOPOLOGY_KEY]: "n1" });
  assert.deepEqual(nodeTopology("n1", chooseMapping(fuse)), { [TOPOLOGY_KEY]: "n1", [RBD_MAPPING_KEY]: "fuse" });
  assert.deepEqual(nodeTopology("n1", chooseMapping(none)), { [TOPOLOGY_KEY]: "n1", [RBD_MAPPING_KEY]: "none" });
});
