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

const poolCommon = {
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, "pool names are [A-Za-z0-9_-], 1..63 chars"),
  id: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  maxImageBytes: z.number().int().positive().optional(),
  /**
   * Where the pool's images can be attached: a list of topology segments (e.g.
   * `{"topology.nats.csi/node": "host-1"}` or `{"zone": "a"}`); a node whose topology holds every
   * key/value of one segment reaches the pool. Absent: every node reaches it.
   */
  topology: z.array(TopologySegments).min(1).max(64).optional(),
};

/** The embedded pool: images are sparse files in a directory (the default kind). */
export const FilePoolConfig = z.object({
  ...poolCommon,
  kind: z.literal("file").default("file"),
  /** Directory of the file backend; default `<dataDir>/pools/<cluster>/<pool>`. */
  root: z.string().optional(),
});

/** RBD image features a pool may ask for (layering is required: snapshots and clones are clones). */
export const RBD_IMAGE_FEATURES = ["layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten"] as const;

/**
 * A Ceph RBD pool. The key is never in this file: `keyFile` names a file holding the user's key
 * alone (ceph-csi's Secret `userKey`, mounted), read by librados itself.
 */
export const RbdPoolConfig = z
  .object({
    ...poolCommon,
    kind: z.literal("rbd"),
    /** The monitors, each as ceph.conf's `mon host` names one: `10.0.0.1:6789`, `[v2:10.0.0.1:3300,v1:10.0.0.1:6789]`. */
    monitors: z
      .array(z.string().regex(/^[A-Za-z0-9.:,[\]_-]{1,256}$/, "a monitor is host:port or [v2:host:port,v1:host:port], no spaces"))
      .min(1)
      .max(16),
    /** The Ceph pool (default: this pool's name). */
    cephPool: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/, "Ceph pool names are [A-Za-z0-9_.-], 1..128 chars")
      .optional(),
    /** The Ceph user, without `client.` (needs `profile rbd` on the pool: mon, osd and mgr). */
    user: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, "Ceph user names are [A-Za-z0-9_.-], 1..64 chars"),
    /** A file holding the user's key alone (a Secret's `userKey`, mounted read-only). */
    keyFile: z.string().min(1).max(4096),
    /** Features of the volumes' images (default ["layering"]; snapshot images always get layering,deep-flatten). */
    imageFeatures: z
      .array(z.enum(RBD_IMAGE_FEATURES))
      .min(1)
      .max(RBD_IMAGE_FEATURES.length)
      .refine((f) => f.includes("layering"), { message: "imageFeatures must include layering (snapshots and clones are clones)" })
      .refine((f) => !f.includes("object-map") || f.includes("exclusive-lock"), { message: "object-map needs exclusive-lock" })
      .refine((f) => !f.includes("fast-diff") || f.includes("object-map"), { message: "fast-diff needs object-map" })
      .optional(),
    /** Longest parent chain of a clone or snapshot before it is flattened (default 8, ceph-csi's hard limit). */
    maxCloneDepth: z.number().int().min(1).max(16).optional(),
    /** Bound of each call to the cluster but a flatten, in ms (default 30 s). */
    opTimeoutMs: z.number().int().min(1000).max(600_000).optional(),
  })
  .strict();

/** A pool of a cluster: `kind` "file" (the default when absent) or "rbd". */
export const PoolConfig = z.discriminatedUnion("kind", [FilePoolConfig, RbdPoolConfig]);
export type PoolConfig = z.infer<typeof PoolConfig>;
export type RbdPoolConfig = z.infer<typeof RbdPoolConfig>;

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

/** A file pool with its root resolved (`kind` may be left out where one is written by hand, in tests). */
export type ResolvedFilePool = Omit<z.infer<typeof FilePoolConfig>, "kind" | "root"> & { kind?: "file"; root: string };
export type ResolvedRbdPool = RbdPoolConfig & { root?: undefined };
export type ResolvedPool = ResolvedFilePool | ResolvedRbdPool;
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
    const pools = c.pools.map(
      (p): ResolvedPool => (p.kind === "rbd" ? p : { ...p, root: path.resolve(p.root ?? path.join(dataDir, "pools", c.clusterID, p.name)) }),
    );
    return { ...c, pools, defaultPool: c.defaultPool ?? (pools[0] as ResolvedPool).name };
  });
  const byId = new Map(clusters.map((c) => [c.clusterID, c]));
  return {
    defaultCluster: parsed.data.defaultCluster ?? (clusters[0] as ResolvedCluster).clusterID,
    clusters,
    get: (id) => byId.get(id),
  };
}
