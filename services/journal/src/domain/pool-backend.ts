/**
 * The pool backend port: what the journal needs from a storage pool (Ceph RBD, or the embedded
 * file pool). Types only; no I/O here. Adapters live in `../adapters/`.
 *
 * Sizes are bytes. Every image size is a whole number of MiB (`roundUpToMiB` in @csi/contracts):
 * requests are rounded UP, so the image is never smaller than asked for.
 */

export interface ImageInfo {
  name: string;
  /** Backend-assigned id, stable for the life of the image (the file pool uses the inode). */
  id: string;
  sizeBytes: number;
  /** Snapshots are read-only; images and clones are writable. */
  readOnly: boolean;
}

/**
 * Whose an image is, for backends that can write it on the image itself (RBD image metadata,
 * as ceph-csi does): an image can then be traced back to its volume or snapshot without Redis
 * or the log. The file pool keeps nothing of it.
 */
export interface ImageOwner {
  kind: "volume" | "snapshot";
  uuid: string;
  /** The CSI request name (absent for a member of a group snapshot that has none). */
  name?: string;
  clusterID: string;
}

export interface PoolCapacity {
  totalBytes: number;
  freeBytes: number;
  maxImageBytes: number;
}

export interface PoolBackend {
  readonly poolName: string;
  /** Numeric id, goes into volume ids. */
  readonly poolId: number;
  /** Largest image the pool accepts (bytes). */
  readonly maxImageBytes: number;
  /**
   * Create a sparse image; size rounded UP to a whole MiB. If an image of that name already
   * exists with the same rounded size, return it (idempotent); different size → DriverError
   * AlreadyExists. Size <= 0 → InvalidArgument; size > maxImageBytes → OutOfRange.
   */
  createImage(name: string, sizeBytes: number, owner?: ImageOwner): Promise<ImageInfo>;
  /**
   * Grow to sizeBytes rounded up to MiB; a smaller or equal size is a no-op returning the
   * current info (never shrink). Missing → NotFound. Past max → OutOfRange. Read-only
   * (snapshot) image → InvalidArgument.
   */
  resizeImage(name: string, sizeBytes: number): Promise<ImageInfo>;
  /**
   * Delete; a missing image is success. `copied: false` says the image was never built by a copy
   * (a plain create), so no interrupted copy can have left temp files of it to clean up.
   */
  deleteImage(name: string, opts?: { copied?: boolean }): Promise<void>;
  /**
   * Read-only point-in-time copy of `source` named `snapName` (file pool: a reflink or sparse
   * copy; RBD: a clone of a snapshot of the source, as ceph-csi makes it). Idempotent if snapName
   * exists as a snapshot; a writable image of that name → AlreadyExists. Missing source → NotFound.
   */
  snapshotImage(source: string, snapName: string, owner?: ImageOwner): Promise<ImageInfo>;
  /**
   * Writable copy of an image or snapshot, grown to sizeBytes if larger than the source (never
   * smaller than source: sizeBytes < source size → OutOfRange). Idempotent if target exists
   * with same size. Missing source → NotFound.
   */
  cloneImage(source: string, target: string, sizeBytes: number, owner?: ImageOwner): Promise<ImageInfo>;
  statImage(name: string): Promise<ImageInfo | undefined>;
  listImages(): Promise<ImageInfo[]>;
  capacity(): Promise<PoolCapacity>;
  /**
   * What a node needs to find an image of this pool, for the publish context (file pool: the
   * image's path; RBD: the Ceph pool, monitors and user — never a key). Invalid name → InvalidArgument.
   */
  publishContext(name: string): Record<string, string>;
}
