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
  /** What the image says of its owner, on backends that write it (RBD image metadata): absent where it carries none. */
  owner?: Partial<ImageOwner>;
  /** When the image was made (epoch ms; the file's birth time, RBD's create timestamp), where the backend tells: gc's proof of age. */
  createdAt?: number;
}

/**
 * What a pool holds besides its images (RBD): an image this driver deleted that waits in the trash
 * (clones still read from it, or a purge was cut short), or a temporary of an interrupted build.
 */
export interface Leftover {
  kind: "trash" | "temp";
  /** The image's name (a trash entry: the name it had). */
  name: string;
  /** The image id (a trash entry is removed by it). */
  id: string;
  sizeBytes: number;
  /** A temporary: when it was made; a trash entry: when it was deleted (ms since the epoch). */
  since: number;
  owner?: Partial<ImageOwner>;
  /** A trash entry that clones still read from: not purgeable yet. */
  neededByClones?: boolean;
  /** A trash entry in quarantine until then (epoch ms): not purgeable before. */
  keepUntil?: number;
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
  /** The identity of the event log whose journal made it (the pool's binding: RBD writes it on every image). */
  log?: string;
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
  deleteImage(name: string, opts?: { copied?: boolean; quarantine?: boolean }): Promise<void>;
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
  /** True where every image this driver makes carries its owner (RBD): an image without one is not ours, and verify/gc leave it alone. */
  readonly marksOwners?: boolean;
  /** The identity of the log the pool is bound to, once bound (pools that write it on every image: RBD). */
  readonly boundLog?: string;
  /** The names of every image, from one listing (cheaper than listImages: nothing stat'ed): ListVolumes' conditions. */
  imageNames(): Promise<ReadonlySet<string>>;
  /** Trash entries this driver made and temporaries of interrupted builds (pools that have them). */
  leftovers?(): Promise<Leftover[]>;
  /** Remove one leftover: a trash entry only if marked ours and nothing needs it (false: kept), a temporary by its name. */
  removeLeftover?(l: Pick<Leftover, "kind" | "name" | "id">): Promise<boolean>;
  /**
   * What a node needs to find an image of this pool, for the publish context (file pool: the
   * image's path; RBD: the Ceph pool, monitors and user — never a key). Invalid name → InvalidArgument.
   */
  publishContext(name: string): Record<string, string>;
  /**
   * Bind the pool to its log (the file pool in a file, an RBD pool in its pool metadata), at a journal's start:
   * resolves with when it was bound to this log, or refuses (FailedPrecondition, naming both) a
   * pool bound to another log, another pool or cluster on the same place, or a pool that holds
   * images and no binding while the log is empty (docs/operations.md, "A pool knows its log").
   */
  bind?(to: PoolOwnerRef, o: { logRecords: number; rebind: boolean }): Promise<PoolBinding>;
}

/** Whose a pool is: the cluster and pool it serves, and the identity of the log that owns it. */
export interface PoolOwnerRef {
  cluster: string;
  pool: string;
  log: string;
}

export interface PoolBinding extends PoolOwnerRef {
  /** When the pool was bound to this log (epoch ms): gc never removes an image made before (it may be another log's). */
  boundAt: number;
  /** The log it was bound to before a rebind, if any. */
  previous?: string;
}
