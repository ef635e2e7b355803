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
  jsonBytes,
  MiB,
  notFound,
  parseMutableParameters,
  pickMutableParameters,
  quote,
  type ResolvedCluster,
  type ResolvedPool,
  type SnapshotView,
  takeWithin,
  unsupported,
  type VolumeView,
} from "@csi/contracts";
import { type Handlers, type JournalClient, required, type TopologyRequirementMsg, toCapabilities, toCapability } from "@csi/runtime";
import type { NodeWorkSender } from "../adapters/node-work.js";
import type { NodeDirectory } from "../adapters/nodes.js";
import {
  capacityOf,
  createLimits,
  csiSnapshot,
  csiVolume,
  expansionOf,
  LIST_REPLY_MAX_BYTES,
  maxEntriesOf,
  parsePageToken,
  splitParameters,
} from "../domain/csi.js";
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
  const { call, locate, mustLocate, ref } = journalRouting(deps);

  /**
   * One page of a list over the clusters `over`, in turn; the token (`<cluster>/<uuid>`) says
   * where the previous page stopped. Journal pages (each cut by the journal to fit a NATS reply)
   * are stitched until `max` entries (0 = no limit) or LIST_REPLY_MAX_BYTES; what is left is
   * for next_token, which CSI lets a plugin return whatever max_entries says.
   */
  async function fanOut<V extends { uuid: string }, E>(
    over: string[],
    token: string,
    max: number,
    fetch: (cluster: string, maxEntries: number, inner?: string) => Promise<{ entries: V[]; nextToken?: string }>,
    toEntry: (cluster: string, v: V) => E,
  ): Promise<{ entries: E[]; next_token: string }> {
    let { cluster, inner } = parsePageToken(token, over);
    const entries: E[] = [];
    let bytes = 0;
    for (let i = over.indexOf(cluster); i < over.length; ) {
      cluster = over[i] as string;
      const page = await fetch(cluster, max > 0 ? max - entries.length : 0, inner);
      const here = cluster;
      const sized = page.entries.map((v) => {
        const entry = toEntry(here, v);
        return { uuid: v.uuid, entry, bytes: jsonBytes(entry) };
      });
      const { taken, cut } = takeWithin(sized, (s) => s.bytes, LIST_REPLY_MAX_BYTES - bytes, entries.length === 0);
      for (const s of taken) {
        entries.push(s.entry);
        bytes += s.bytes;
      }
      if (cut) return { entries, next_token: `${cluster}/${taken.at(-1)?.uuid ?? inner ?? ""}` };
      const full = max > 0 && entries.length >= max;
      if (page.nextToken) {
        if (full) return { entries, next_token: `${cluster}/${page.nextToken}` };
        inner = page.nextToken;
        continue;
      }
      i++;
      inner = undefined;
      if (full) return { entries, next_token: over[i] ? `${over[i]}/` : "" };
    }
    return { entries, next_token: "" };
  }

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
      fanOut(
        clusterIds,
        String(req.starting_token ?? ""),
        maxEntriesOf(req.max_entries),
        (cluster, maxEntries, inner) => call(cluster, "volume.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx),
        volumeEntry,
      ),

    GetCapacity: async (req, ctx) => {
      const params = splitParameters(req.parameters);
      const cluster = clusters.get(params.clusterID ?? clusters.defaultCluster);
      if (!cluster) throw invalidArgument(`unknown clusterID ${quote(params.clusterID)}`);
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
      const max = maxEntriesOf(req.max_entries);
      if (req.snapshot_id || req.source_volume_id) {
        const snap = req.snapshot_id ? locate(req.snapshot_id) : undefined;
        const src = req.source_volume_id ? locate(req.source_volume_id) : undefined;
        if ((req.snapshot_id && !snap) || (req.source_volume_id && !src)) return { entries: [], next_token: "" };
        const cluster = (snap ?? src)?.cluster.clusterID as string;
        if (snap && src && snap.cluster.clusterID !== src.cluster.clusterID) return { entries: [], next_token: "" };
        // A snapshot is in its source's pool: an id whose pool part differs names nothing.
        const inPools = (s: SnapshotView) => (!snap || s.poolId === snap.parts.poolID) && (!src || s.poolId === src.parts.poolID);
        const filter = { ...(snap ? { snapshotUuid: snap.parts.uuid } : {}), ...(src ? { sourceUuid: src.parts.uuid } : {}) };
        return fanOut(
          [cluster],
          String(req.starting_token ?? ""),
          max,
          async (c, maxEntries, inner) => {
            const page = await call(c, "snapshot.list", { maxEntries, ...(inner ? { startingToken: inner } : {}), ...filter }, ctx);
            return { ...page, entries: page.entries.filter(inPools) };
          },
          snapshotEntry,
        );
      }
      return fanOut(
        clusterIds,
        String(req.starting_token ?? ""),
        max,
        (cluster, maxEntries, inner) => call(cluster, "snapshot.list", { maxEntries, ...(inner ? { startingToken: inner } : {}) }, ctx),
        snapshotEntry,
      );
    },
  };
}
