/**
 * Topology (CSI accessibility): which pool a new volume goes to, and from where a volume can be
 * reached. Pure. A pool declares the segments it is reachable from (none = from everywhere); a
 * node (or a requisite/preferred topology) reaches a pool when it holds every key/value of one
 * of the pool's segments.
 */
import type { ResolvedPool, TopologySegments } from "@csi/contracts";

export type Segments = Record<string, string>;

/** Whether `topology` (a node's segments) reaches `pool`. */
export function reaches(topology: Segments, pool: Pick<ResolvedPool, "topology">): boolean {
  if (!pool.topology) return true;
  return pool.topology.some((seg) => Object.entries(seg).every(([k, v]) => topology[k] === v));
}

export type PoolChoice = { kind: "pool"; pool: ResolvedPool } | { kind: "none"; reason: string };

/**
 * Pick the pool for a new volume among `candidates` (in preference order, default pool first):
 * only pools reachable from one of the requisite topologies (if any are given); among those, the
 * first reachable from the earliest preferred topology; else the first candidate left.
 */
export function choosePool(candidates: ResolvedPool[], req: { requisite: Segments[]; preferred: Segments[] }): PoolChoice {
  const allowed = req.requisite.length === 0 ? candidates : candidates.filter((p) => req.requisite.some((t) => reaches(t, p)));
  if (allowed.length === 0) {
    return { kind: "none", reason: `no pool (${candidates.map((p) => p.name).join(", ")}) is reachable from the requisite topology` };
  }
  for (const t of req.preferred) {
    const p = allowed.find((c) => reaches(t, c));
    if (p) return { kind: "pool", pool: p };
  }
  return { kind: "pool", pool: allowed[0] as ResolvedPool };
}

/** A volume's accessible_topology: the pool's segments (empty = reachable from every node). */
export const accessibleTopology = (pool: { topology?: TopologySegments[] } | undefined): { segments: Segments }[] =>
  (pool?.topology ?? []).map((segments) => ({ segments }));
