/**
 * Routing to the clusters' journals, shared by the Controller and GroupController services: a
 * journal command with the caller's deadline, and an id → (cluster, parts) lookup.
 *
 * A cluster can be down while the others serve (docs/controller.md, "Several clusters"): every
 * command gives up with UNAVAILABLE when no journal replica of its cluster shows a sign of life
 * (a reply or a working beat) within `quietMs` — at once when none is subscribed — and a call of
 * a fan-out (List, GetCapacity over all clusters) waits at most `fanOutMs` for its cluster.
 */
import { type Clusters, type CommandRequest, type CommandResult, DriverError, type JournalCommand } from "@csi/contracts";
import { type CallContext, type JournalClient, required } from "@csi/runtime";
import { type Located, locateId, mustLocateId } from "../domain/csi.js";

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
   * The journal pages of a List command (volume.list, snapshot.list), as listPage fetches them
   * (rpc/fan-out.ts): each a command of the fan-out, from `inner` (the start when undefined),
   * with `filter` (snapshot.list's) added to every request.
   */
  const pagesOf =
    <C extends "volume.list" | "snapshot.list">(command: C, ctx: CallContext, filter: { snapshotUuid?: string; sourceUuid?: string } = {}) =>
    (cluster: string, maxEntries: number, inner: string | undefined, signal: AbortSignal) =>
      fanOutCall(cluster, command, { ...filter, maxEntries, ...(inner ? { startingToken: inner } : {}) } as CommandRequest<C>, ctx, signal);

  /** The cluster and parts of an id (domain/csi.ts, locateId): undefined, or NOT_FOUND for mustLocate, when it names nothing of ours. */
  const locate = (id: string) => locateId(clusters, id);
  const mustLocate = (id: string, what: string) => mustLocateId(clusters, id, what);

  /** What a journal command names: the uuid, and the id's pool (a record in another pool is not found: ids never alias). */
  const ref = (l: Located) => ({ uuid: l.parts.uuid, poolId: l.parts.poolID });

  /**
   * DeleteVolume, DeleteSnapshot: the id is required (`field` names it); one that names nothing
   * of ours (malformed or foreign) has nothing to delete: OK, as csi-sanity expects.
   */
  const deleteById = async (command: "volume.delete" | "snapshot.delete", id: string, field: string, ctx: CallContext): Promise<void> => {
    required(id, field);
    const l = locate(id);
    if (l) await call(l.cluster.clusterID, command, { requestId: ctx.requestId, ...ref(l) }, ctx);
  };

  return { clusters, call, fanOutCall, pagesOf, locate, mustLocate, ref, deleteById };
}

/** What every Controller and GroupController RPC routes with. */
export type JournalRouting = ReturnType<typeof journalRouting>;
