/**
 * Adopt: an image an operator says is a live volume gets the record a create would have made
 * (`csictl volume adopt`, docs/operations.md, "Adopting an image"): after a log restore from an
 * older backup, the image of a volume created since is in the pool and in use, and no record
 * names it. Only an image named after a volume of this driver (`csi-vol-<uuid>`) whose uuid the
 * log never named, under a request name that is free; its size is the image's. The record is a
 * create's (NameReserved, VolumeReserved marked `adopted`, VolumeCreated) in one write, fenced on
 * nothing having been written of either, so two adopts (or an adopt and a create of the name)
 * make one record.
 */
import { type CommandResult, DriverError, invalidArgument, type ParsedRequest, quote, volumeImageName } from "@csi/contracts";
import { liveRecord } from "../../fold/evolve.js";
import { createdEvent, imageOwner, shared } from "../../fold/kinds.js";
import { volumeView } from "../../fold/records.js";
import type { Command } from "../decider.js";
import { nameState, volumeDigest } from "./reservation.js";
import { poolIn } from "./volumes.js";

/** Its phases: the image looked at, then the record written (after which it answers as a repeat would). */
export function adoptVolume(req: ParsedRequest<"volume.adopt">): Command<CommandResult<"volume.adopt">, "looked" | "adopted"> {
  const owner = imageOwner(req.imageName);
  if (owner?.kind !== "volume")
    throw invalidArgument(`image ${quote(req.imageName, 64)} is not named after a volume of this driver (csi-vol-<uuid>): it cannot be adopted`);
  const me = { kind: "volume" as const, uuid: owner.uuid };
  const name = { kind: "name" as const, of: "volume" as const, name: req.name };
  return {
    requestId: req.requestId,
    first: (ctx) => {
      const ref = { kind: "image" as const, pool: req.pool ?? ctx.cluster.defaultPool, imageName: req.imageName };
      return { locks: [name, me, ref], states: [name, me], fromLog: [me] };
    },
    decide: (v, ctx) => {
      const poolName = req.pool ?? ctx.cluster.defaultPool;
      const pool = poolIn(ctx, poolName);
      const mine = liveRecord(v.state(me), "volume");
      const named = nameState(v, "volume", req.name)?.uuid;
      if (mine?.imageId && named === me.uuid) return { reply: volumeView(mine) }; // recorded (by this run, or adopted before): the same answer
      if (v.state(me)) throw new DriverError("FailedPrecondition", `the log names volume ${me.uuid} already: it is not an image without a record`);
      if (named) throw new DriverError("AlreadyExists", `the name ${quote(req.name, 64)} is volume ${named}'s`);
      const ref = { pool: poolName, imageName: req.imageName };
      if (v.phase !== "looked") return { stat: [ref], phase: "looked" };
      const image = v.image(ref);
      if (!image) throw new DriverError("NotFound", `pool ${quote(poolName, 64)} has no image ${quote(req.imageName, 64)}`);
      if (image.readOnly) throw invalidArgument(`image ${quote(req.imageName, 64)} is a snapshot's (read-only): only a volume's image can be adopted`);
      if (image.owner?.clusterID && image.owner.clusterID !== ctx.cluster.clusterID)
        throw new DriverError(
          "FailedPrecondition",
          `image ${quote(req.imageName, 64)} names cluster ${quote(image.owner.clusterID, 64)} in its metadata: adopt it there`,
        );
      if (image.sizeBytes % (1024 * 1024) !== 0 || image.sizeBytes <= 0)
        throw new DriverError(
          "FailedPrecondition",
          `image ${quote(req.imageName, 64)} is ${image.sizeBytes} bytes, not a whole number of MiB: not one this driver made`,
        );
      const reserved = {
        type: "VolumeReserved" as const,
        uuid: me.uuid,
        name: req.name,
        instance: ctx.cluster.instance,
        pool: poolName,
        poolId: pool.poolId,
        imageName: volumeImageName(me.uuid),
        sizeBytes: image.sizeBytes,
        digest: volumeDigest(poolName, req.parameters, {}),
        parameters: req.parameters,
        capabilities: req.capabilities,
        adopted: true as const,
      };
      return { act: { events: [shared.nameReserved("volume", req.name, me.uuid), reserved, createdEvent("volume", me.uuid, image)] }, phase: "adopted" };
    },
  };
}
