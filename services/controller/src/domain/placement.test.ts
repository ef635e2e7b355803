import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Clusters, composeVolumeId, DriverError, type ResolvedCluster, type ResolvedPool } from "@csi/contracts";
import { capacityClusters, capacityTargets, mustReach, type PlacementAsk, placeVolume, type Requirements } from "./placement.js";

const NODE = "topology.nats.csi/node";
const pool = (name: string, id: number, topology?: Record<string, string>[]): ResolvedPool => ({
  name,
  id,
  root: `/p/${name}`,
  ...(topology ? { topology } : {}),
});
const cluster = (clusterID: string, defaultPool: string, pools: ResolvedPool[]): ResolvedCluster => ({ clusterID, instance: "default", defaultPool, pools });

// east: "default" (everywhere, the default pool, listed last), "on-a" (node a), "zone-z" (zone z);
// west: "default" only; south: "s-a" (node a, the default pool), "s-z" (zone z): no pool everywhere.
const east = cluster("east", "default", [pool("on-a", 2, [{ [NODE]: "a" }]), pool("zone-z", 3, [{ zone: "z" }]), pool("default", 1)]);
const west = cluster("west", "default", [pool("default", 1)]);
const south = cluster("south", "s-a", [pool("s-a", 1, [{ [NODE]: "a" }]), pool("s-z", 2, [{ zone: "z" }])]);
const clusters: Clusters = {
  defaultCluster: "east",
  clusters: [east, west, south],
  get: (id) => [east, west, south].find((c) => c.clusterID === id),
};

const UUID = "6b131693-8210-4b03-acc4-9acebba04e87";
const idIn = (clusterID: string, poolID: number) => composeVolumeId({ clusterID, poolID, uuid: UUID });
const NONE: Requirements = { requisite: [], preferred: [] };
const needs = (requisite: Record<string, string>[], preferred: Record<string, string>[] = []): Requirements => ({ requisite, preferred });

/** "<cluster>/<pool>", or the DriverError code placement throws. */
const placed = (ask: PlacementAsk): string => {
  try {
    const p = placeVolume(clusters, ask);
    return `${p.cluster.clusterID}/${p.pool.name}`;
  } catch (e) {
    if (e instanceof DriverError) return e.code;
    throw e;
  }
};

describe("placeVolume: where CreateVolume's volume goes", () => {
  const cases: [string, PlacementAsk, string][] = [
    ["nothing asked: the default cluster's default pool", { requirements: NONE }, "east/default"],
    ["clusterID: that cluster's default pool", { clusterID: "west", requirements: NONE }, "west/default"],
    ["an unknown clusterID", { clusterID: "north", requirements: NONE }, "InvalidArgument"],
    ["a named pool", { pool: "zone-z", requirements: NONE }, "east/zone-z"],
    ["a pool the cluster does not have", { pool: "zone-z", clusterID: "west", requirements: NONE }, "InvalidArgument"],
    ["a requisite only one pool reaches", { clusterID: "south", requirements: needs([{ zone: "z" }]) }, "south/s-z"],
    ["a requisite no pool reaches", { clusterID: "south", requirements: needs([{ zone: "y" }]) }, "ResourceExhausted"],
    ["a requisite several reach: the default pool first", { requirements: needs([{ [NODE]: "a", zone: "z" }]) }, "east/default"],
    [
      "a pool reached from everywhere is reached from any preferred topology",
      { requirements: needs([{ [NODE]: "b", zone: "z" }], [{ zone: "z" }]) },
      "east/default",
    ],
    ["no preference: the default pool", { clusterID: "south", requirements: needs([{ [NODE]: "a" }, { zone: "z" }]) }, "south/s-a"],
    [
      "among the requisite, the earliest preferred wins",
      { clusterID: "south", requirements: needs([{ [NODE]: "a" }, { zone: "z" }], [{ zone: "z" }]) },
      "south/s-z",
    ],
    ["a named pool the requisite does not reach", { pool: "on-a", requirements: needs([{ [NODE]: "b" }]) }, "ResourceExhausted"],
    ["a clone: its source's pool (the id's pool id)", { source: { kind: "volume", id: idIn("east", 3) }, requirements: NONE }, "east/zone-z"],
    ["a restore: its source's pool", { source: { kind: "snapshot", id: idIn("east", 2) }, requirements: NONE }, "east/on-a"],
    [
      "a clone whose pool the requisite does not reach",
      { source: { kind: "volume", id: idIn("east", 3) }, requirements: needs([{ zone: "y" }]) },
      "ResourceExhausted",
    ],
    [
      "a clone into a named pool: as named (the journal refuses a cross-pool clone)",
      { pool: "default", source: { kind: "volume", id: idIn("east", 3) }, requirements: NONE },
      "east/default",
    ],
    ["a source without an id", { source: { kind: "snapshot", id: "" }, requirements: NONE }, "InvalidArgument"],
    ["a source id that names nothing of ours", { source: { kind: "snapshot", id: "garbage" }, requirements: NONE }, "NotFound"],
    ["a source id in a pool the cluster does not have", { source: { kind: "snapshot", id: idIn("east", 9) }, requirements: NONE }, "NotFound"],
    ["a source in another cluster", { clusterID: "west", source: { kind: "volume", id: idIn("east", 1) }, requirements: NONE }, "InvalidArgument"],
    [
      "an unknown cluster is refused before its source is looked at",
      { clusterID: "north", source: { kind: "volume", id: "garbage" }, requirements: NONE },
      "InvalidArgument",
    ],
  ];
  for (const [name, ask, want] of cases) test(name, () => assert.equal(placed(ask), want));

  test("the source is named to the journal by its uuid and its id's pool id", () => {
    const p = placeVolume(clusters, { source: { kind: "snapshot", id: idIn("east", 2) }, requirements: NONE });
    assert.deepEqual(p.source, { kind: "snapshot", uuid: UUID, poolId: 2 });
  });
});

describe("capacityTargets: the pool GetCapacity answers for, per cluster", () => {
  const cases: [string, { clusterID?: string; pool?: string }, Record<string, string> | undefined, string[] | string][] = [
    ["every cluster, each its default pool", {}, undefined, ["east/default", "west/default", "south/s-a"]],
    ["one cluster", { clusterID: "west" }, undefined, ["west/default"]],
    ["an unknown cluster", { clusterID: "north" }, undefined, "InvalidArgument"],
    ["a pool only one cluster has", { pool: "zone-z" }, undefined, ["east/zone-z"]],
    [
      "a topology: per cluster, the pool placement would choose there; a cluster it reaches nothing in is left out",
      {},
      { zone: "z" },
      ["east/default", "west/default", "south/s-z"],
    ],
    ["a pool no cluster has", { pool: "nope" }, undefined, "InvalidArgument"],
    ["a pool the cluster asked for does not have", { clusterID: "west", pool: "on-a" }, undefined, "InvalidArgument"],
    ["a topology: the pool placement would choose there", { pool: "on-a" }, { [NODE]: "a" }, ["east/on-a"]],
    ["a topology no pool of the named one reaches: nothing", { pool: "on-a" }, { [NODE]: "b" }, []],
  ];
  for (const [name, ask, topology, want] of cases)
    test(name, () => {
      let got: string[] | string;
      try {
        got = capacityTargets(capacityClusters(clusters, ask.clusterID), ask, topology).map((t) => `${t.cluster}/${t.pool}`);
      } catch (e) {
        got = (e as DriverError).code;
      }
      assert.deepEqual(got, want);
    });
});

describe("mustReach: publishing needs a node that reaches the volume's pool", () => {
  const cases: [string, Record<string, string>, number, string][] = [
    ["a pool reached from everywhere", { [NODE]: "b" }, 1, "OK"],
    ["the pool's own node", { [NODE]: "a" }, 2, "OK"],
    ["another node", { [NODE]: "b" }, 2, "FailedPrecondition"],
  ];
  for (const [name, topology, poolId, want] of cases)
    test(name, () => {
      let got = "OK";
      try {
        mustReach({ nodeId: "n", topology }, east, poolId);
      } catch (e) {
        got = (e as DriverError).code;
      }
      assert.equal(got, want);
    });
});
