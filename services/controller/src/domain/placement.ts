/**
 * Placement (pure): which cluster and pool a new volume goes to, and which pools GetCapacity
 * answers for. The one place these are decided: CreateVolume sends the journal the pool chosen
 * here, and the journal only checks it (docs/controller.md, "What the journal checks").
 *
 *   cluster  the `clusterID` parameter, else the clusters file's default; unknown → INVALID_ARGUMENT.
 *   source   volume_content_source's id must name something of ours (else NOT_FOUND), in that
 *            cluster (else INVALID_ARGUMENT).
 *   pool     1. the `pool` parameter (unknown in that cluster → INVALID_ARGUMENT);
 *            2. else, for a clone or restore, the source's pool: the pool id in the source's CSI
 *               id. The controller cannot read the source's record, so this is the pool the id
 *               *claims*; the journal confirms the record is there (NOT_FOUND otherwise), so a
 *               volume never lands outside its source's pool;
 *            3. else every pool of the cluster, the default pool first, then in file order.
 *            Then the topology (domain/topology.ts, choosePool): the candidates not reached from
 *            any requisite topology are dropped, the first reached from the earliest preferred
 *            one wins, else the first left; none left → RESOURCE_EXHAUSTED.
 *   publish  a node whose topology does not reach the volume's pool → FAILED_PRECONDITION (it
 *            could not attach the image).
 *   A `pool` parameter other than the source's pool is placed as asked: the journal refuses it
 *   (INVALID_ARGUMENT: cross-pool clones are not supported) after its name check, so a retried
 *   create of a name that exists is still answered by that volume (or ALREADY_EXISTS).
 *
 * The choice is deterministic, so a retried CreateVolume lands in the same pool (the pool is part
 * of the digest the journal judges a repeated create by).
 */
import { type Clusters, DriverError, invalidArgument, notFound, quote, type ResolvedCluster, type ResolvedPool, type TopologySegments } from "@csi/contracts";
import { required, type TopologyRequirementMsg } from "@csi/runtime";
import { mustLocateId } from "./csi.js";
import { choosePool, reaches, type Segments } from "./topology.js";

/** CSI's accessibility requirements as segment lists (none = no requirement). */
export interface Requirements {
  requisite: Segments[];
  preferred: Segments[];
}

export const requirementsOf = (msg: TopologyRequirementMsg | null | undefined): Requirements => ({
  requisite: (msg?.requisite ?? []).map((t) => t.segments),
  preferred: (msg?.preferred ?? []).map((t) => t.segments),
});

/** A named cluster (else the default one): unknown → INVALID_ARGUMENT. */
export function clusterFor(clusters: Clusters, clusterID: string | undefined): ResolvedCluster {
  const cluster = clusters.get(clusterID ?? clusters.defaultCluster);
  if (!cluster) throw invalidArgument(`unknown clusterID ${quote(clusterID)}`);
  return cluster;
}

/** The pools a new volume may go to, in preference order: the named one, else the default pool first. */
export function poolCandidates(cluster: ResolvedCluster, named: string | undefined): ResolvedPool[] {
  if (named) {
    const p = cluster.pools.find((x) => x.name === named);
    if (!p) throw invalidArgument(`unknown pool ${quote(named)} in cluster ${cluster.clusterID}`);
    return [p];
  }
  return [...cluster.pools].sort((a, b) => Number(b.name === cluster.defaultPool) - Number(a.name === cluster.defaultPool));
}

export type SourceKind = "snapshot" | "volume";

/** What CreateVolume asks of placement: its reserved parameters, content source and topology. */
export interface PlacementAsk {
  /** The `clusterID` parameter. */
  clusterID?: string;
  /** The `pool` parameter. */
  pool?: string;
  /** volume_content_source: the kind, and the CSI id as given (maybe empty). */
  source?: { kind: SourceKind; id: string };
  requirements: Requirements;
}

/** Where a new volume goes; the source as the journal command names it (its uuid, and the pool id of its CSI id). */
export interface Placement {
  cluster: ResolvedCluster;
  pool: ResolvedPool;
  source?: { kind: SourceKind; uuid: string; poolId: number };
}

/** CreateVolume's cluster and pool, its checks in this order: cluster, source, pool, topology. */
export function placeVolume(clusters: Clusters, ask: PlacementAsk): Placement {
  const cluster = clusterFor(clusters, ask.clusterID);
  const source = ask.source && sourceIn(clusters, cluster, ask.source);
  const sourcePool = source && cluster.pools.find((p) => p.id === source.poolId);
  if (source && !sourcePool) throw notFound(`the source's pool ${source.poolId} is not configured in cluster ${cluster.clusterID}`);
  const candidates = sourcePool && !ask.pool ? [sourcePool] : poolCandidates(cluster, ask.pool);
  const chosen = choosePool(candidates, ask.requirements);
  if (chosen.kind === "none") throw new DriverError("ResourceExhausted", chosen.reason);
  return { cluster, pool: chosen.pool, ...(source ? { source } : {}) };
}

/** A content source of a volume in `cluster`: its id must name something of ours, in that cluster. */
function sourceIn(clusters: Clusters, cluster: ResolvedCluster, s: { kind: SourceKind; id: string }): NonNullable<Placement["source"]> {
  required(s.id, `volume_content_source.${s.kind}.${s.kind}_id`);
  const l = mustLocateId(clusters, s.id, `source ${s.kind}`);
  if (l.cluster.clusterID !== cluster.clusterID) throw invalidArgument(`source ${s.kind} is in cluster ${l.cluster.clusterID}, not ${cluster.clusterID}`);
  return { kind: s.kind, uuid: l.parts.uuid, poolId: l.parts.poolID };
}

/** The clusters GetCapacity asks: the `clusterID` parameter's (unknown → INVALID_ARGUMENT), else every one. */
export const capacityClusters = (clusters: Clusters, clusterID: string | undefined): ResolvedCluster[] =>
  clusterID ? [clusterFor(clusters, clusterID)] : clusters.clusters;

/**
 * The pools GetCapacity answers for, one per cluster of `over` that has the `pool` asked for (if
 * any; none has it → INVALID_ARGUMENT): the pool placement would choose there for a volume
 * requiring `topology`. A cluster none of whose pools that topology reaches is left out.
 */
export function capacityTargets(
  over: ResolvedCluster[],
  ask: { clusterID?: string; pool?: string },
  topology: TopologySegments | undefined,
): { cluster: string; pool: string }[] {
  const named = ask.pool;
  const withPool = named ? over.filter((c) => c.pools.some((p) => p.name === named)) : over;
  if (!withPool.length) throw invalidArgument(`unknown pool ${quote(named)} in ${ask.clusterID ? `cluster ${ask.clusterID}` : "every cluster"}`);
  return withPool.flatMap((cluster) => {
    const chosen = choosePool(poolCandidates(cluster, named), { requisite: topology ? [topology] : [], preferred: [] });
    return chosen.kind === "none" ? [] : [{ cluster: cluster.clusterID, pool: chosen.pool.name }];
  });
}

/** ControllerPublishVolume: the node must reach the pool of the volume's id (its topology), else FAILED_PRECONDITION. */
export function mustReach(node: { nodeId: string; topology: Segments }, cluster: ResolvedCluster, poolId: number): void {
  const pool = cluster.pools.find((p) => p.id === poolId);
  if (pool && !reaches(node.topology, pool))
    throw new DriverError("FailedPrecondition", `node ${quote(node.nodeId)} cannot reach pool ${pool.name} of this volume (topology)`);
}
