/**
 * Images and sizes, the same for the journal (which makes images) and the nodes (which attach
 * them): image names derive from the aggregate's uuid, sizes are whole MiB, rounded up.
 */
export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;

/** `n` rounded up to a whole MiB (1 → 1 MiB, 1 MiB → 1 MiB, 1 MiB + 1 → 2 MiB). */
export function roundUpToMiB(n: number): number {
  return Math.ceil(n / MiB) * MiB;
}

export const VOLUME_IMAGE_PREFIX = "csi-vol-";
export const SNAPSHOT_IMAGE_PREFIX = "csi-snap-";
export const volumeImageName = (uuid: string) => `${VOLUME_IMAGE_PREFIX}${uuid}`;
export const snapshotImageName = (uuid: string) => `${SNAPSHOT_IMAGE_PREFIX}${uuid}`;

/** What a pool accepts as an image name (a file name in the file pool: no '/', no leading dot). */
export const IMAGE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
