/**
 * The clusters file (ceph-csi's config map, for our pools): which storage clusters exist, their
 * pools with numeric ids (those go into volume ids), and which cluster is the default. The
 * journal serves one cluster of it; the controller routes over all of them.
 */
import path from "node:path";
import { z } from "zod";
import { describeZodError } from "./common.js";
import { DriverError } from "./errors.js";
import { CLUSTER_ID_RE } from "./subjects.js";

/** A topology segment map: CSI keys (≤ 63 chars name, optional DNS prefix) and values (≤ 63 chars). */
export const TopologySegments = z
  .record(
    z.string().regex(/^([A-Za-z0-9.-]{1,253}\/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/, "topology keys are [prefix/]name, name ≤ 63 chars"),
    z.string().max(63),
  )
  .refine((m) => Object.keys(m).length > 0, { message: "a topology segment needs at least one key" });
export type TopologySegments = z.infer<typeof TopologySegments>;

export const PoolConfig = z.object({
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, "pool names are [A-Za-z0-9_-], 1..63 chars"),
  id: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  /** Directory of the file backend; default `<dataDir>/pools/<cluster>/<pool>`. */
  root: z.string().optional(),
  maxImageBytes: z.number().int().positive().optional(),
  /**
   * Where the pool's images can be attached: a list of topology segments (e.g.
   * `{"topology.nats.csi/node": "host-1"}` or `{"zone": "a"}`); a node whose topology holds every
   * key/value of one segment reaches the pool. Absent: every node reaches it.
   */
  topology: z.array(TopologySegments).min(1).max(64).optional(),
});
export type PoolConfig = z.infer<typeof PoolConfig>;

export const ClusterConfig = z.object({
  clusterID: z.string().regex(CLUSTER_ID_RE, "cluster ids are [A-Za-z0-9_-], 1..64 chars"),
  /** ceph-csi's instance id: separates several drivers' reservations in one cluster. */
  instance: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/)
    .default("default"),
  defaultPool: z.string().optional(),
  pools: z.array(PoolConfig).min(1),
});
export type ClusterConfig = z.infer<typeof ClusterConfig>;

export const ClustersConfig = z.object({ defaultCluster: z.string().optional(), clusters: z.array(ClusterConfig).min(1) }).superRefine((c, ctx) => {
  const ids = new Set<string>();
  for (const cl of c.clusters) {
    if (ids.has(cl.clusterID)) ctx.addIssue({ code: "custom", message: `duplicate cluster ${cl.clusterID}` });
    ids.add(cl.clusterID);
    const poolIds = new Set<number>();
    for (const p of cl.pools) {
      if (poolIds.has(p.id)) ctx.addIssue({ code: "custom", message: `duplicate pool id ${p.id} in ${cl.clusterID}` });
      poolIds.add(p.id);
    }
    if (cl.defaultPool && !cl.pools.some((p) => p.name === cl.defaultPool))
      ctx.addIssue({ code: "custom", message: `default pool ${cl.defaultPool} is not a pool of ${cl.clusterID}` });
  }
  if (c.defaultCluster && !ids.has(c.defaultCluster)) ctx.addIssue({ code: "custom", message: `default cluster ${c.defaultCluster} is not configured` });
});
export type ClustersConfig = z.infer<typeof ClustersConfig>;

/** The configuration used when no clusters file is given: one cluster, one pool. */
export const DEFAULT_CLUSTERS: z.input<typeof ClustersConfig> = {
  defaultCluster: "local",
  clusters: [{ clusterID: "local", pools: [{ name: "default", id: 1 }] }],
};

export interface ResolvedPool extends PoolConfig {
  root: string;
}
export interface ResolvedCluster extends Omit<ClusterConfig, "pools"> {
  defaultPool: string;
  pools: ResolvedPool[];
}
export interface Clusters {
  defaultCluster: string;
  clusters: ResolvedCluster[];
  get(clusterID: string): ResolvedCluster | undefined;
}

/** Validate a parsed clusters file and fill in defaults (pool roots under `dataDir`). */
export function resolveClusters(raw: unknown, dataDir: string): Clusters {
  const parsed = ClustersConfig.safeParse(raw);
  if (!parsed.success) throw new DriverError("InvalidArgument", `clusters config: ${describeZodError(parsed.error)}`);
  const clusters = parsed.data.clusters.map((c) => {
    const pools = c.pools.map((p) => ({ ...p, root: path.resolve(p.root ?? path.join(dataDir, "pools", c.clusterID, p.name)) }));
    return { ...c, pools, defaultPool: c.defaultPool ?? (pools[0] as ResolvedPool).name };
  });
  const byId = new Map(clusters.map((c) => [c.clusterID, c]));
  return {
    defaultCluster: parsed.data.defaultCluster ?? (clusters[0] as ResolvedCluster).clusterID,
    clusters,
    get: (id) => byId.get(id),
  };
}
