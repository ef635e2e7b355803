/**
 * Health views, pure: a node-agent is healthy while its last heartbeat is younger than a few of
 * its own heartbeat intervals (Nomad's plugin health: healthy / expected); a cluster is served
 * while at least one journal replica answers, and its projection lags the log by the events
 * after the projection's `applied` watermark.
 */
import type { NodeRegistration } from "@csi/contracts";
import type { ProjectionMeta } from "@csi/journal/projection";

/** Missed heartbeats after which a node counts as unhealthy. */
export const MISSED_HEARTBEATS = 3;

export interface NodeHealth {
  nodeId: string;
  healthy: boolean;
  lastHeartbeat: string;
  /** Milliseconds since the last heartbeat (negative: the node's clock is ahead). */
  ageMs: number;
  heartbeatMs: number;
  version: string;
  maxVolumes: number;
  topology: Record<string, string>;
}

export function nodeHealth(reg: NodeRegistration, now: Date, missed = MISSED_HEARTBEATS): NodeHealth {
  const at = Date.parse(reg.time);
  const ageMs = Number.isNaN(at) ? Number.POSITIVE_INFINITY : now.getTime() - at;
  return {
    nodeId: reg.nodeId,
    healthy: ageMs <= missed * reg.heartbeatMs,
    lastHeartbeat: reg.time,
    ageMs,
    heartbeatMs: reg.heartbeatMs,
    version: reg.version,
    maxVolumes: reg.maxVolumes,
    topology: reg.topology,
  };
}

export interface ClusterHealth {
  cluster: string;
  /** Journal replicas that answered the service discovery ping. */
  replicas: number;
  /** The event log's last sequence (undefined: the cluster has no log yet). */
  logSeq?: number;
  /** The projection's watermark (undefined: no projection in Redis). */
  applied?: number;
  /** logSeq − applied: events the projection's watermark has not passed yet. */
  lag?: number;
  projection: "complete" | "rebuilding" | "missing";
  /** Whether the cluster is served: a replica answers and the projection is complete. */
  ok: boolean;
}

export function clusterHealth(cluster: string, replicas: number, logSeq: number | undefined, meta: ProjectionMeta | undefined): ClusterHealth {
  const projection = !meta ? "missing" : meta.complete ? "complete" : "rebuilding";
  const applied = meta?.applied;
  const lag = logSeq !== undefined && applied !== undefined ? Math.max(0, logSeq - applied) : undefined;
  return {
    cluster,
    replicas,
    ...(logSeq !== undefined ? { logSeq } : {}),
    ...(applied !== undefined ? { applied } : {}),
    ...(lag !== undefined ? { lag } : {}),
    projection,
    ok: replicas > 0 && projection === "complete",
  };
}

/** "3s ago", "2m ago", "1h ago". */
export function ago(ms: number): string {
  if (!Number.isFinite(ms)) return "never";
  if (ms < 0) return "in the future";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** A claim a node holds: the volume's CSI id. */
export interface NodeClaim {
  id: string;
  name: string;
}

/**
 * Why `node remove` refuses to drop a node's registration (undefined: it may): a node still
 * heartbeating would only register again, and one that holds claims would leave them to nobody
 * (`volume detach` releases them first). `--force` removes it whatever it is.
 */
export function removalRefusal(h: NodeHealth, claims: readonly NodeClaim[], force: boolean): string | undefined {
  if (force) return undefined;
  const why: string[] = [];
  if (h.healthy) why.push(`it is healthy (last heartbeat ${ago(h.ageMs)}): stop its node-agent first, or it registers again within ${h.heartbeatMs / 1000}s`);
  if (claims.length > 0) {
    const listed = claims.slice(0, 5).map((c) => `${c.id} (${c.name})`);
    const more = claims.length > 5 ? `, and ${claims.length - 5} more` : "";
    why.push(
      `it holds ${claims.length === 1 ? "a claim" : `${claims.length} claims`} on ${listed.join(", ")}${more}: csictl volume detach <volume> ${h.nodeId} releases each`,
    );
  }
  return why.length ? `node ${h.nodeId} not removed: ${why.join("; ")} (or --force)` : undefined;
}
