/**
 * The CSI GroupController service: group snapshots (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT),
 * one named function per RPC, mapped to the gRPC method names at the end, as for the Controller
 * service (rpc/controller.ts). A group is taken in one cluster (its journal locks every source
 * volume and cuts them all); arguments are checked before existence.
 */
import { DriverError, invalidArgument, notFound, quote } from "@csi/contracts";
import { type CallContext, type Handlers, type Methods, type RequestOf, type ResponseOf, required } from "@csi/runtime";
import { type Located, splitParameters } from "../domain/csi.js";
import { csiGroupSnapshot } from "../domain/group-csi.js";
import { serving } from "./context.js";
import { type JournalRouting, journalRouting, type RoutingDeps } from "./routing.js";

export const GROUP_CONTROLLER_CAPABILITIES = ["CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"] as const;

type Req<M extends Methods<"GroupController">> = RequestOf<"GroupController", M>;
type Res<M extends Methods<"GroupController">> = ResponseOf<"GroupController", M>;
/** A GroupController RPC: the routing it works with, the request and the call → the response. */
type GroupRpc<M extends Methods<"GroupController">> = (gs: JournalRouting, req: Req<M>, ctx: CallContext) => Promise<Res<M>>;

export async function groupControllerGetCapabilities() {
  return { capabilities: GROUP_CONTROLLER_CAPABILITIES.map((type) => ({ rpc: { type } })) };
}

export const createVolumeGroupSnapshot: GroupRpc<"CreateVolumeGroupSnapshot"> = async (gs, req, ctx) => {
  required(req.name, "name");
  const ids = req.source_volume_ids ?? [];
  if (ids.length === 0) throw invalidArgument("source_volume_ids is required");
  for (const [i, id] of ids.entries()) required(id, `source_volume_ids[${i}]`);
  const params = splitParameters(req.parameters);
  const inClusters = new Set(ids.flatMap((id) => gs.locate(id)?.cluster.clusterID ?? []));
  if (params.clusterID) inClusters.add(params.clusterID);
  if (inClusters.size > 1)
    throw invalidArgument(`the source volumes are in several clusters (${[...inClusters].sort().join(", ")}): a group snapshot is taken in one`);
  const sources = ids.map((id) => gs.mustLocate(id, "source volume"));
  const cluster = (sources[0] as Located).cluster.clusterID;
  // Each source must be in the pool its id names (volume.get is NOT_FOUND otherwise): ids never alias.
  await Promise.all(sources.map((l) => gs.call(cluster, "volume.get", gs.ref(l), ctx)));
  const g = await gs.call(
    cluster,
    "groupsnapshot.create",
    { requestId: ctx.requestId, name: req.name, sourceUuids: sources.map((l) => l.parts.uuid), parameters: params.rest },
    ctx,
  );
  return { group_snapshot: csiGroupSnapshot(cluster, g) };
};

export const deleteVolumeGroupSnapshot: GroupRpc<"DeleteVolumeGroupSnapshot"> = async (gs, req, ctx) => {
  required(req.group_snapshot_id, "group_snapshot_id");
  const l = gs.locate(req.group_snapshot_id);
  if (!l) return {}; // malformed or foreign: nothing of ours to delete
  const snapshotUuids = memberUuids(gs, req.snapshot_ids, l.cluster.clusterID);
  if (!(await groupOf(gs, l, undefined, ctx))) return {}; // gone, or another pool than the id says: nothing of ours to delete
  await gs.call(
    l.cluster.clusterID,
    "groupsnapshot.delete",
    { requestId: ctx.requestId, uuid: l.parts.uuid, ...(snapshotUuids ? { snapshotUuids } : {}) },
    ctx,
  );
  return {};
};

export const getVolumeGroupSnapshot: GroupRpc<"GetVolumeGroupSnapshot"> = async (gs, req, ctx) => {
  required(req.group_snapshot_id, "group_snapshot_id");
  const l = gs.mustLocate(req.group_snapshot_id, "group snapshot");
  const snapshotUuids = memberUuids(gs, req.snapshot_ids, l.cluster.clusterID);
  const g = await groupOf(gs, l, snapshotUuids, ctx);
  if (!g) throw notFound(`group snapshot ${quote(req.group_snapshot_id)} does not exist`);
  return { group_snapshot: csiGroupSnapshot(l.cluster.clusterID, g) };
};

/** A group snapshot as the id names it: undefined when it does not exist or is in another pool than the id says (no aliases). */
async function groupOf(gs: JournalRouting, l: Located, snapshotUuids: string[] | undefined, ctx: CallContext) {
  const req = { uuid: l.parts.uuid, ...(snapshotUuids ? { snapshotUuids } : {}) };
  const g = await gs.call(l.cluster.clusterID, "groupsnapshot.get", req, ctx).catch((err: unknown) => {
    if (err instanceof DriverError && err.code === "NotFound") return undefined;
    throw err;
  });
  return g && g.poolId === l.parts.poolID ? g : undefined;
}

/**
 * The uuids of `snapshot_ids` (CSI's check of a group's members), or undefined when none were
 * given. An id that is malformed or of another cluster cannot be a member: a mismatch.
 */
function memberUuids(gs: JournalRouting, ids: string[] | undefined, clusterID: string): string[] | undefined {
  if (!ids?.length) return undefined;
  return ids.map((id) => {
    const l = gs.locate(id);
    if (!l || l.cluster.clusterID !== clusterID) throw invalidArgument(`snapshot_ids: ${quote(id)} is not a snapshot of this group snapshot`);
    return l.parts.uuid;
  });
}

export function groupControllerHandlers(deps: RoutingDeps): Handlers<"GroupController"> {
  const on = serving(journalRouting(deps));
  return {
    GroupControllerGetCapabilities: groupControllerGetCapabilities,
    CreateVolumeGroupSnapshot: on(createVolumeGroupSnapshot),
    DeleteVolumeGroupSnapshot: on(deleteVolumeGroupSnapshot),
    GetVolumeGroupSnapshot: on(getVolumeGroupSnapshot),
  };
}
