/**
 * The snapshot commands as deciders (commands/decider.ts). Pure. Group snapshots: group.ts.
 */
import { invalidArgument, notFound, type ParsedRequest, type SnapshotView } from "@csi/contracts";
import { liveRecord } from "../../fold/evolve.js";
import { KINDS } from "../../fold/kinds.js";
import { snapshotView } from "../../fold/records.js";
import type { Command } from "../decider.js";
import { type CreatePhase, checkSnapshotReservation, createRead, decideImageCreate, digestOf } from "./reservation.js";
import { type DeletePhase, deleteImageAggregate, madeIn, poolIn } from "./volumes.js";

export function createSnapshot(req: ParsedRequest<"snapshot.create">): Command<SnapshotView, CreatePhase> {
  const digest = digestOf({ parameters: req.parameters });
  const source = { kind: "volume" as const, uuid: req.sourceUuid };
  return {
    requestId: req.requestId,
    first: (ctx) => createRead("snapshot", req.name, ctx, [source]),
    decide: (v, ctx) => {
      const volume = madeIn(v, "volume", req.sourceUuid, req.sourcePoolId);
      return decideImageCreate(v, ctx, {
        kind: "snapshot",
        name: req.name,
        verdict: (record, dir, image) => checkSnapshotReservation({ name: req.name, sourceUuid: req.sourceUuid, digest }, dir, record, image),
        reserve: (uuid) => {
          if (!volume) throw notFound(`source volume ${req.sourceUuid} does not exist`);
          return {
            type: "SnapshotReserved" as const,
            uuid,
            name: req.name,
            instance: ctx.cluster.instance,
            sourceUuid: req.sourceUuid,
            pool: volume.pool,
            poolId: poolIn(ctx, volume.pool).poolId,
            imageName: KINDS.snapshot.imageName(uuid),
            digest,
            // Who asked (a VolumeSnapshot): recorded for the history, outside the digest (docs/deploy.md, "Who asked").
            ...(req.kubernetes ? { kubernetes: req.kubernetes } : {}),
          };
        },
        build: (r) => ({ op: "snapshot", pool: r.pool, from: volume?.imageName ?? "", imageName: r.imageName }),
        reply: snapshotView,
      });
    },
  };
}

export function deleteSnapshot(req: ParsedRequest<"snapshot.delete">): Command<{ deleted: boolean }, DeletePhase | "groupRead"> {
  return deleteImageAggregate<"snapshot", "groupRead">("snapshot", req, (r, v) => {
    if (!r.groupSnapshotUuid) return undefined;
    const group = { kind: "groupsnapshot" as const, uuid: r.groupSnapshotUuid };
    if (!v.has(group)) return { read: { states: [group] }, phase: "groupRead" };
    // CSI: a member of a group snapshot cannot be deleted on its own (DeleteSnapshot → INVALID_ARGUMENT).
    if (liveRecord(v.state(group), "groupsnapshot")) {
      throw invalidArgument(`snapshot ${r.uuid} is part of group snapshot ${r.groupSnapshotUuid}: delete the group snapshot instead`);
    }
    return undefined;
  });
}
