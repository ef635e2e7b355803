/**
 * The Controller RPCs on snapshots, one function each, read top to bottom: validate, look up and
 * route (the id's cluster), act (the journal command), answer. A snapshot is cut in its source's
 * pool: its id shares the source's cluster and pool id.
 */
import { type SnapshotView, snapshotRequesterOf } from "@csi/contracts";
import { type CallContext, required } from "@csi/runtime";
import { csiSnapshot, type Located, splitParameters } from "../domain/csi.js";
import type { ControllerRpc, ControllerServer, Req, Res } from "./context.js";
import { listPage } from "./fan-out.js";

export const createSnapshot: ControllerRpc<"CreateSnapshot"> = async (cs, req, ctx) => {
  required(req.source_volume_id, "source_volume_id");
  required(req.name, "name");
  const params = splitParameters(req.parameters);
  // The VolumeSnapshot and its content (--extra-create-metadata): for the history, never part of what a repeat must match.
  const kubernetes = snapshotRequesterOf(req.parameters);
  const l = cs.mustLocate(req.source_volume_id, "source volume");
  const s = await cs.call(
    l.cluster.clusterID,
    "snapshot.create",
    {
      requestId: ctx.requestId,
      name: req.name,
      sourceUuid: l.parts.uuid,
      sourcePoolId: l.parts.poolID,
      parameters: params.rest,
      ...(kubernetes ? { kubernetes } : {}),
    },
    ctx,
  );
  return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
};

export const deleteSnapshot: ControllerRpc<"DeleteSnapshot"> = async (cs, req, ctx) => {
  await cs.deleteById("snapshot.delete", req.snapshot_id, "snapshot_id", ctx);
  return {};
};

export const getSnapshot: ControllerRpc<"GetSnapshot"> = async (cs, req, ctx) => {
  required(req.snapshot_id, "snapshot_id");
  const l = cs.mustLocate(req.snapshot_id, "snapshot");
  const s = await cs.call(l.cluster.clusterID, "snapshot.get", cs.ref(l), ctx);
  return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
};

/** ListSnapshots: every cluster; filtered by `snapshot_id` or `source_volume_id`, only that id's cluster. */
export const listSnapshots: ControllerRpc<"ListSnapshots"> = async (cs, req, ctx) => {
  if (req.snapshot_id || req.source_volume_id) return listSnapshotsOf(cs, req, ctx);
  return listPage("ListSnapshots", cs.clusterIds, req, ctx, cs.pagesOf("snapshot.list", ctx), snapshotEntry);
};

const snapshotEntry = (cluster: string, s: SnapshotView) => ({ snapshot: csiSnapshot(cluster, s) });

/** ListSnapshots filtered by id: an id that names nothing of ours, or ids of two clusters, list nothing. */
async function listSnapshotsOf(cs: ControllerServer, req: Req<"ListSnapshots">, ctx: CallContext): Promise<Res<"ListSnapshots">> {
  const snap = req.snapshot_id ? cs.locate(req.snapshot_id) : undefined;
  const src = req.source_volume_id ? cs.locate(req.source_volume_id) : undefined;
  if ((req.snapshot_id && !snap) || (req.source_volume_id && !src)) return { entries: [], next_token: "" };
  const cluster = ((snap ?? src) as Located).cluster.clusterID;
  if (snap && src && snap.cluster.clusterID !== src.cluster.clusterID) return { entries: [], next_token: "" };
  // A snapshot is in its source's pool: an id whose pool part differs names nothing.
  const inPools = (s: SnapshotView) => (!snap || s.poolId === snap.parts.poolID) && (!src || s.poolId === src.parts.poolID);
  const pages = cs.pagesOf("snapshot.list", ctx, { ...(snap ? { snapshotUuid: snap.parts.uuid } : {}), ...(src ? { sourceUuid: src.parts.uuid } : {}) });
  const fetch = async (c: string, maxEntries: number, inner: string | undefined, signal: AbortSignal) => {
    const page = await pages(c, maxEntries, inner, signal);
    return { ...page, entries: page.entries.filter(inPools) };
  };
  return listPage("ListSnapshots", [cluster], req, ctx, fetch, snapshotEntry);
}
