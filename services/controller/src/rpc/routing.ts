/**
 * Routing to the clusters' journals, shared by the Controller and GroupController services: a
 * journal command with the caller's deadline, and an id → (cluster, parts) lookup.
 *
 * A cluster can be down while the others serve (docs/controller.md, "Several clusters"): every
 * command gives up with UNAVAILABLE when no journal replica of its cluster shows a sign of life
 * (a reply or a working beat) within `quietMs` — at once when none is subscribed — and a call of
 * a fan-out (List, GetCapacity over all clusters) waits at most `fanOutMs` for its cluster.
 */
import {
  type Clusters,
  type CommandRequest,
  type CommandResult,
  DriverError,
  type JournalCommand,
  notFound,
  quote,
  type ResolvedCluster,
  type VolumeIdParts,
} from "@csi/contracts";
import type { CallContext, JournalClient } from "@csi/runtime";
import { tryDecode } from "../domain/csi.js";

type Located = { cluster: ResolvedCluster; parts: VolumeIdParts };

export interface ClusterTimes {
  /** No sign of life from a cluster's journals for this long: UNAVAILABLE (JOURNAL_QUIET_MS). */
  quietMs: number;
  /** The most a fan-out waits for one cluster's answer (CLUSTER_FANOUT_TIMEOUT_MS). */
  fanOutMs: number;
}
export const DEFAULT_CLUSTER_TIMES: ClusterTimes = { quietMs: 2000, fanOutMs: 2000 };

export interface RoutingDeps {
  clusters: Clusters;
  journal: JournalClient;
  times?: ClusterTimes;
}

export function journalRouting(deps: RoutingDeps) {
  const { clusters, journal } = deps;
  const times = deps.times ?? DEFAULT_CLUSTER_TIMES;

  /**
   * Send a journal command to a cluster, within what is left of the caller's deadline (and
   * `withinMs`, if given); stop waiting if the caller (or `signal`, if given) cancels.
   */
  const call = <C extends JournalCommand>(
    cluster: string,
    command: C,
    req: CommandRequest<C>,
    ctx: CallContext,
    opts: { withinMs?: number; signal?: AbortSignal } = {},
  ): Promise<CommandResult<C>> => {
    const left = ctx.deadline ? ctx.deadline - Date.now() : undefined;
    if (left !== undefined && left <= 0) throw new DriverError("DeadlineExceeded", "deadline passed");
    const bounds = [left, opts.withinMs].filter((x): x is number => x !== undefined);
    const timeoutMs = bounds.length ? Math.min(...bounds) : undefined;
    return journal.call(cluster, command, req, {
      signal: opts.signal ?? ctx.signal,
      quietMs: times.quietMs,
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    });
  };

  /**
   * A command of a fan-out: also bounded by `fanOutMs`, and cancelled by `signal` (the caller's or
   * the fan-out's own). A cluster that has not answered within `fanOutMs` is UNAVAILABLE (the
   * caller's own deadline stays DEADLINE_EXCEEDED).
   */
  const fanOutCall = async <C extends JournalCommand>(
    cluster: string,
    command: C,
    req: CommandRequest<C>,
    ctx: CallContext,
    signal: AbortSignal = ctx.signal,
  ) => {
    try {
      return await call(cluster, command, req, ctx, { withinMs: times.fanOutMs, signal });
    } catch (err) {
      const callerLeft = !ctx.signal.aborted && (ctx.deadline === undefined || Date.now() < ctx.deadline);
      if (err instanceof DriverError && err.code === "DeadlineExceeded" && callerLeft && !signal.aborted)
        throw new DriverError("Unavailable", `cluster ${cluster} did not answer within ${times.fanOutMs} ms`, { cause: err });
      throw err;
    }
  };

  /**
   * The cluster and parts of an id, or undefined when the id cannot name anything we have: it
   * does not decode, or names a cluster we do not know, or a pool that cluster does not have.
   */
  const locate = (id: string): Located | undefined => {
    const parts = tryDecode(id);
    if (!parts) return undefined;
    const cluster = clusters.get(parts.clusterID);
    return cluster?.pools.some((p) => p.id === parts.poolID) ? { cluster, parts } : undefined;
  };
  const mustLocate = (id: string, what: string) => {
    const l = locate(id);
    if (!l) throw notFound(`${what} ${quote(id)} does not exist`);
    return l;
  };

  /** What a journal command names: the uuid, and the id's pool (a record in another pool is not found: ids never alias). */
  const ref = (l: Located) => ({ uuid: l.parts.uuid, poolId: l.parts.poolID });

  return { call, fanOutCall, locate, mustLocate, ref };
}
