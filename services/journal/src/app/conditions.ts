/**
 * ListVolumes' volume_condition (CSI: set on every entry when VOLUME_CONDITION is advertised;
 * Kubernetes' external-health-monitor reads it from ListVolumes): each listed volume's image
 * present in its pool or not, from one listing of the names of each pool the page names — nothing
 * stat'ed per volume. ControllerGetVolume (volume.get) also compares the image's size.
 */
import type { VolumeView } from "@csi/contracts";
import type { PoolBackend } from "../pools/port.js";

export async function withConditions(views: VolumeView[], pools: ReadonlyMap<string, PoolBackend>): Promise<VolumeView[]> {
  const names = new Map<string, ReadonlySet<string> | undefined>();
  for (const pool of new Set(views.map((v) => v.pool))) names.set(pool, await pools.get(pool)?.imageNames());
  return views.map((v) => {
    const there = names.get(v.pool);
    if (!there) return { ...v, condition: { abnormal: true, message: `pool ${v.pool} is not served by this journal` } };
    return there.has(v.imageName)
      ? { ...v, condition: { abnormal: false, message: "image present" } }
      : { ...v, condition: { abnormal: true, message: `image ${v.imageName} is missing from pool ${v.pool}` } };
  });
}
