/**
 * The Controller RPCs on volumes, one function each, read top to bottom: validate (arguments
 * before existence, as csi-sanity expects), look up and route (the volume id's cluster; on
 * create, placement), act (the journal command), answer (the CSI response). What a volume's size
 * and place are is decided in domain/sizes.ts and domain/placement.ts; the journal only checks it.
 */
import { notFound, parseMutableParameters, quote, type ResolvedCluster, type VolumeView, volumeRequesterOf } from "@csi/contracts";
import { required, toCapabilities, toCapability } from "@csi/runtime";
import {
  confirmCapabilities,
  contentSourceOf,
  createLimits,
  csiVolume,
  letGoOf,
  letGoWorkId,
  limitsWorkId,
  servedCapabilities,
  servedCapability,
  servesAll,
  splitParameters,
  volumeStatus,
} from "../domain/csi.js";
import { capacityClusters, capacityTargets, mustReach, placeVolume, requirementsOf } from "../domain/placement.js";
import { capacityAnswer, createSize, expandedSize, expandSize, noCapacity } from "../domain/sizes.js";
import type { ControllerRpc } from "./context.js";
import { errorFields, fromEach, listPage } from "./fan-out.js";

/** CreateVolume: the size and the place are decided here (domain/); the journal makes exactly that, or says why not. */
export const createVolume: ControllerRpc<"CreateVolume"> = async (cs, req, ctx) => {
  required(req.name, "name");
  const capabilities = servedCapabilities(req.volume_capabilities);
  const size = createSize(req.capacity_range);
  const params = splitParameters(req.parameters);
  const { parameters, mutableParameters } = createLimits(params.rest, req.mutable_parameters ?? {});
  // The PVC and PV (--extra-create-metadata): metadata for the history, outside `parameters` and so outside what a repeat must match.
  const kubernetes = volumeRequesterOf(req.parameters);
  const at = placeVolume(cs.clusters, {
    clusterID: params.clusterID,
    pool: params.pool,
    source: contentSourceOf(req.volume_content_source),
    requirements: requirementsOf(req.accessibility_requirements),
  });
  const { source } = at;
  const v = await cs.call(
    at.cluster.clusterID,
    "volume.create",
    {
      requestId: ctx.requestId,
      name: req.name,
      sizeBytes: size.sizeBytes,
      limitBytes: size.limitBytes,
      pool: at.pool.name,
      parameters,
      mutableParameters,
      ...(kubernetes ? { kubernetes } : {}),
      capabilities,
      ...(source ? { source: { kind: source.kind, uuid: source.uuid }, sourcePoolId: source.poolId } : {}),
    },
    ctx,
  );
  return { volume: csiVolume(at.cluster, v) };
};

export const deleteVolume: ControllerRpc<"DeleteVolume"> = async (cs, req, ctx) => {
  await cs.deleteById("volume.delete", req.volume_id, "volume_id", ctx);
  return {};
};

export const controllerExpandVolume: ControllerRpc<"ControllerExpandVolume"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  const { sizeBytes, limitBytes } = expandSize(req.capacity_range);
  const cap = req.volume_capability ? toCapability(req.volume_capability) : undefined;
  const l = cs.mustLocate(req.volume_id, "volume");
  // Only a limit: nothing to grow; the current size answers if it is within the limit.
  const v =
    sizeBytes > 0
      ? await cs.call(l.cluster.clusterID, "volume.expand", { requestId: ctx.requestId, ...cs.ref(l), sizeBytes }, ctx)
      : await cs.call(l.cluster.clusterID, "volume.get", cs.ref(l), ctx);
  const block = (cap ?? v.capabilities[0])?.accessType === "block";
  return { capacity_bytes: String(expandedSize(v.sizeBytes, limitBytes)), node_expansion_required: !block };
};

export const controllerModifyVolume: ControllerRpc<"ControllerModifyVolume"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  // An empty map changes nothing (CSI: only the keys present are modified); the volume must still exist.
  const asked = parseMutableParameters(req.mutable_parameters ?? {});
  const l = cs.mustLocate(req.volume_id, "volume");
  const r = await cs.call(l.cluster.clusterID, "volume.modify", { requestId: ctx.requestId, ...cs.ref(l), mutableParameters: asked }, ctx);
  // Every claim holder gets the limits in force, also when nothing changed: a retried call repairs a send that failed.
  const work = { op: "limits", volumeId: req.volume_id, mutableParameters: r.volume.mutableParameters, seq: r.seq } as const;
  await Promise.all(r.volume.claims.map((c) => cs.nodeWork.send(c.nodeId, { ...work, id: limitsWorkId(l.parts.uuid, r.seq, c.nodeId) })));
  return {};
};

export const controllerGetVolume: ControllerRpc<"ControllerGetVolume"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  const l = cs.mustLocate(req.volume_id, "volume");
  const v = await cs.call(l.cluster.clusterID, "volume.get", cs.ref(l), ctx);
  return { volume: csiVolume(l.cluster, v), status: volumeStatus(v) };
};

export const validateVolumeCapabilities: ControllerRpc<"ValidateVolumeCapabilities"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  const caps = toCapabilities(req.volume_capabilities);
  const l = cs.mustLocate(req.volume_id, "volume");
  const v = await cs.call(l.cluster.clusterID, "volume.get", cs.ref(l), ctx);
  return confirmCapabilities(v, caps, req);
};

export const listVolumes: ControllerRpc<"ListVolumes"> = async (cs, req, ctx) => {
  const entry = (cluster: string, v: VolumeView) => ({
    volume: csiVolume(cs.clusters.get(cluster) as ResolvedCluster, v),
    status: volumeStatus(v),
  });
  return listPage("ListVolumes", cs.clusterIds, req, ctx, cs.pagesOf("volume.list", ctx), entry);
};

/**
 * GetCapacity: the `clusterID` parameter selects one cluster; without it, every cluster that has
 * the `pool` asked for (if any), each for the pool placement would choose there (domain/placement.ts).
 */
export const getCapacity: ControllerRpc<"GetCapacity"> = async (cs, req, ctx) => {
  const params = splitParameters(req.parameters);
  const over = capacityClusters(cs.clusters, params.clusterID);
  if (!servesAll(req.volume_capabilities)) return noCapacity();
  const targets = capacityTargets(over, params, req.accessible_topology?.segments);
  if (!targets.length) return noCapacity(); // no pool is reachable from that topology: nothing to offer there
  const { healthy, failed } = await fromEach(targets, (t) => cs.fanOutCall(t.cluster, "pool.stat", { pool: t.pool }, ctx));
  for (const f of failed) ctx.log.warn({ cluster: f.item.cluster, ...errorFields(f.err) }, `GetCapacity answered without cluster ${f.item.cluster}`);
  if (!healthy.length) throw (failed[0] as { err: unknown }).err; // not one cluster answered: its error (UNAVAILABLE when down)
  return capacityAnswer(healthy.map((h) => h.value));
};

export const controllerPublishVolume: ControllerRpc<"ControllerPublishVolume"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  required(req.node_id, "node_id");
  const capability = servedCapability(req.volume_capability);
  const l = cs.mustLocate(req.volume_id, "volume");
  const node = await cs.nodes.get(req.node_id);
  if (!node) throw notFound(`node ${quote(req.node_id)} is not registered`);
  mustReach({ nodeId: req.node_id, topology: node.topology }, l.cluster, l.parts.poolID);
  const r = await cs.call(
    l.cluster.clusterID,
    "volume.publish",
    { requestId: ctx.requestId, ...cs.ref(l), nodeId: req.node_id, capability, readOnly: !!req.readonly, maxVolumes: node.maxVolumes },
    ctx,
  );
  return { publish_context: r.publishContext };
};

export const controllerUnpublishVolume: ControllerRpc<"ControllerUnpublishVolume"> = async (cs, req, ctx) => {
  required(req.volume_id, "volume_id");
  const l = cs.locate(req.volume_id);
  if (!l) return {}; // CSI: a volume we cannot have is unpublished everywhere
  const r = await cs.call(
    l.cluster.clusterID,
    "volume.unpublish",
    { requestId: ctx.requestId, ...cs.ref(l), ...(req.node_id ? { nodeId: req.node_id } : {}) },
    ctx,
  );
  // A node released while it still has the volume staged (Docker Swarm sends no NodeUnstageVolume)
  // is asked to let go, so the volume can be deleted (docs/controller.md). The node refuses while a
  // target is published there by its own state: a pod's mount stays (DeleteVolume stays refused).
  await Promise.all(
    letGoOf(r.held).map((h) =>
      cs.nodeWork.send(h.nodeId, {
        id: letGoWorkId(l.parts.uuid, h.nodeId, h.staged, ctx.requestId),
        op: "unstage",
        afterRelease: true,
        volumeId: req.volume_id,
        stagingPath: h.staged,
        capability: h.capability,
      }),
    ),
  );
  return {};
};
