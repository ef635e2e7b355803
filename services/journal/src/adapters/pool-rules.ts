/**
 * The rules every pool backend applies the same way (domain/pool-backend.ts says what they
 * are): which names are images, how a size is checked and rounded, when an existing image
 * answers a repeated create or clone, and how a backend names the temporary image of a build.
 */
import { DriverError, IMAGE_NAME_RE, MiB, roundUpToMiB } from "@csi/contracts";
import type { ImageInfo } from "../domain/pool-backend.js";

/** Default largest image: 1 TiB (sparse or thin, so it costs nothing until written). */
export const DEFAULT_MAX_IMAGE_BYTES = 1024 * 1024 * MiB;

export function isImageName(name: string): boolean {
  return typeof name === "string" && IMAGE_NAME_RE.test(name) && !name.includes("..");
}

export function checkImageName(name: string): string {
  if (!isImageName(name)) throw new DriverError("InvalidArgument", `invalid image name ${JSON.stringify(String(name).slice(0, 64))}`);
  return name;
}

/** A positive size rounded up to a whole MiB, within `max` (InvalidArgument, OutOfRange). */
export function checkSize(sizeBytes: number, max: number): number {
  if (!Number.isFinite(sizeBytes) || sizeBytes <= 0) {
    throw new DriverError("InvalidArgument", `size must be a positive number of bytes, got ${sizeBytes}`);
  }
  const size = roundUpToMiB(sizeBytes);
  if (size > max) throw new DriverError("OutOfRange", `size ${size} exceeds the pool maximum ${max}`);
  return size;
}

/** onExisting for create/clone: same rounded size and writable → the image; else AlreadyExists. */
export function sameWritable(name: string, size: number) {
  return (img: ImageInfo): ImageInfo => {
    if (img.readOnly) throw new DriverError("AlreadyExists", `"${name}" exists as a read-only snapshot`);
    if (img.sizeBytes !== size) {
      throw new DriverError("AlreadyExists", `image "${name}" exists with size ${img.sizeBytes}, not ${size}`);
    }
    return img;
  };
}

/** onExisting for snapshot: a snapshot → it; a writable image of that name → AlreadyExists. */
export function isSnapshot(name: string) {
  return (img: ImageInfo): ImageInfo => {
    if (!img.readOnly) throw new DriverError("AlreadyExists", `"${name}" exists and is not a snapshot`);
    return img;
  };
}

/** `.tmp-<name>-<12 hex>`: the temporary name an image is built under before it is published. */
export const tempName = (name: string, hex: string) => `.tmp-${name}-${hex}`;

/** The image name a temp entry `.tmp-<name>-<12 hex>` is being built for; undefined for any other. */
export function tempOf(entry: string): string | undefined {
  const m = /^\.tmp-(.+)-[0-9a-f]{12}$/.exec(entry);
  return m?.[1];
}
