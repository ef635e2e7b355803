import assert from "node:assert/strict";
import { test } from "node:test";
import { EARLY_HOLD_MS, earlyAddress, listedReplica, promotionAfter, switchedTo } from "./sentinel-promotion.js";

const WAIT = "+failover-state-wait-promotion";
const waitFor = (name: string) => `slave 10.0.0.2:6380 10.0.0.2 6380 @ ${name} 10.0.0.1 6379`;

test("a wait-promotion for our master names the replica being promoted for the old master's address, for EARLY_HOLD_MS", () => {
  const p = promotionAfter(undefined, WAIT, waitFor("csi"), "csi", 1000);
  assert.deepEqual(p, { from: "10.0.0.1:6379", to: { host: "10.0.0.2", port: 6380 }, until: 1000 + EARLY_HOLD_MS });
  assert.deepEqual(earlyAddress(p, "10.0.0.1:6379", 1001), { host: "10.0.0.2", port: 6380 });
  assert.equal(earlyAddress(p, "10.0.0.9:6379", 1001), null, "another address is the sentinels' answer");
  assert.equal(earlyAddress(p, "10.0.0.1:6379", 1000 + EARLY_HOLD_MS), null, "past the hold the sentinels' word counts again");
  assert.equal(promotionAfter(p, "+sdown", "master csi 10.0.0.1 6379", "csi", 1000 + EARLY_HOLD_MS), undefined, "an expired one is dropped");
});

test("the switch or an abort for our master ends it; another master's messages do not", () => {
  const p = promotionAfter(undefined, WAIT, waitFor("csi"), "csi", 0);
  assert.equal(promotionAfter(p, "+switch-master", "csi 10.0.0.1 6379 10.0.0.2 6380", "csi", 10), undefined);
  assert.equal(promotionAfter(p, "-failover-abort-slave-timeout", "master csi 10.0.0.1 6379", "csi", 10), undefined);
  assert.equal(promotionAfter(p, "+failover-end-for-timeout", "master csi 10.0.0.1 6379", "csi", 10), undefined);
  assert.equal(promotionAfter(p, "+switch-master", "other 10.0.0.1 6379 10.0.0.2 6380", "csi", 10), p);
  assert.equal(promotionAfter(p, WAIT, waitFor("other"), "csi", 10), p);
  assert.equal(promotionAfter(undefined, WAIT, waitFor("other"), "csi", 10), undefined);
});

test("a message not in its channel's format changes nothing", () => {
  for (const bad of [
    "slave 10.0.0.2:6380 10.0.0.2 6380 @ csi 10.0.0.1",
    "master 10.0.0.2:6380 10.0.0.2 6380 @ csi 10.0.0.1 6379",
    "slave 10.0.0.2:6380 10.0.0.2 99999 @ csi 10.0.0.1 6379",
    "slave 10.0.0.2:6380 10.0.0.2 63a0 @ csi 10.0.0.1 6379",
    "slave 10.0.0.2:6380 10.0.0.2 6380 # csi 10.0.0.1 6379",
    `slave 10.0.0.2:6380 10.0.0.2 6380 @ csi 10.0.0.1 6379${" ".repeat(2000)}`,
    "",
  ])
    assert.equal(promotionAfter(undefined, WAIT, bad, "csi", 0), undefined, JSON.stringify(bad.slice(0, 60)));
});

test("a replica counts only as SENTINEL REPLICAS lists it", () => {
  const listed = [
    ["name", "10.0.0.3:6380", "ip", "10.0.0.3", "port", "6380", "flags", "slave"],
    ["name", "10.0.0.2:6380", "ip", "10.0.0.2", "port", "6380", "flags", "slave"],
  ];
  assert.equal(listedReplica(listed, { host: "10.0.0.2", port: 6380 }), true);
  assert.equal(listedReplica(listed, { host: "10.0.0.2", port: 6381 }), false);
  assert.equal(listedReplica(listed, { host: "10.0.0.9", port: 6380 }), false);
  assert.equal(listedReplica("ERR", { host: "10.0.0.2", port: 6380 }), false);
  assert.equal(listedReplica([["ip", "10.0.0.2"]], { host: "10.0.0.2", port: 6380 }), false);
});

test("+switch-master names the new master of our master name only", () => {
  assert.deepEqual(switchedTo("+switch-master", "csi 10.0.0.1 6379 10.0.0.2 6380", "csi"), { host: "10.0.0.2", port: 6380 });
  assert.equal(switchedTo("+switch-master", "other 10.0.0.1 6379 10.0.0.2 6380", "csi"), undefined);
  assert.equal(switchedTo("+switch-master", "csi 10.0.0.1 6379 10.0.0.2", "csi"), undefined);
  assert.equal(switchedTo("+sdown", "csi 10.0.0.1 6379 10.0.0.2 6380", "csi"), undefined);
});
