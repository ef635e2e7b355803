/**
 * The CSI Controller service. Stateless: validate (arguments before existence, as csi-sanity
 * expects), route by cluster (the `clusterID` parameter on create, the volume id otherwise),
 * send the journal command, map the reply to the CSI response.
 */
import { createHash } from "node:crypto";
import {
  DriverError,
  invalidArgument,
  MiB,
  notFound,
  parseMutableParameters,
  pickMutableParameters,
  quote,
  type ResolvedCluster,
  type ResolvedPool,
  type SnapshotView,
  unsupported,
  type VolumeView,
} from "@csi/contracts";
import { type CallContext, type Handlers, required, type TopologyRequirementMsg, toCapabilities, toCapability } from "@csi/runtime";
import type { NodeWorkSender } from "../adapters/node-work.js";
import type { NodeDirectory } from "../adapters/nodes.js";
import { capacityOf, createLimits, csiSnapshot, csiVolume, expansionOf, LIST_REPLY_MAX_BYTES, maxEntriesOf, splitParameters } from "../domain/csi.js";
import { choosePool, reaches } from "../domain/topology.js";
import { errorFields, fromEach, type JournalPage, listAcross } from "./fan-out.js";
import { journalRouting, type RoutingDeps } from "./routing.js";

/** A node id in a JetStream message id (ids are deduplicated stream-wide, so each node's work needs its own). */
const shortHash = (s: string) => createHash("sha256").update(s).digest("hex").slice(0, 16);

export const CONTROLLER_CAPABILITIES = [
  "CREATE_DELETE_VOLUME",
  "PUBLISH_UNPUBLISH_VOLUME",
  "LIST_VOLUMES",
  "GET_CAPACITY",
  "CREATE_DELETE_SNAPSHOT",
  "LIST_SNAPSHOTS",
  "CLONE_VOLUME",
  "PUBLISH_READONLY",
  "EXPAND_VOLUME",
  "LIST_VOLUMES_PUBLISHED_NODES",
  "VOLUME_CONDITION",
  "GET_VOLUME",
  "SINGLE_NODE_MULTI_WRITER",
  "GET_SNAPSHOT",
  "MODIFY_VOLUME",
] as const;

export function controllerHandlers(deps: RoutingDeps & { nodes: NodeDirectory; nodeWork: NodeWorkSender }): Handlers<"Controller"> {
  const { clusters, nodes, nodeWork } = deps;
  const clusterIds = clusters.clusters.map((c) => c.clusterID);
  const { call, fanOutCall, locate, mustLocate, ref } = journalRouting(deps);

  /**
   * One page of a list over the clusters `over` (rpc/fan-out.ts): every cluster asked at once,
   * each bounded in time; one that fails is logged and keeps its position in the next_token.
   */
  const listPage = <V extends { uuid: string }, E>(
    what: string,
    over: string[],
    req: { starting_token?: string; max_entries?: number },
    ctx: CallContext,
    fetch: (cluster: string, maxEntries: number, inner: string | undefined, signal: AbortSignal) => Promise<JournalPage<V>>,
    toEntry: (cluster: string, v: V) => E,
  ) =>
    listAcross({
      over,
      token: String(req.starting_token ?? ""),
      max: maxEntriesOf(req.max_entries),
      maxBytes: LIST_REPLY_MAX_BYTES,
      fetch,
      toEntry,
      signal: ctx.signal,
      onMissing: (cluster, err) =>
        ctx.log.warn({ cluster, ...errorFields(err) }, `${what} answered without cluster ${cluster}: its entries are left for next_token`),
    });

  const volumeEntry = (cluster: string, v: VolumeView) => ({
    volume: csiVolume(clusters.get(cluster) as ResolvedCluster, v),
    status: { published_node_ids: v.claims.map((c) => c.nodeId), volume_condition: null },
  });
  const snapshotEntry = (cluster: string, s: SnapshotView) => ({ snapshot: csiSnapshot(cluster, s) });

  /** The pools a new volume may go to, in preference order: the named one, else the default pool first. */
  const poolCandidates = (cluster: ResolvedCluster, named?: string): ResolvedPool[] => {
    if (named) {
      const p = cluster.pools.find((x) => x.name === named);
      if (!p) throw invalidArgument(`unknown pool ${quote(named)} in cluster ${cluster.clusterID}`);
      return [p];
    }
    return [...cluster.pools].sort((a, b) => Number(b.name === cluster.defaultPool) - Number(a.name === cluster.defaultPool));
  };

  /** Where a new volume goes: the named pool, else the source's pool (clones stay in it), else by topology. */
  const placeVolume = (cluster: ResolvedCluster, named: string | undefined, sourcePoolId: number | undefined, reqs: TopologyRequirementMsg | null) => {
    const sourcePool = sourcePoolId === undefined ? undefined : cluster.pools.find((p) => p.id === sourcePoolId);
    if (sourcePoolId !== undefined && !sourcePool) throw notFound(`the source's pool ${sourcePoolId} is not configured in cluster ${cluster.clusterID}`);
    const candidates = sourcePool && !named ? [sourcePool] : poolCandidates(cluster, named);
    const chosen = choosePool(candidates, {
      requisite: (reqs?.requisite ?? []).map((t) => t.segments),
      preferred: (reqs?.preferred ?? []).map((t) => t.segments),
    });
    if (chosen.kind === "none") throw new DriverError("ResourceExhausted", chosen.reason);
    return chosen.pool;
  };

  return {
    ControllerGetCapabilities: async () => ({ capabilities: CONTROLLER_CAPABILITIES.map((type) => ({ rpc: { type } })) }),

    CreateVolume: async (req, ctx) => {
      required(req.name, "name");
      const capabilities = toCapabilities(req.volume_capabilities);
      for (const c of capabilities) {
        const why = unsupported(c);
        if (why) throw invalidArgument(why);
      }
      const { sizeBytes, limitBytes } = capacityOf(req.capacity_range);
      const params = splitParameters(req.parameters);
      const { parameters, mutableParameters } = createLimits(params.rest, req.mutable_parameters ?? {});
      const cluster = clusters.get(params.clusterID ?? clusters.defaultCluster);
      if (!cluster) throw invalidArgument(`unknown clusterID ${quote(params.clusterID)}`);
      let source: { kind: "snapshot" | "volume"; uuid: string; poolID: number } | undefined;
      const cs = req.volume_content_source;
      if (cs?.snapshot || cs?.volume) {
        const kind = cs.snapshot ? "snapshot" : "volume";
        const id = String(cs.snapshot?.snapshot_id ?? cs.volume?.volume_id ?? "");
        required(id, `volume_content_source.${kind}.${kind}_id`);
        const l = mustLocate(id, `source ${kind}`);
        if (l.cluster.clusterID !== cluster.clusterID) throw invalidArgument(`source ${kind} is in cluster ${l.cluster.clusterID}, not ${cluster.clusterID}`);
        source = { kind, uuid: l.parts.uuid, poolID: l.parts.poolID };
      }
      const pool = placeVolume(cluster, params.pool, source?.poolID, req.accessibility_requirements);
      const v = await call(
        cluster.clusterID,
        "volume.create",
        {
          requestId: ctx.requestId,
          name: req.name,
          sizeBytes,
          limitBytes,
          pool: pool.name,
          parameters,
          mutableParameters,
          capabilities,
          ...(source ? { source: { kind: source.kind, uuid: source.uuid }, sourcePoolId: source.poolID } : {}),
        },
        ctx,
      );
      return { volume: csiVolume(cluster, v) };
    },

    DeleteVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = locate(req.volume_id);
      if (!l) return {}; // malformed or foreign: nothing of ours to delete
      await call(l.cluster.clusterID, "volume.delete", { requestId: ctx.requestId, ...ref(l) }, ctx);
      return {};
    },

    ControllerExpandVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const { sizeBytes, limitBytes } = expansionOf(req.capacity_range);
      const cap = req.volume_capability ? toCapability(req.volume_capability) : undefined;
      const l = mustLocate(req.volume_id, "volume");
      // Only a limit: nothing to grow; the current size answers if it is within the limit.
      const v =
        sizeBytes > 0
          ? await call(l.cluster.clusterID, "volume.expand", { requestId: ctx.requestId, ...ref(l), sizeBytes }, ctx)
          : await call(l.cluster.clusterID, "volume.get", ref(l), ctx);
      if (limitBytes > 0 && v.sizeBytes > limitBytes) throw new DriverError("OutOfRange", `volume is ${v.sizeBytes} bytes, past limit_bytes ${limitBytes}`);
      const block = (cap ?? v.capabilities[0])?.accessType === "block";
      return { capacity_bytes: String(v.sizeBytes), node_expansion_required: !block };
    },

    ControllerModifyVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      // An empty map changes nothing (CSI: only the keys present are modified); the volume must still exist.
      const asked = parseMutableParameters(req.mutable_parameters ?? {});
      const l = mustLocate(req.volume_id, "volume");
      const r = await call(l.cluster.clusterID, "volume.modify", { requestId: ctx.requestId, ...ref(l), mutableParameters: asked }, ctx);
      // Every claim holder gets the limits in force, also when nothing changed: a retried call repairs a send that failed.
      const work = { op: "limits", volumeId: req.volume_id, mutableParameters: r.volume.mutableParameters, seq: r.seq } as const;
      await Promise.all(r.volume.claims.map((c) => nodeWork.send(c.nodeId, { ...work, id: `limits-${l.parts.uuid}-${r.seq}-${shortHash(c.nodeId)}` })));
      return {};
    },

    ControllerGetVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = mustLocate(req.volume_id, "volume");
      const v = await call(l.cluster.clusterID, "volume.get", ref(l), ctx);
      return {
        volume: csiVolume(l.cluster, v),
        status: { published_node_ids: v.claims.map((c) => c.nodeId), volume_condition: v.condition ?? { abnormal: false, message: "" } },
      };
    },

    ValidateVolumeCapabilities: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const caps = toCapabilities(req.volume_capabilities);
      const l = mustLocate(req.volume_id, "volume");
      const v = await call(l.cluster.clusterID, "volume.get", ref(l), ctx);
      const reasons = caps.map(unsupported).filter((x): x is string => !!x);
      // I/O limit keys (in parameters or mutable_parameters) are confirmed when valid: they can be changed.
      const { picked, rest: asked } = pickMutableParameters(splitParameters(req.parameters).rest);
      for (const [k, val] of Object.entries(asked)) if (v.parameters[k] !== val) reasons.push(`parameter ${quote(k)} differs from the volume's`);
      let mutable = {};
      try {
        parseMutableParameters(picked, "parameters");
        mutable = parseMutableParameters(req.mutable_parameters ?? {});
      } catch (err) {
        reasons.push((err as Error).message);
      }
      if (reasons.length) return { confirmed: null, message: reasons.join("; ") };
      return {
        confirmed: {
          volume_context: req.volume_context ?? {},
          volume_capabilities: req.volume_capabilities,
          parameters: req.parameters ?? {},
          mutable_parameters: mutable,
        },
        message: "",
      };
    },

    ListVolumes: async (req, ctx) =>
      listPage(
        "ListVolumes",
        clusterIds,
        req,
        ctx,
        (cluster, maxEntries, inner, signal) => fanOutCall(cluster, "volume.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx, signal),
        volumeEntry,
      ),

    GetCapacity: async (req, ctx) => {
      const params = splitParameters(req.parameters);
      if (params.clusterID && !clusters.get(params.clusterID)) throw invalidArgument(`unknown clusterID ${quote(params.clusterID)}`);
      const none = { available_capacity: "0", maximum_volume_size: null, minimum_volume_size: null };
      if (req.volume_capabilities?.length) {
        for (const c of toCapabilities(req.volume_capabilities)) if (unsupported(c)) return none;
      }
      // The `clusterID` parameter selects one cluster; without it, every cluster that has the `pool` asked for (if any).
      const over = params.clusterID ? [clusters.get(params.clusterID) as ResolvedCluster] : clusters.clusters;
      const named = params.pool;
      const withPool = named ? over.filter((c) => c.pools.some((p) => p.name === named)) : over;
      if (!withPool.length) throw invalidArgument(`unknown pool ${quote(named)} in ${params.clusterID ? `cluster ${params.clusterID}` : "every cluster"}`);
      const topology = req.accessible_topology?.segments;
      const targets = withPool.flatMap((cluster) => {
        const chosen = choosePool(poolCandidates(cluster, named), { requisite: topology ? [topology] : [], preferred: [] });
        return chosen.kind === "none" ? [] : [{ cluster: cluster.clusterID, pool: chosen.pool.name }];
      });
      if (!targets.length) return none; // no pool is reachable from that topology: nothing to offer there
      const { healthy, failed } = await fromEach(targets, (t) => fanOutCall(t.cluster, "pool.stat", { pool: t.pool }, ctx));
      for (const f of failed) ctx.log.warn({ cluster: f.item.cluster, ...errorFields(f.err) }, `GetCapacity answered without cluster ${f.item.cluster}`);
      if (!healthy.length) throw (failed[0] as { err: unknown }).err; // not one cluster answered: its error (UNAVAILABLE when down)
      const stats = healthy.map((h) => h.value);
      return {
        available_capacity: String(stats.reduce((n, s) => n + s.freeBytes, 0)),
        maximum_volume_size: { value: String(Math.max(...stats.map((s) => Math.min(s.maxImageBytes, s.freeBytes)))) },
        minimum_volume_size: { value: String(MiB) },
      };
    },

    ControllerPublishVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      required(req.node_id, "node_id");
      const capability = toCapability(req.volume_capability);
      const why = unsupported(capability);
      if (why) throw invalidArgument(why);
      const l = mustLocate(req.volume_id, "volume");
      const node = await nodes.get(req.node_id);
      if (!node) throw notFound(`node ${quote(req.node_id)} is not registered`);
      const pool = l.cluster.pools.find((p) => p.id === l.parts.poolID);
      if (pool && !reaches(node.topology, pool))
        throw new DriverError("FailedPrecondition", `node ${quote(req.node_id)} cannot reach pool ${pool.name} of this volume (topology)`);
      const r = await call(
        l.cluster.clusterID,
        "volume.publish",
        { requestId: ctx.requestId, ...ref(l), nodeId: req.node_id, capability, readOnly: !!req.readonly, maxVolumes: node.maxVolumes },
        ctx,
      );
      return { publish_context: r.publishContext };
    },

    ControllerUnpublishVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = locate(req.volume_id);
      if (!l) return {}; // CSI: a volume we cannot have is unpublished everywhere
      await call(l.cluster.clusterID, "volume.unpublish", { requestId: ctx.requestId, ...ref(l), ...(req.node_id ? { nodeId: req.node_id } : {}) }, ctx);
      return {};
    },

    CreateSnapshot: async (req, ctx) => {
      required(req.source_volume_id, "source_volume_id");
      required(req.name, "name");
      const l = mustLocate(req.source_volume_id, "source volume");
      const params = splitParameters(req.parameters);
      const s = await call(
        l.cluster.clusterID,
        "snapshot.create",
        { requestId: ctx.requestId, name: req.name, sourceUuid: l.parts.uuid, sourcePoolId: l.parts.poolID, parameters: params.rest },
        ctx,
      );
      return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
    },

    DeleteSnapshot: async (req, ctx) => {
      required(req.snapshot_id, "snapshot_id");
      const l = locate(req.snapshot_id);
      if (!l) return {};
      await call(l.cluster.clusterID, "snapshot.delete", { requestId: ctx.requestId, ...ref(l) }, ctx);
      return {};
    },

    GetSnapshot: async (req, ctx) => {
      required(req.snapshot_id, "snapshot_id");
      const l = mustLocate(req.snapshot_id, "snapshot");
      const s = await call(l.cluster.clusterID, "snapshot.get", ref(l), ctx);
      return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
    },

    ListSnapshots: async (req, ctx) => {
      if (req.snapshot_id || req.source_volume_id) {
        const snap = req.snapshot_id ? locate(req.snapshot_id) : undefined;
        const src = req.source_volume_id ? locate(req.source_volume_id) : undefined;
        if ((req.snapshot_id && !snap) || (req.source_volume_id && !src)) return { entries: [], next_token: "" };
        const cluster = (snap ?? src)?.cluster.clusterID as string;
        if (snap && src && snap.cluster.clusterID !== src.cluster.clusterID) return { entries: [], next_token: "" };
        // A snapshot is in its source's pool: an id whose pool part differs names nothing.
        const inPools = (s: SnapshotView) => (!snap || s.poolId === snap.parts.poolID) && (!src || s.poolId === src.parts.poolID);
        const filter = { ...(snap ? { snapshotUuid: snap.parts.uuid } : {}), ...(src ? { sourceUuid: src.parts.uuid } : {}) };
        return listPage(
          "ListSnapshots",
          [cluster],
          req,
          ctx,
          async (c, maxEntries, inner, signal) => {
            const page = await fanOutCall(c, "snapshot.list", { maxEntries, ...(inner ? { startingToken: inner } : {}), ...filter }, ctx, signal);
            return { ...page, entries: page.entries.filter(inPools) };
          },
          snapshotEntry,
        );
      }
      return listPage(
        "ListSnapshots",
        clusterIds,
        req,
        ctx,
        (cluster, maxEntries, inner, signal) => fanOutCall(cluster, "snapshot.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx, signal),
        snapshotEntry,
      );
    },
  };
}
