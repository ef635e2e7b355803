import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ResolvedPool } from "@csi/contracts";
import { accessibleTopology, choosePool, reaches } from "./topology.js";

const NODE = "topology.nats.csi/node";
const pool = (name: string, topology?: Record<string, string>[]): ResolvedPool => ({
  name,
  id: name.length,
  root: `/p/${name}`,
  ...(topology ? { topology } : {}),
});
const everywhere = pool("default");
const onA = pool("on-a", [{ [NODE]: "a" }]);
const zoneZ = pool("zone-z", [{ zone: "z" }]);

describe("reaches", () => {
  const cases: [string, Record<string, string>, ResolvedPool, boolean][] = [
    ["a pool without topology is reached from anywhere", { [NODE]: "x" }, everywhere, true],
    ["a node segment reaches its own node", { [NODE]: "a" }, onA, true],
    ["another node does not reach it", { [NODE]: "b" }, onA, false],
    ["a topology holding more keys still reaches", { [NODE]: "a", zone: "z" }, zoneZ, true],
    ["a topology lacking the pool's key does not", { [NODE]: "a" }, zoneZ, false],
  ];
  for (const [name, topo, p, want] of cases) test(name, () => assert.equal(reaches(topo, p), want));
});

describe("choosePool", () => {
  test("given no requirements, when choosing, then the first candidate (the default pool) is taken", () => {
    const c = choosePool([everywhere, onA], { requisite: [], preferred: [] });
    assert.equal(c.kind === "pool" && c.pool.name, "default");
  });
  test("given a requisite only one pool reaches, when choosing, then that pool", () => {
    const c = choosePool([onA, zoneZ], { requisite: [{ zone: "z", [NODE]: "b" }], preferred: [] });
    assert.equal(c.kind === "pool" && c.pool.name, "zone-z");
  });
  test("given a preferred topology, when several pools are allowed, then the preferred one wins", () => {
    const c = choosePool([everywhere, onA], { requisite: [{ [NODE]: "a" }, { [NODE]: "b" }], preferred: [{ [NODE]: "a" }] });
    assert.equal(c.kind === "pool" && c.pool.name, "default", "the earliest candidate reached from the preferred topology");
    const d = choosePool([onA, zoneZ], { requisite: [{ [NODE]: "a" }, { zone: "z" }], preferred: [{ zone: "z" }] });
    assert.equal(d.kind === "pool" && d.pool.name, "zone-z");
  });
  test("given a requisite no pool reaches, when choosing, then none, with the reason", () => {
    const c = choosePool([onA], { requisite: [{ [NODE]: "b" }], preferred: [] });
    assert.equal(c.kind, "none");
    assert.match(c.kind === "none" ? c.reason : "", /on-a/);
  });
});

test("accessibleTopology lists the pool's segments, none for a pool reached from everywhere", () => {
  assert.deepEqual(accessibleTopology(onA), [{ segments: { [NODE]: "a" } }]);
  assert.deepEqual(accessibleTopology(everywhere), []);
});
