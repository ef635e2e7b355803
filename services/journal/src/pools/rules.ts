/**
 * The rules every pool backend applies the same way (pools/port.ts says what they
 * are): which names are images, how a size is checked and rounded, when an existing image
 * answers a repeated create or clone, and how a backend names the temporary image of a build.
 */
import { DriverError, IMAGE_NAME_RE, MiB, roundUpToMiB } from "@csi/contracts";
import { z } from "zod";
import type { ImageInfo, PoolBinding, PoolOwnerRef } from "./port.js";

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

/** A pool's binding as a pool keeps it (the file pool's `.csi-pool.json`, an RBD pool's pool metadata). */
const BindingRecord = z.object({
  cluster: z.string().max(128),
  pool: z.string().max(128),
  log: z.string().max(128),
  boundAt: z.number(),
  previous: z.string().max(128).optional(),
});

/** A kept binding read back: undefined when there is none; one that is not a binding this driver wrote is refused (never overwritten), naming `where`. */
export function parseBinding(text: string | undefined, where: string): PoolBinding | undefined {
  if (text === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    raw = undefined;
  }
  const parsed = BindingRecord.safeParse(raw);
  if (!parsed.success) throw new DriverError("FailedPrecondition", `${where} is not a pool binding this driver wrote: look at it, move it away if it is not`);
  return parsed.data;
}

/**
 * PoolBackend.bind's rule, the same for every pool: `found` (the binding the pool keeps) for this
 * log is kept as it is; one of another pool or cluster is refused (two on one place), one of
 * another log refused unless `rebind`; no binding while the log is empty and the pool holds images
 * (another log's pool, from before bindings) refused unless `rebind`. Otherwise `write` is the
 * binding to keep from now on. `where` names the pool in the errors.
 */
export async function decideBinding(
  found: PoolBinding | undefined,
  to: PoolOwnerRef,
  o: { logRecords: number; rebind: boolean; images: () => Promise<number>; where: string; place: "directory" | "Ceph pool"; now: number },
): Promise<{ keep: PoolBinding } | { write: PoolBinding }> {
  const here = `pool "${to.pool}" of cluster ${to.cluster} (${o.where})`;
  const fix = `start a journal once with POOL_REBIND=1 to bind the pool to this log (gc never removes the images made before)`;
  if (found && (found.cluster !== to.cluster || found.pool !== to.pool))
    throw new DriverError(
      "FailedPrecondition",
      `${o.where} is already pool "${found.pool}" of cluster ${found.cluster}: two pools cannot share one ${o.place}`,
    );
  if (found && found.log === to.log) return { keep: found };
  if (found && !o.rebind)
    throw new DriverError(
      "FailedPrecondition",
      `${here} belongs to event log ${found.log}, and this journal's log is ${to.log}: the log was lost, replaced, or is another stack's. Restore it (csictl log restore), or ${fix}`,
    );
  if (!found && !o.rebind && o.logRecords === 0) {
    const images = await o.images();
    if (images > 0)
      throw new DriverError(
        "FailedPrecondition",
        `${here} holds ${images} images and belongs to no log, and this journal's log is empty: it is another log's pool. Restore that log, or ${fix}`,
      );
  }
  return { write: { ...to, boundAt: o.now, ...(found ? { previous: found.log } : {}) } };
}
