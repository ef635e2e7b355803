/**
 * Pure translation between CSI messages (proto-loader objects: keepCase, longs as strings,
 * oneofs named) and the journal's contract, with the CSI argument checks. No I/O.
 */
import { createHash } from "node:crypto";
import {
  type Capability,
  type Clusters,
  composeVolumeId,
  decomposeVolumeId,
  inForce,
  invalidArgument,
  MAX_PAGE_ENTRIES,
  MiB,
  type MutableParameters,
  type NodeHold,
  notFound,
  parseMutableParameters,
  pickMutableParameters,
  quote,
  type ResolvedCluster,
  type SnapshotView,
  unsupported,
  type VolumeIdParts,
  type VolumeView,
} from "@csi/contracts";
import { type RequestOf, type ResponseOf, type SnapshotMsg, toCapabilities, toCapability, type VolumeCapabilityMsg, type VolumeMsg } from "@csi/runtime";
import { accessibleTopology } from "./topology.js";

/** Decode an id a CO gave us; `undefined` when it is malformed (each RPC decides what that means). */
export function tryDecode(id: string): VolumeIdParts | undefined {
  try {
    return decomposeVolumeId(id);
  } catch {
    return undefined;
  }
}

/** An id that names something of ours: its cluster, and its parts (whose pool id that cluster has). */
export interface Located {
  cluster: ResolvedCluster;
  parts: VolumeIdParts;
}

/**
 * The cluster and parts of an id, or undefined when the id cannot name anything we have: it
 * does not decode, or names a cluster we do not know, or a pool that cluster does not have.
 */
export function locateId(clusters: Clusters, id: string): Located | undefined {
  const parts = tryDecode(id);
  if (!parts) return undefined;
  const cluster = clusters.get(parts.clusterID);
  return cluster?.pools.some((p) => p.id === parts.poolID) ? { cluster, parts } : undefined;
}

/** As locateId; an id that names nothing of ours is NOT_FOUND (`what` names it in the message). */
export function mustLocateId(clusters: Clusters, id: string, what: string): Located {
  const l = locateId(clusters, id);
  if (!l) throw notFound(`${what} ${quote(id)} does not exist`);
  return l;
}

export const volumeIdOf = (clusterID: string, v: { poolId: number; uuid: string }) => composeVolumeId({ clusterID, poolID: v.poolId, uuid: v.uuid });

export function timestamp(iso: string): { seconds: string; nanos: number } {
  const ms = Date.parse(iso);
  return { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 };
}

const RESERVED_PARAMS = new Set(["clusterID", "pool"]);
export function splitParameters(params: Record<string, string> | undefined): { clusterID?: string; pool?: string; rest: Record<string, string> } {
  const p = params ?? {};
  const rest = Object.fromEntries(Object.entries(p).filter(([k]) => !RESERVED_PARAMS.has(k) && !k.startsWith("csi.storage.k8s.io/")));
  return { ...(p.clusterID ? { clusterID: p.clusterID } : {}), ...(p.pool ? { pool: p.pool } : {}), rest };
}

/**
 * CreateVolume's I/O limits: our keys found in `parameters` (StorageClass defaults) overlaid by
 * `mutable_parameters` (which take precedence, as CSI says); both validated the same way. The
 * limit keys are taken out of the parameters kept with the volume.
 */
export function createLimits(
  rest: Record<string, string>,
  mutable: Record<string, string>,
): { parameters: Record<string, string>; mutableParameters: MutableParameters } {
  const { picked, rest: parameters } = pickMutableParameters(rest);
  const fromParameters = parseMutableParameters(picked, "parameters");
  return { parameters, mutableParameters: inForce({ ...fromParameters, ...parseMutableParameters(mutable) }) };
}

/** A capability we serve: one we do not (unsupported) is INVALID_ARGUMENT. */
function served(c: Capability): Capability {
  const why = unsupported(c);
  if (why) throw invalidArgument(why);
  return c;
}

/** volume_capability: required, one we serve (else INVALID_ARGUMENT). */
export const servedCapability = (msg: VolumeCapabilityMsg | null | undefined): Capability => served(toCapability(msg));

/** volume_capabilities: required, each well formed, then each one we serve (else INVALID_ARGUMENT). */
export const servedCapabilities = (list: VolumeCapabilityMsg[] | undefined): Capability[] => toCapabilities(list).map(served);

/** Whether GetCapacity's volume_capabilities (optional) are all ones we serve (an unparsable one is INVALID_ARGUMENT). */
export const servesAll = (list: VolumeCapabilityMsg[] | undefined): boolean => !list?.length || toCapabilities(list).every((c) => !unsupported(c));

/** CreateVolume's volume_content_source: the kind and the id as given (the id is checked by placement), if any. */
export function contentSourceOf(cs: RequestOf<"Controller", "CreateVolume">["volume_content_source"]): { kind: "snapshot" | "volume"; id: string } | undefined {
  if (!cs?.snapshot && !cs?.volume) return undefined;
  return { kind: cs.snapshot ? "snapshot" : "volume", id: String(cs.snapshot?.snapshot_id ?? cs.volume?.volume_id ?? "") };
}

type Validation = ResponseOf<"Controller", "ValidateVolumeCapabilities">;

/**
 * ValidateVolumeCapabilities' answer for volume `v`: confirmed (echoing what was asked) when we
 * serve every capability, each parameter matches the volume's, and the I/O limit keys (in
 * `parameters` or `mutable_parameters`) are valid (they can be changed, so they need not match);
 * else unconfirmed, with every reason.
 */
export function confirmCapabilities(v: VolumeView, caps: Capability[], req: RequestOf<"Controller", "ValidateVolumeCapabilities">): Validation {
  const reasons = caps.map(unsupported).filter((x): x is string => !!x);
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
}

/**
 * The id of the node work that brings a claim holder the I/O limits in force at `seq`: also the
 * JetStream message id, deduplicated stream-wide, so each node's work needs its own (a hash of
 * the node id keeps it short).
 */
export const limitsWorkId = (uuid: string, seq: number, nodeId: string) =>
  `limits-${uuid}-${seq}-${createHash("sha256").update(nodeId).digest("hex").slice(0, 16)}`;

/** The id of an unstage asked of a node released with the volume still staged: one per call, node and staging path (a node unstages idempotently). */
export const letGoWorkId = (uuid: string, nodeId: string, stagingPath: string, requestId: string) =>
  `letgo-${uuid}-${createHash("sha256").update(`${nodeId}\0${stagingPath}\0${requestId}`).digest("hex").slice(0, 16)}`;

/**
 * Whom ControllerUnpublishVolume asks to let go (node work `unstage`): every released node whose
 * reports say it has the volume staged, whatever they say of its targets. The reports travel
 * through a queue and may be behind: Swarm's ControllerUnpublish comes right after its
 * NodeUnpublish, and under load the journal had not yet appended the node's "unpublished", so a
 * rule that skipped nodes still showing a target left the volume staged for good (Swarm never
 * sends NodeUnstage) and every DeleteVolume refused. The node decides by its own state: it refuses
 * the unstage while a target is published there (a pod's mount stays). Pure.
 */
export function letGoOf(held: readonly NodeHold[]): { nodeId: string; staged: string; capability: Capability }[] {
  return held.flatMap(({ nodeId, staged, capability }) => (staged !== undefined && capability !== undefined ? [{ nodeId, staged, capability }] : []));
}

/** The volume context shows the parameters and the I/O limits in force (so ControllerGetVolume/ListVolumes show current values). */
export function csiVolume(cluster: ResolvedCluster, v: VolumeView): VolumeMsg {
  const clusterID = cluster.clusterID;
  // A source is in the volume's pool (clones never cross pools), so its id shares the pool id.
  const sourceId = v.source && composeVolumeId({ clusterID, poolID: v.poolId, uuid: v.source.uuid });
  const content_source = !v.source ? null : v.source.kind === "snapshot" ? { snapshot: { snapshot_id: sourceId } } : { volume: { volume_id: sourceId } };
  return {
    volume_id: volumeIdOf(clusterID, v),
    capacity_bytes: String(v.sizeBytes),
    volume_context: { ...v.parameters, ...v.mutableParameters, clusterID, pool: v.pool, imageName: v.imageName },
    content_source,
    accessible_topology: accessibleTopology(cluster.pools.find((p) => p.name === v.pool)),
  };
}

/** The condition of a volume the journal's reply says nothing of: its record is a created volume (volume.list checks no image). */
export const RECORDED_CONDITION = { abnormal: false, message: "ok: recorded as created (ControllerGetVolume also checks its image)" };

/**
 * A volume's status, as ControllerGetVolume and every ListVolumes entry answer it (both, as
 * VOLUME_CONDITION is advertised, with a condition): the nodes it is published to, and the
 * journal's condition — abnormal with why when it found the image missing or smaller than
 * recorded — or, where the reply carries none, RECORDED_CONDITION.
 */
export function volumeStatus(v: VolumeView) {
  return { published_node_ids: v.claims.map((c) => c.nodeId), volume_condition: v.condition ?? RECORDED_CONDITION };
}

export function csiSnapshot(clusterID: string, s: SnapshotView): SnapshotMsg {
  return {
    snapshot_id: composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.uuid }),
    source_volume_id: composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.sourceUuid }),
    size_bytes: String(s.sizeBytes),
    creation_time: timestamp(s.createdAt),
    ready_to_use: s.readyToUse,
    // A member of a group snapshot names it (the group is in its members' pool, so it shares their pool id).
    group_snapshot_id: s.groupSnapshotUuid ? composeVolumeId({ clusterID, poolID: s.poolId, uuid: s.groupSnapshotUuid }) : "",
  };
}

/** max_entries: negative is INVALID_ARGUMENT; past our page cap it is clamped (CSI lets a plugin return fewer, with a next_token). */
export function maxEntriesOf(v: unknown): number {
  const n = Number(v ?? 0);
  if (!Number.isInteger(n) || n < 0) throw invalidArgument("max_entries must not be negative");
  return Math.min(n, MAX_PAGE_ENTRIES);
}

/**
 * The most bytes the entries of one List reply may have (measured as JSON, which is no smaller
 * than their protobuf encoding): well under the 4 MiB a gRPC client (grpc-go, so every CO)
 * receives by default. An unpaged list longer than that is answered in pages (next_token).
 */
export const LIST_REPLY_MAX_BYTES = 2 * MiB;
