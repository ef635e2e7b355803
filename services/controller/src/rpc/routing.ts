/**
 * Routing to the clusters' journals, shared by the Controller and GroupController services: a
 * journal command with the caller's deadline, and an id → (cluster, parts) lookup.
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

export function journalRouting(deps: { clusters: Clusters; journal: JournalClient }) {
  const { clusters, journal } = deps;

  /** Send a journal command to a cluster, within what is left of the caller's deadline; stop waiting if the caller cancels. */
  const call = <C extends JournalCommand>(cluster: string, command: C, req: CommandRequest<C>, ctx: CallContext): Promise<CommandResult<C>> => {
    const left = ctx.deadline ? ctx.deadline - Date.now() : undefined;
    if (left !== undefined && left <= 0) throw new DriverError("DeadlineExceeded", "deadline passed");
    return journal.call(cluster, command, req, { signal: ctx.signal, ...(left !== undefined ? { timeoutMs: left } : {}) });
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

  return { call, locate, mustLocate, ref };
}
