/**
 * `volume adopt <image> --name <name>`: the journal's volume.adopt (docs/operations.md, "Adopting
 * an image"). An image an operator says is live — after a log restore from an older backup, a
 * volume created since — gets the record a create would have made, under a free request name, with
 * the image's size. The CSI id it now has is printed: what a CO already holds for it is that id
 * when the volume was made by this cluster under this uuid.
 */
import { randomUUID } from "node:crypto";
import { type AccessMode, composeVolumeId } from "@csi/contracts";
import { fields } from "../output.js";
import type { Session } from "../session.js";
import { parseParams } from "./csi.js";

export interface AdoptOptions {
  name: string;
  pool?: string;
  mode: string;
  block?: boolean;
  fs?: string;
  param?: string[];
  requestId?: string;
}

export async function volumeAdopt(s: Session, imageName: string, o: AdoptOptions): Promise<void> {
  const cluster = s.cluster().clusterID;
  const accessMode = o.mode.toUpperCase().replaceAll("-", "_") as AccessMode;
  const capability = o.block ? { accessType: "block" as const, accessMode } : { accessType: "mount" as const, accessMode, ...(o.fs ? { fsType: o.fs } : {}) };
  const v = await (await s.journal()).call(cluster, "volume.adopt", {
    requestId: o.requestId ?? `csictl-${randomUUID()}`,
    name: o.name,
    imageName,
    ...(o.pool ? { pool: o.pool } : {}),
    parameters: parseParams(o.param),
    capabilities: [capability],
  });
  const id = composeVolumeId({ clusterID: cluster, poolID: v.poolId, uuid: v.uuid });
  s.out.result(
    { cluster, id, ...v },
    () =>
      fields([
        ["VOLUME ID", id],
        ["NAME", v.name],
        ["POOL", `${v.pool}/${v.imageName}`],
        ["SIZE", v.sizeBytes],
      ]),
    () => [id],
  );
  s.out.note(`adopted: ${v.pool}/${v.imageName} is volume ${v.uuid} "${v.name}" of cluster ${cluster}; gc never removes it now`);
}
