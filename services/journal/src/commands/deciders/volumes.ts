/**
 * The volume commands as deciders (commands/decider.ts): what each reads first, and every rule it
 * decides by. Pure: the runner (commands/runner.ts) does the locking, reading, image steps and appends.
 */
import {
  applyMutableParameters,
  type CommandResult,
  DriverError,
  inForce,
  invalidArgument,
  limitsToContext,
  notFound,
  type ParsedRequest,
  quote,
  readerOnly,
  sameMutableParameters,
  type VolumeView,
} from "@csi/contracts";
import { liveRecord } from "../../fold/evolve.js";
import { type ImageKind, KINDS, type RecordOf, shared } from "../../fold/kinds.js";
import { volumeView } from "../../fold/records.js";
import type { Command, Ctx, PoolInfo, ReadPlan, View } from "../decider.js";
import { decideClaim } from "./claims.js";
import { describeHold } from "./devices.js";
import { type CreatePhase, checkVolumeReservation, createRead, decideImageCreate, nameState, type VolumeAsk, volumeDigest } from "./reservation.js";

/** A configured pool of the cluster; an unknown one is InvalidArgument. */
export function poolOf<P>(pools: ReadonlyMap<string, P>, cluster: string, name: string): P {
  const p = pools.get(name);
  if (!p) throw invalidArgument(`unknown pool ${quote(name)} in cluster ${cluster}`);
  return p;
}

const poolIn = (ctx: Ctx, name: string): PoolInfo => poolOf(ctx.pools, ctx.cluster.clusterID, name);

/** A record of `kind` that lives and is in the pool a CSI id names (`poolId` undefined: not checked); a record in another pool is "not found". */
export function recordIn<K extends ImageKind | "groupsnapshot">(
  v: Pick<View, "state">,
  kind: K,
  uuid: string,
  poolId: number | undefined,
): RecordOf<K> | undefined {
  const r = liveRecord(v.state({ kind, uuid }), kind);
  return r && (poolId === undefined || r.poolId === poolId) ? r : undefined;
}

/** A record whose image was made (its *Created applied): one can use it. */
export function madeIn<K extends ImageKind>(v: Pick<View, "state">, kind: K, uuid: string, poolId: number | undefined): RecordOf<K> | undefined {
  const r = recordIn(v, kind, uuid, poolId);
  return r?.imageId ? r : undefined;
}

function fitsPool(pool: PoolInfo, sizeBytes: number): void {
  if (sizeBytes > pool.maxImageBytes) throw new DriverError("OutOfRange", `${sizeBytes} bytes exceeds the pool's maximum image size ${pool.maxImageBytes}`);
}

export { poolIn };

export function createVolume(req: ParsedRequest<"volume.create">): Command<VolumeView, CreatePhase> {
  const src = req.source;
  // Size and pool were decided by the controller (docs/controller.md): whole MiB (the contract
  // checks it), the pool as sent (absent: the cluster's default). What a repeat must match is
  // known from the request alone, once per command.
  const { sizeBytes } = req;
  const mutableParameters = inForce(req.mutableParameters ?? {});
  let asked: { poolName: string; digest: string; ask: VolumeAsk } | undefined;
  const askIn = (defaultPool: string) => {
    if (asked) return asked;
    const poolName = req.pool ?? defaultPool;
    const digest = volumeDigest(poolName, req.parameters, mutableParameters);
    const ask = { name: req.name, sizeBytes, limitBytes: req.limitBytes, digest, capabilities: req.capabilities, ...(src ? { source: src } : {}) };
    asked = { poolName, digest, ask };
    return asked;
  };
  return {
    requestId: req.requestId,
    first: (ctx) => createRead("volume", req.name, ctx, src ? [{ kind: src.kind, uuid: src.uuid }] : []),
    decide: (v, ctx) => {
      const { poolName, digest, ask } = askIn(ctx.cluster.defaultPool);
      poolIn(ctx, poolName); // a pool of this cluster, before anything else
      const source = src ? madeIn(v, src.kind, src.uuid, req.sourcePoolId) : undefined;
      return decideImageCreate(v, ctx, {
        kind: "volume",
        name: req.name,
        verdict: (record, dir, image) => checkVolumeReservation(ask, dir, record, image),
        reserve: (uuid) => {
          // Source checks come after the name checks: an existing volume is answered as it is.
          if (src && !source) throw notFound(`source ${src.kind} ${src.uuid} does not exist`);
          if (source && source.pool !== poolName) {
            throw invalidArgument(`source ${src?.kind} is in pool ${source.pool}, not ${poolName}: cross-pool clones are not supported`);
          }
          if (source && sizeBytes < source.sizeBytes)
            throw new DriverError("OutOfRange", `requested ${sizeBytes} bytes is smaller than the source's ${source.sizeBytes}`);
          const pool = poolIn(ctx, poolName);
          fitsPool(pool, sizeBytes);
          return {
            type: "VolumeReserved" as const,
            uuid,
            name: req.name,
            instance: ctx.cluster.instance,
            pool: poolName,
            poolId: pool.poolId,
            imageName: KINDS.volume.imageName(uuid),
            sizeBytes,
            digest,
            parameters: req.parameters,
            capabilities: req.capabilities,
            ...(src ? { source: src } : {}),
            ...(Object.keys(mutableParameters).length > 0 ? { mutableParameters } : {}),
            // Who asked (a PVC): recorded for the history, outside the digest (docs/deploy.md, "Who asked").
            ...(req.kubernetes ? { kubernetes: req.kubernetes } : {}),
          };
        },
        build: (r) =>
          source
            ? { op: "clone", pool: r.pool, from: source.imageName, imageName: r.imageName, sizeBytes: r.sizeBytes }
            : { op: "create", pool: r.pool, imageName: r.imageName, sizeBytes: r.sizeBytes },
        reply: volumeView,
      });
    },
  };
}

/** The phases of a delete: its name read (when the first read did not bring it), the image removed and the record deleted. */
export type DeletePhase = "nameRead" | "deleted";

/**
 * Delete a volume or a snapshot: unknown is success (idempotent); `refuse` says why it may not go
 * (claims; a group's member), or what it must read first (in its phase `Q`). Then lock its name
 * too, remove the image, append *Deleted and release the name if it still points here (→ deleted).
 */
export function deleteImageAggregate<K extends ImageKind, Q extends string>(
  kind: K,
  req: { requestId: string; uuid: string; poolId?: number | undefined },
  refuse: (r: RecordOf<K>, v: View<DeletePhase | Q>) => { read: ReadPlan; phase: Q } | undefined,
): Command<{ deleted: boolean }, DeletePhase | Q> {
  const me = { kind, uuid: req.uuid };
  return {
    requestId: req.requestId,
    // The record and its name, both locked, in one read.
    first: { locks: [me], states: [me], ownName: true },
    decide: (v) => {
      // Deleted; or a failed step that landed our *Deleted (not the name's release): deleted all the same.
      if (v.phase === "deleted" || (v.phase === "failed" && v.appended.some((e) => e.event.type === KINDS[kind].deleted))) return { reply: { deleted: true } };
      const r = recordIn(v, kind, req.uuid, req.poolId);
      if (!r) return { reply: { deleted: false } }; // unknown: deleting is idempotent
      const more = refuse(r, v);
      if (more) return more;
      const name = { kind: "name" as const, of: kind, name: r.name };
      if (!v.has(name)) return { read: { locks: [name], states: [name] }, phase: "nameRead" };
      const copied = kind === "snapshot" || "source" in r;
      return {
        act: {
          effects: [{ op: "delete", pool: r.pool, imageName: r.imageName, copied }],
          // The name first: JetStream stores a prefix of one connection's write, and a record deleted
          // with its name still pointing at it is a state no retry can mend (the deleted record keeps no
          // name), while a live record whose name is released is one the delete's retry completes.
          events: [...(nameState(v, kind, r.name)?.uuid === r.uuid ? [shared.nameReleased(kind, r.name, r.uuid)] : []), shared.deleted(kind, r.uuid)],
        },
        phase: "deleted",
      };
    },
  };
}

/**
 * A volume is deleted only once no node holds it: no claim, and no node's own report of a device,
 * a staging or a target still there (a CO may release the claim without the node letting go:
 * Docker Swarm never sends NodeUnstageVolume). Its device reports are read beside its first read.
 */
export function deleteVolume(req: ParsedRequest<"volume.delete">): Command<{ deleted: boolean }, DeletePhase | "devicesRead"> {
  const command = deleteImageAggregate<"volume", "devicesRead">("volume", req, (r, v) => {
    if (r.claims.length > 0)
      throw new DriverError("FailedPrecondition", `volume is published to ${r.claims.map((c) => c.nodeId).join(", ")}: unpublish it first`);
    const holds = v.devices(r.uuid)?.holds;
    if (!holds) return { read: { devices: [r.uuid] }, phase: "devicesRead" };
    if (holds.length > 0)
      throw new DriverError("FailedPrecondition", `volume is in use: ${holds.map(describeHold).join("; ")}: NodeUnpublishVolume and NodeUnstageVolume first`);
    return undefined;
  });
  const first = command.first as ReadPlan;
  return { ...command, first: { ...first, devices: [req.uuid] } };
}

/** The one volume of a command on an existing volume, locked and read. */
const onVolume = (req: { requestId: string; uuid: string }, nodeClaims?: string) => ({
  requestId: req.requestId,
  first: {
    locks: [{ kind: "volume" as const, uuid: req.uuid }],
    states: [{ kind: "volume" as const, uuid: req.uuid }],
    ...(nodeClaims ? { nodeClaims: [nodeClaims] } : {}),
  },
});

/** ControllerExpandVolume: the image resized (→ resized), then VolumeExpanded with its size (→ expanded), after which the record answers. */
export function expandVolume(req: ParsedRequest<"volume.expand">): Command<VolumeView, "resized" | "expanded"> {
  return {
    ...onVolume(req),
    decide: (v, ctx) => {
      const r = recordIn(v, "volume", req.uuid, req.poolId);
      if (!r) throw notFound(`volume ${req.uuid} does not exist`);
      const want = req.sizeBytes; // whole MiB, decided by the controller
      if (want <= r.sizeBytes) return { reply: volumeView(r) }; // never shrink: the current size answers
      const image = v.phase === "resized" ? v.image({ pool: r.pool, imageName: r.imageName }) : undefined;
      if (image && image.sizeBytes >= want)
        return { act: { events: [{ type: "VolumeExpanded", uuid: r.uuid, sizeBytes: image.sizeBytes }] }, phase: "expanded" };
      fitsPool(poolIn(ctx, r.pool), want);
      return { act: { effects: [{ op: "resize", pool: r.pool, imageName: r.imageName, sizeBytes: want }] }, phase: "resized" };
    },
  };
}

/** ControllerModifyVolume: change the I/O limits; nothing is appended when nothing changes. */
export function modifyVolume(req: ParsedRequest<"volume.modify">): Command<CommandResult<"volume.modify">, "modified"> {
  return {
    ...onVolume(req),
    decide: (v) => {
      const r = madeIn(v, "volume", req.uuid, req.poolId);
      if (!r) throw notFound(`volume ${req.uuid} does not exist`);
      const changed = v.phase === "modified";
      const next = applyMutableParameters(r.mutableParameters, req.mutableParameters);
      if (changed || sameMutableParameters(next, r.mutableParameters)) return { reply: { volume: volumeView(r), seq: r.seq, changed } };
      return { act: { events: [{ type: "VolumeModified", uuid: r.uuid, mutableParameters: next }] }, phase: "modified" };
    },
  };
}

/** ControllerPublishVolume: record a claim (→ claimed, after which the claim is the record's), refusing what the access mode forbids. */
export function publishVolume(req: ParsedRequest<"volume.publish">): Command<CommandResult<"volume.publish">, "claimed"> {
  return {
    ...onVolume(req, req.nodeId),
    decide: (v, ctx) => {
      const r = madeIn(v, "volume", req.uuid, req.poolId);
      if (!r) throw notFound(`volume ${req.uuid} does not exist`);
      const readOnly = req.readOnly || readerOnly(req.capability);
      const ask = { nodeId: req.nodeId, accessMode: req.capability.accessMode, accessType: req.capability.accessType, readOnly };
      const verdict = decideClaim(r.claims, ask, { nodeVolumes: v.nodeClaims(req.nodeId), maxVolumes: req.maxVolumes });
      if (verdict.kind === "refused") throw new DriverError(verdict.code, verdict.reason);
      if (verdict.kind === "new") return { act: { events: [{ type: "VolumeClaimed", uuid: r.uuid, ...ask }] }, phase: "claimed" };
      const pool = poolIn(ctx, r.pool);
      const publishContext = {
        clusterID: ctx.cluster.clusterID,
        pool: r.pool,
        poolId: String(r.poolId),
        imageName: r.imageName,
        ...pool.publishContext(r.imageName),
        readOnly: String(readOnly),
        // The I/O limits as of this point of the volume's log (a later modification reaches the node as node work).
        ...limitsToContext(r.mutableParameters, r.seq),
      };
      return { reply: { publishContext } };
    },
  };
}

/**
 * ControllerUnpublishVolume: release the node's claim (or every claim without a node); idempotent.
 * The reply names what the released nodes still hold by their own reports (`held`: a CO that
 * skipped NodeUnstageVolume, as Docker Swarm does), with the volume's capability: the controller
 * asks such a node to let go of a staging no target uses (docs/journal.md, "In use means in use").
 */
export function unpublishVolume(req: ParsedRequest<"volume.unpublish">): Command<CommandResult<"volume.unpublish">, "released"> {
  const first = onVolume(req).first;
  return {
    requestId: req.requestId,
    first: { ...first, devices: [req.uuid] },
    decide: (v) => {
      const r = recordIn(v, "volume", req.uuid, req.poolId);
      const mine = (nodeId: string) => req.nodeId === undefined || nodeId === req.nodeId;
      const capability = r?.capabilities[0];
      const held = (v.devices(req.uuid)?.holds ?? [])
        .filter((h) => mine(h.nodeId))
        .slice(0, 16)
        .map(({ lastAt: _, ...h }) => ({ ...h, published: h.published.slice(0, 16), ...(capability ? { capability } : {}) }));
      // Released; or a failed step that released some of the claims: answered as released.
      if (v.phase === "released" || (v.phase === "failed" && v.appended.length > 0)) return { reply: { deleted: true, held } };
      // CSI: a volume that is gone is unpublished everywhere.
      const released = r?.claims.filter((c) => mine(c.nodeId)) ?? [];
      if (!r || released.length === 0) return { reply: { deleted: false, held } };
      return { act: { events: released.map((c) => ({ type: "VolumeUnclaimed" as const, uuid: r.uuid, nodeId: c.nodeId })) }, phase: "released" };
    },
  };
}
