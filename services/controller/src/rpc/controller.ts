/**
 * The CSI Controller service. Stateless: validate (arguments before existence, as csi-sanity
 * expects), route by cluster (the `clusterID` parameter on create, the volume id otherwise),
 * send the journal command, map the reply to the CSI response.
 */
import { createHash } from "node:crypto";
import {
  type Clusters,
  DriverError,
  invalidArgument,
  MiB,
  notFound,
  parseMutableParameters,
  pickMutableParameters,
  type ResolvedCluster,
  type ResolvedPool,
  unsupported,
} from "@csi/contracts";
import { type Handlers, type JournalClient, required, type TopologyRequirementMsg, toCapabilities, toCapability } from "@csi/runtime";
import type { NodeWorkSender } from "../adapters/node-work.js";
import type { NodeDirectory } from "../adapters/nodes.js";
import { capacityOf, createLimits, csiSnapshot, csiVolume, maxEntriesOf, parsePageToken, splitParameters } from "../domain/csi.js";
import { choosePool, reaches } from "../domain/topology.js";
import { journalRouting } from "./routing.js";

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

export function controllerHandlers(deps: {
  clusters: Clusters;
  journal: JournalClient;
  nodes: NodeDirectory;
  nodeWork: NodeWorkSender;
}): Handlers<"Controller"> {
  const { clusters, nodes, nodeWork } = deps;
  const clusterIds = clusters.clusters.map((c) => c.clusterID);
  const { call, locate, mustLocate } = journalRouting(deps);

  /** One page over every cluster in turn: the token says where the previous page stopped. */
  async function fanOut<T>(
    token: string,
    max: number,
    fetch: (cluster: string, maxEntries: number, inner?: string) => Promise<{ entries: T[]; nextToken?: string }>,
  ) {
    let { cluster, inner } = parsePageToken(token, clusterIds);
    const entries: T[] = [];
    for (let i = clusterIds.indexOf(cluster); i < clusterIds.length; i++) {
      cluster = clusterIds[i] as string;
      const page = await fetch(cluster, max > 0 ? max - entries.length : 0, inner);
      inner = undefined;
      entries.push(...page.entries);
      if (page.nextToken) return { entries, next_token: `${cluster}/${page.nextToken}` };
      const nextCluster = clusterIds[i + 1];
      if (max > 0 && entries.length >= max) return { entries, next_token: nextCluster ? `${nextCluster}/` : "" };
    }
    return { entries, next_token: "" };
  }

  /** The pools a new volume may go to, in preference order: the named one, else the default pool first. */
  const poolCandidates = (cluster: ResolvedCluster, named?: string): ResolvedPool[] => {
    if (named) {
      const p = cluster.pools.find((x) => x.name === named);
      if (!p) throw invalidArgument(`unknown pool ${named} in cluster ${cluster.clusterID}`);
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
      if (!cluster) throw invalidArgument(`unknown clusterID ${params.clusterID}`);
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
          ...(source ? { source: { kind: source.kind, uuid: source.uuid } } : {}),
        },
        ctx,
      );
      return { volume: csiVolume(cluster, v) };
    },

    DeleteVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = locate(req.volume_id);
      if (!l) return {}; // malformed or foreign: nothing of ours to delete
      await call(l.cluster.clusterID, "volume.delete", { requestId: ctx.requestId, uuid: l.parts.uuid }, ctx);
      return {};
    },

    ControllerExpandVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      if (!req.capacity_range) throw invalidArgument("capacity_range is required");
      const { sizeBytes, limitBytes } = capacityOf(req.capacity_range);
      const cap = req.volume_capability ? toCapability(req.volume_capability) : undefined;
      const l = mustLocate(req.volume_id, "volume");
      const v = await call(l.cluster.clusterID, "volume.expand", { requestId: ctx.requestId, uuid: l.parts.uuid, sizeBytes }, ctx);
      if (limitBytes > 0 && v.sizeBytes > limitBytes) throw new DriverError("OutOfRange", `volume is ${v.sizeBytes} bytes, past limit_bytes ${limitBytes}`);
      const block = (cap ?? v.capabilities[0])?.accessType === "block";
      return { capacity_bytes: String(v.sizeBytes), node_expansion_required: !block };
    },

    ControllerModifyVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      // An empty map changes nothing (CSI: only the keys present are modified); the volume must still exist.
      const asked = parseMutableParameters(req.mutable_parameters ?? {});
      const l = mustLocate(req.volume_id, "volume");
      const r = await call(l.cluster.clusterID, "volume.modify", { requestId: ctx.requestId, uuid: l.parts.uuid, mutableParameters: asked }, ctx);
      // Every claim holder gets the limits in force, also when nothing changed: a retried call repairs a send that failed.
      const work = { op: "limits", volumeId: req.volume_id, mutableParameters: r.volume.mutableParameters, seq: r.seq } as const;
      await Promise.all(r.volume.claims.map((c) => nodeWork.send(c.nodeId, { ...work, id: `limits-${l.parts.uuid}-${r.seq}-${shortHash(c.nodeId)}` })));
      return {};
    },

    ControllerGetVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = mustLocate(req.volume_id, "volume");
      const v = await call(l.cluster.clusterID, "volume.get", { uuid: l.parts.uuid }, ctx);
      return {
        volume: csiVolume(l.cluster, v),
        status: { published_node_ids: v.claims.map((c) => c.nodeId), volume_condition: v.condition ?? { abnormal: false, message: "" } },
      };
    },

    ValidateVolumeCapabilities: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const caps = toCapabilities(req.volume_capabilities);
      const l = mustLocate(req.volume_id, "volume");
      const v = await call(l.cluster.clusterID, "volume.get", { uuid: l.parts.uuid }, ctx);
      const reasons = caps.map(unsupported).filter((x): x is string => !!x);
      // I/O limit keys (in parameters or mutable_parameters) are confirmed when valid: they can be changed.
      const { picked, rest: asked } = pickMutableParameters(splitParameters(req.parameters).rest);
      for (const [k, val] of Object.entries(asked)) if (v.parameters[k] !== val) reasons.push(`parameter ${k} differs from the volume's`);
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

    ListVolumes: async (req, ctx) => {
      return fanOut(String(req.starting_token ?? ""), maxEntriesOf(req.max_entries), async (cluster, maxEntries, inner) => {
        const page = await call(cluster, "volume.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx);
        const config = clusters.get(cluster) as ResolvedCluster;
        const entries = page.entries.map((v) => ({
          volume: csiVolume(config, v),
          status: { published_node_ids: v.claims.map((c) => c.nodeId), volume_condition: null },
        }));
        return page.nextToken ? { entries, nextToken: page.nextToken } : { entries };
      });
    },

    GetCapacity: async (req, ctx) => {
      const params = splitParameters(req.parameters);
      const cluster = clusters.get(params.clusterID ?? clusters.defaultCluster);
      if (!cluster) throw invalidArgument(`unknown clusterID ${params.clusterID}`);
      const none = { available_capacity: "0", maximum_volume_size: null, minimum_volume_size: null };
      if (req.volume_capabilities?.length) {
        for (const c of toCapabilities(req.volume_capabilities)) if (unsupported(c)) return none;
      }
      const topology = req.accessible_topology?.segments;
      const chosen = choosePool(poolCandidates(cluster, params.pool), { requisite: topology ? [topology] : [], preferred: [] });
      if (chosen.kind === "none") return none; // no pool is reachable from that topology: nothing to offer there
      const s = await call(cluster.clusterID, "pool.stat", { pool: chosen.pool.name }, ctx);
      return {
        available_capacity: String(s.freeBytes),
        maximum_volume_size: { value: String(Math.min(s.maxImageBytes, s.freeBytes)) },
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
      if (!node) throw notFound(`node ${req.node_id} is not registered`);
      const pool = l.cluster.pools.find((p) => p.id === l.parts.poolID);
      if (pool && !reaches(node.topology, pool))
        throw new DriverError("FailedPrecondition", `node ${req.node_id} cannot reach pool ${pool.name} of this volume (topology)`);
      const r = await call(
        l.cluster.clusterID,
        "volume.publish",
        { requestId: ctx.requestId, uuid: l.parts.uuid, nodeId: req.node_id, capability, readOnly: !!req.readonly, maxVolumes: node.maxVolumes },
        ctx,
      );
      return { publish_context: r.publishContext };
    },

    ControllerUnpublishVolume: async (req, ctx) => {
      required(req.volume_id, "volume_id");
      const l = locate(req.volume_id);
      if (!l) return {}; // CSI: a volume we cannot have is unpublished everywhere
      await call(
        l.cluster.clusterID,
        "volume.unpublish",
        { requestId: ctx.requestId, uuid: l.parts.uuid, ...(req.node_id ? { nodeId: req.node_id } : {}) },
        ctx,
      );
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
        { requestId: ctx.requestId, name: req.name, sourceUuid: l.parts.uuid, parameters: params.rest },
        ctx,
      );
      return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
    },

    DeleteSnapshot: async (req, ctx) => {
      required(req.snapshot_id, "snapshot_id");
      const l = locate(req.snapshot_id);
      if (!l) return {};
      await call(l.cluster.clusterID, "snapshot.delete", { requestId: ctx.requestId, uuid: l.parts.uuid }, ctx);
      return {};
    },

    GetSnapshot: async (req, ctx) => {
      required(req.snapshot_id, "snapshot_id");
      const l = mustLocate(req.snapshot_id, "snapshot");
      const s = await call(l.cluster.clusterID, "snapshot.get", { uuid: l.parts.uuid }, ctx);
      return { snapshot: csiSnapshot(l.cluster.clusterID, s) };
    },

    ListSnapshots: async (req, ctx) => {
      const max = maxEntriesOf(req.max_entries);
      if (req.snapshot_id || req.source_volume_id) {
        const snap = req.snapshot_id ? locate(req.snapshot_id) : undefined;
        const src = req.source_volume_id ? locate(req.source_volume_id) : undefined;
        if ((req.snapshot_id && !snap) || (req.source_volume_id && !src)) return { entries: [], next_token: "" };
        const cluster = (snap ?? src)?.cluster.clusterID as string;
        if (snap && src && snap.cluster.clusterID !== src.cluster.clusterID) return { entries: [], next_token: "" };
        const { inner } = req.starting_token ? parsePageToken(String(req.starting_token), [cluster]) : { inner: undefined };
        const page = await call(
          cluster,
          "snapshot.list",
          {
            maxEntries: max,
            ...(inner ? { startingToken: inner } : {}),
            ...(snap ? { snapshotUuid: snap.parts.uuid } : {}),
            ...(src ? { sourceUuid: src.parts.uuid } : {}),
          },
          ctx,
        );
        return { entries: page.entries.map((s) => ({ snapshot: csiSnapshot(cluster, s) })), next_token: page.nextToken ? `${cluster}/${page.nextToken}` : "" };
      }
      return fanOut(String(req.starting_token ?? ""), max, async (cluster, maxEntries, inner) => {
        const page = await call(cluster, "snapshot.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx);
        const entries = page.entries.map((sn) => ({ snapshot: csiSnapshot(cluster, sn) }));
        return page.nextToken ? { entries, nextToken: page.nextToken } : { entries };
      });
    },
  };
}
