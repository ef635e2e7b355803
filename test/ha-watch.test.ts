/** The HA harness's rule for a JetStream meta group that formed short at a first start (scripts/lib/ha-watch.ts). Pure. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { undersized } from "../scripts/lib/ha-watch.js";

const node = (size: number, routed = true) => ({ routed, size });

test("a meta group smaller than the cluster, every node routed: undersized, whether the nodes agree on a leader or not", () => {
  // Every node reports a group of 2. The leaders are not asked: a fresh machine's .ci/run waited
  // 180 s on n1 and n2 naming n1 while n3 named none (the rule then asked for an agreed leader).
  assert.equal(undersized([node(2), node(2), node(2)], 3), true);
  // One node alone knowing a smaller group.
  assert.equal(undersized([node(3), node(3), node(2)], 3), true);
});

test("a whole group, a node not yet routed, or a node that reports no group yet: not undersized", () => {
  assert.equal(undersized([node(3), node(3), node(3)], 3), false);
  assert.equal(undersized([node(2), node(2, false), node(2)], 3), false);
  assert.equal(undersized([node(0), node(0), node(0)], 3), false);
  assert.equal(undersized([node(2), node(2)], 3), false);
});
