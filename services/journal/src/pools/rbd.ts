/**
 * RbdPool: a pool backend on a Ceph RBD pool, through a long-lived helper over librbd
 * (rbd/helper.ts; docs/backends.md says why not the CLI or a native addon, with figures).
 *
 * Images, as ceph-csi makes them (its docs/design/proposals/rbd-snap-clone.md):
 *   volume      `rbd create` with the pool's features (default layering), thin.
 *   snapshot    an image of its own: a temporary snapshot `<source>@<snapName>` is cloned (clone
 *               format 2: no protect needed) into a new image with layering,deep-flatten, the
 *               temporary snapshot is removed (it stays in the source's trash namespace while
 *               the clone needs it), and the new image gets a snapshot of its own name,
 *               `<snapName>@<snapName>`: the frozen content restores clone from. An image with a
 *               snapshot of its own name is read-only (ImageInfo.readOnly).
 *   clone       of a snapshot image: a clone of `<snap>@<snap>`; of a volume: of a temporary
 *               snapshot `<source>@<target>` as above. Grown to the size asked for.
 *   depth       an image whose parent chain would be longer than `maxCloneDepth` is flattened
 *               before it is published (ceph-csi's hard limit; it does it in the manager, in the
 *               background, from a soft limit on — we do it in the call).
 *   delete      user snapshots removed, the image moved to the trash (its name is free at once),
 *               then removed from the trash unless clones still need it: it stays there, and
 *               every sweep (at most every `sweepEveryMs`) tries again; it goes once its clones do.
 *
 * A snapshot or clone is built under a temporary name (`.tmp-<name>-<hex>`, never listed) and
 * renamed into place once complete (RBD's rename fails when the name is taken), so no one ever
 * sees a half-built image under its final name — as the file pool's hard link. Temporary images
 * of an interrupted build are removed by the next build or delete of that name (under the
 * journal's lock of the name) and, once older than `tmpStaleMs`, by any sweep.
 *
 * Every image made gets one image metadata key naming its owner (`<prefix>owner`: kind, uuid,
 * request name, cluster, and the identity of the event log whose journal made it), so
 * `rbd image-meta list` traces an image back without Redis or the log; one key, one metadata write
 * (images made before carry the four keys `<prefix>kind`, `uuid`, `name`, `cluster`: still read).
 * The pool's binding to its log is pool metadata, `<prefix>binding` (`rbd pool metadata get`).
 */
import { randomBytes } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { DriverError, PLUGIN_NAME } from "@csi/contracts";
import { KeyedMutex } from "@csi/runtime";
import type { Logger } from "pino";
import { z } from "zod";
import type { ImageInfo, ImageOwner, Leftover, PoolBackend, PoolBinding, PoolCapacity, PoolOwnerRef } from "./port.js";
import { rbdError } from "./rbd/errors.js";
import { RbdCallError, RbdHelper } from "./rbd/helper.js";
import {
  checkImageName,
  checkSize,
  DEFAULT_MAX_IMAGE_BYTES,
  decideBinding,
  isImageName,
  isSnapshot,
  parseBinding,
  sameWritable,
  tempName,
  tempOf,
} from "./rules.js";

/** Prefix of the image metadata keys this driver writes: `<prefix>owner`, `<prefix>deleted` (and, before, `kind`, `uuid`, `name`, `cluster`). */
export const META_PREFIX = `${PLUGIN_NAME}/`;
/** The one image metadata key of an image's owner: JSON `{kind, uuid, cluster, name?, log?}`. */
export const OWNER_KEY = `${META_PREFIX}owner`;
/** The pool metadata key of the pool's binding to its log (JSON, as the file pool's `.csi-pool.json`). */
const BINDING_KEY = `${META_PREFIX}binding`;
/** Features of snapshot images, whatever the pool's: deep-flatten lets a flatten cut their own snapshot loose too. */
const SNAPSHOT_FEATURES = ["layering", "deep-flatten"];

export interface RbdPoolOptions {
  name: string;
  id: number;
  /** The Ceph pool. */
  cephPool: string;
  monitors: string[];
  /** Ceph user, without `client.`. */
  user: string;
  /** File holding the user's key alone (a Secret's `userKey`): librados reads it; it is never copied, logged or put on a command line. */
  keyFile: string;
  imageFeatures?: string[];
  maxImageBytes?: number;
  maxCloneDepth?: number;
  /** Bound of each call but flatten (librados's own timeouts are set just below it). */
  opTimeoutMs?: number;
  flattenTimeoutMs?: number;
  sweepEveryMs?: number;
  tmpStaleMs?: number;
  /** Debian's python3, which has python3-rbd. */
  python?: string;
  logger?: Logger;
}

/** What the helper answers about an image. */
interface RawInfo {
  name: string;
  id: string;
  size: number;
  snaps: string[];
  parent: { pool: string; image: string; snap: string } | null;
  meta: Record<string, string>;
  created: number;
}

/** What the helper's clone answers: the clone described, and how many ancestors it has. */
type Cloned = RawInfo & { depth: number };

/** A build under a temporary name: the image it made as the helper last described it, or undefined to stat it once published. */
type Build = (tmp: string) => Promise<RawInfo | undefined>;

/** What the helper answers about a marked trash entry: `deleted` in seconds, `snaps` left (in the trash namespace: clones need them). */
interface RawTrash {
  name: string;
  id: string;
  size: number;
  meta: Record<string, string>;
  snaps: number;
  deleted: number;
}

/** The mark deleteImage puts on an image before it moves it to the trash: the sweeps purge only marked entries (the pool may hold others' trash). */
const DELETED_MARK = `${META_PREFIX}deleted`;
const MAX_LIST = 100_000;

export class RbdPool implements PoolBackend {
  readonly poolName: string;
  readonly poolId: number;
  readonly maxImageBytes: number;
  readonly cephPool: string;
  /** Every image made here carries its owner (image metadata): verify calls one without it foreign. */
  readonly marksOwners = true;
  readonly #o: Required<Omit<RbdPoolOptions, "logger">> & { logger?: Logger };
  readonly #helper: RbdHelper;
  /** Resizes, and builds of one name (their temporary snapshot on the source is named after the target), one at a time in this process; across processes the journal's lock of the name does it. */
  readonly #resizes = new KeyedMutex();
  readonly #builds = new KeyedMutex();
  #nextSweep = 0;
  /** The identity of the log the pool is bound to (bind): written on every image made. */
  #log: string | undefined;

  constructor(o: RbdPoolOptions) {
    if (!Number.isSafeInteger(o.id) || o.id < 0) throw new DriverError("InvalidArgument", `pool id must be a non-negative integer, got ${o.id}`);
    this.#o = {
      imageFeatures: ["layering"],
      maxImageBytes: DEFAULT_MAX_IMAGE_BYTES,
      maxCloneDepth: 8,
      opTimeoutMs: 30_000,
      flattenTimeoutMs: 600_000,
      sweepEveryMs: 60_000,
      tmpStaleMs: 0,
      python: "/usr/bin/python3",
      ...o,
    };
    // A temporary older than the longest build (a flatten) has lost its builder.
    if (this.#o.tmpStaleMs <= 0) this.#o.tmpStaleMs = 2 * this.#o.flattenTimeoutMs;
    this.poolName = o.name;
    this.poolId = o.id;
    this.cephPool = o.cephPool;
    this.maxImageBytes = this.#o.maxImageBytes;
    const seconds = String(Math.max(1, Math.floor((this.#o.opTimeoutMs * 0.8) / 1000)));
    this.#helper = new RbdHelper({
      python: this.#o.python,
      ...(o.logger ? { logger: o.logger.child({ pool: o.name }) } : {}),
      settings: {
        user: o.user,
        monHost: o.monitors.join(","),
        keyFile: o.keyFile,
        pool: o.cephPool,
        metaPrefix: META_PREFIX,
        workers: 8,
        conf: { rbd_default_clone_format: "2", client_mount_timeout: seconds, rados_mon_op_timeout: seconds, rados_osd_op_timeout: seconds },
      },
    });
  }

  /** Checks the key file (readable, one key: InvalidArgument otherwise, naming the file, never its content). No connection yet. */
  async init(): Promise<void> {
    const key = await readFile(this.#o.keyFile, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new DriverError("InvalidArgument", `pool "${this.poolName}": cannot read the Ceph key file ${this.#o.keyFile} (${err.code ?? err.message})`);
    });
    if (!/^[A-Za-z0-9+/]{20,}={0,2}\s*$/.test(key)) {
      throw new DriverError("InvalidArgument", `pool "${this.poolName}": ${this.#o.keyFile} does not hold one base64 Ceph key (a Secret's userKey)`);
    }
    const mode = (await stat(this.#o.keyFile)).mode & 0o777;
    if (mode & 0o077)
      this.#o.logger?.warn(
        { pool: this.poolName, keyFile: this.#o.keyFile, mode: mode.toString(8) },
        "the Ceph key file is readable by group or others (0400 or 0600 expected)",
      );
  }

  /** One cheap call to the cluster (the images' names): how many images the pool holds. */
  async probe(): Promise<number> {
    return (await this.#call<string[]>("names", {}, "list images")).length;
  }

  async close(): Promise<void> {
    await this.#helper.close();
  }

  /** The helper process's pid while one runs (tests freeze it). */
  get helperPid(): number | undefined {
    return this.#helper.pid;
  }

  get boundLog(): string | undefined {
    return this.#log;
  }

  /** PoolBackend.bind, kept as pool metadata of the Ceph pool (written before the journal serves). */
  async bind(to: PoolOwnerRef, o: { logRecords: number; rebind: boolean }): Promise<PoolBinding> {
    const where = `Ceph pool ${this.cephPool}`;
    const text = await this.#call<string | null>("pool_meta_get", { key: BINDING_KEY }, "read the pool's binding");
    // Only images carrying our owner metadata count: a Ceph pool may hold other users' images.
    const images = async () => (await this.listImages()).filter((i) => i.owner).length;
    const d = await decideBinding(parseBinding(text ?? undefined, where), to, { ...o, images, where, place: "Ceph pool", now: Date.now() });
    const binding = "keep" in d ? d.keep : d.write;
    if ("write" in d) await this.#call("pool_meta_set", { key: BINDING_KEY, value: JSON.stringify(d.write) }, "write the pool's binding");
    this.#log = binding.log;
    return binding;
  }

  publishContext(name: string): Record<string, string> {
    return { poolKind: "rbd", cephPool: this.cephPool, imageName: checkImageName(name), monitors: this.#o.monitors.join(","), cephUser: this.#o.user };
  }

  async createImage(name: string, sizeBytes: number, owner?: ImageOwner): Promise<ImageInfo> {
    checkImageName(name);
    const size = checkSize(sizeBytes, this.maxImageBytes);
    await this.#sweepStale();
    const created = await this.#call<RawInfo>(
      "create",
      { name, size, features: this.#o.imageFeatures.join(","), meta: this.#metaOf(owner) },
      `create image "${name}"`,
    ).catch((err: unknown) => {
      if (err instanceof DriverError && err.code === "AlreadyExists") return undefined;
      throw err;
    });
    if (created) return infoOf(created);
    // Someone else's image of that name: the common compatibility rules decide.
    const existing = await this.statImage(name);
    if (!existing) throw new DriverError("Aborted", `image "${name}" keeps changing; retry`);
    return sameWritable(name, size)(existing);
  }

  async resizeImage(name: string, sizeBytes: number): Promise<ImageInfo> {
    checkImageName(name);
    const size = checkSize(sizeBytes, this.maxImageBytes);
    return this.#resizes.run(name, async () => {
      const img = await this.statImage(name);
      if (!img) throw new DriverError("NotFound", `image "${name}" not found`);
      if (img.readOnly) throw new DriverError("InvalidArgument", `image "${name}" is a read-only snapshot`);
      if (size <= img.sizeBytes) return img;
      return infoOf(await this.#call<RawInfo>("resize", { name, size }, `resize image "${name}"`));
    });
  }

  async deleteImage(name: string): Promise<void> {
    checkImageName(name);
    await this.#removeTemps(name);
    await this.#remove(name);
    await this.#sweepStale();
  }

  async snapshotImage(source: string, snapName: string, owner?: ImageOwner): Promise<ImageInfo> {
    checkImageName(source);
    checkImageName(snapName);
    return this.#publish(snapName, isSnapshot(snapName), async (tmp) => {
      await this.#source(source);
      const made = await this.#cloneOfSnapshot(source, snapName, tmp, SNAPSHOT_FEATURES, this.#metaOf(owner));
      await this.#flattenIfDeep(tmp, made.depth);
      await this.#call("snap_create", { name: tmp, snap: snapName }, `snapshot "${snapName}"`);
      return undefined; // its own snapshot makes it read-only: stat it once published
    });
  }

  async cloneImage(source: string, target: string, sizeBytes: number, owner?: ImageOwner): Promise<ImageInfo> {
    checkImageName(source);
    checkImageName(target);
    const size = checkSize(sizeBytes, this.maxImageBytes);
    const tooSmall = (have: number) => new DriverError("OutOfRange", `clone size ${size} is smaller than source "${source}" (${have} bytes)`);
    return this.#publish(target, sameWritable(target, size), async (tmp) => {
      const from = await this.#source(source);
      if (size < from.sizeBytes) throw tooSmall(from.sizeBytes);
      const features = this.#o.imageFeatures.join(",");
      const made = from.readOnly
        ? await this.#call<Cloned>("clone", { parent: source, snap: source, name: tmp, features, meta: this.#metaOf(owner) }, `clone "${source}"`)
        : await this.#cloneOfSnapshot(source, target, tmp, this.#o.imageFeatures, this.#metaOf(owner));
      // Check the clone, not the earlier stat: the source may have grown meanwhile.
      if (size < made.size) throw tooSmall(made.size);
      const sized = size > made.size ? await this.#call<RawInfo>("resize", { name: tmp, size }, `resize clone "${target}"`) : made;
      // Flattened (rare): its parent changed, stat it again once published.
      return (await this.#flattenIfDeep(tmp, made.depth)) ? undefined : sized;
    });
  }

  async statImage(name: string): Promise<ImageInfo | undefined> {
    checkImageName(name);
    const raw = await this.#info(name);
    return raw && infoOf(raw);
  }

  async listImages(): Promise<ImageInfo[]> {
    const all = await this.#call<RawInfo[]>("list", { pattern: "^[A-Za-z0-9]", max: MAX_LIST }, "list images");
    return all
      .filter((i) => isImageName(i.name))
      .map(infoOf)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async imageNames(): Promise<ReadonlySet<string>> {
    return new Set((await this.#call<string[]>("names", {}, "list images")).filter(isImageName));
  }

  async capacity(): Promise<PoolCapacity> {
    const df = await this.#call<{ total: number; free: number }>("df", {}, "read the pool's capacity");
    return { totalBytes: df.total, freeBytes: df.free, maxImageBytes: this.maxImageBytes };
  }

  /** Marked trash entries (images deleted here, waiting or not purged yet) and temporaries of interrupted builds. */
  async leftovers(): Promise<Leftover[]> {
    const [trash, temps] = await Promise.all([
      this.#call<RawTrash[]>("trash_list", { mark: DELETED_MARK }, "list the trash"),
      this.#call<RawInfo[]>("list", { pattern: "^\\.tmp-", max: MAX_LIST }, "list temporary images"),
    ]);
    const owned = (meta: Record<string, string>) => {
      const o = ownerOf(meta);
      return o ? { owner: o } : {};
    };
    return [
      ...trash.map(
        (t): Leftover => ({
          kind: "trash",
          name: t.name,
          id: t.id,
          sizeBytes: t.size,
          since: t.deleted * 1000,
          neededByClones: t.snaps > 0,
          ...owned(t.meta),
        }),
      ),
      ...temps
        .filter((t) => tempOf(t.name) !== undefined)
        .map((t): Leftover => ({ kind: "temp", name: t.name, id: t.id, sizeBytes: t.size, since: t.created * 1000, ...owned(t.meta) })),
    ];
  }

  /** A marked trash entry purged (false: clones still need it), or a temporary removed (false: it was gone). */
  async removeLeftover(l: Pick<Leftover, "kind" | "name" | "id">): Promise<boolean> {
    if (l.kind === "trash") {
      const r = await this.#call<{ purged: boolean }>("trash_remove", { id: l.id, mark: DELETED_MARK }, `purge "${l.name}" from the trash`).catch(
        (err: unknown) => {
          if (err instanceof DriverError && err.code === "NotFound") return { purged: false };
          throw err;
        },
      );
      return r.purged;
    }
    if (tempOf(l.name) === undefined) throw new DriverError("InvalidArgument", `"${l.name.slice(0, 64)}" is not a temporary image`);
    const there = await this.#info(l.name);
    if (!there || there.id !== l.id) return false;
    await this.#remove(l.name);
    return true;
  }

  /** The owner metadata and the ids of an image (tests and tools: trace an image back). */
  async imageMeta(name: string): Promise<Record<string, string> | undefined> {
    return (await this.#info(checkImageName(name)))?.meta;
  }

  // --- internals ---

  /** The owner metadata of an image made now: one key. */
  #metaOf(owner: ImageOwner | undefined): Record<string, string> {
    if (!owner) return {};
    const o = {
      kind: owner.kind,
      uuid: owner.uuid,
      cluster: owner.clusterID,
      ...(owner.name ? { name: owner.name } : {}),
      ...(this.#log ? { log: this.#log } : {}),
    };
    return { [OWNER_KEY]: JSON.stringify(o) };
  }

  async #call<T>(op: string, args: Record<string, unknown>, what: string, timeoutMs = this.#o.opTimeoutMs): Promise<T> {
    try {
      return await this.#helper.call<T>(op, args, timeoutMs);
    } catch (err) {
      if (err instanceof RbdCallError) throw rbdError(err.errno, err.message, `pool "${this.poolName}": ${what}`);
      throw err;
    }
  }

  async #info(name: string): Promise<RawInfo | undefined> {
    return this.#call<RawInfo>("info", { name }, `stat image "${name}"`).catch((err: unknown) => {
      if (err instanceof DriverError && err.code === "NotFound") return undefined;
      throw err;
    });
  }

  async #source(name: string): Promise<ImageInfo> {
    const img = await this.statImage(name);
    if (!img) throw new DriverError("NotFound", `source image "${name}" not found`);
    return img;
  }

  /** A fresh temporary snapshot `<source>@<snap>`, cloned into `into`, then removed (clone v2 keeps it in the trash namespace while `into` needs it). */
  async #cloneOfSnapshot(source: string, snap: string, into: string, features: string[], meta: Record<string, string>): Promise<Cloned> {
    await this.#ignoreMissing(this.#call("snap_remove", { name: source, snap }, `remove a stale snapshot of "${source}"`)); // left by an interrupted build
    await this.#call("snap_create", { name: source, snap }, `snapshot "${source}"`).catch((err: unknown) => {
      if (err instanceof DriverError && err.code === "NotFound") throw new DriverError("NotFound", `source image "${source}" not found`);
      throw err;
    });
    try {
      return await this.#call<Cloned>("clone", { parent: source, snap, name: into, features: features.join(","), meta }, `clone "${source}"`);
    } finally {
      await this.#ignoreMissing(this.#call("snap_remove", { name: source, snap }, `remove the temporary snapshot of "${source}"`));
    }
  }

  /** Flatten a clone whose parent chain is longer than maxCloneDepth (its depth as its clone op read it); true when it was. */
  async #flattenIfDeep(name: string, depth: number): Promise<boolean> {
    if (depth <= this.#o.maxCloneDepth) return false;
    await this.#call("flatten", { name }, `flatten "${name}"`, this.#o.flattenTimeoutMs);
    return true;
  }

  /**
   * Return the image `name`, building it under a temporary name with `build` and renaming it into
   * place if it does not exist yet. An existing image (found first, or won by a racing builder)
   * goes through `onExisting`, which returns it if compatible or throws.
   */
  async #publish(name: string, onExisting: (img: ImageInfo) => ImageInfo, build: Build): Promise<ImageInfo> {
    return this.#builds.run(name, () => this.#publishOnce(name, onExisting, build));
  }

  async #publishOnce(name: string, onExisting: (img: ImageInfo) => ImageInfo, build: Build): Promise<ImageInfo> {
    await this.#sweepStale();
    await this.#removeTemps(name); // earlier, interrupted builds of this image
    const found = await this.statImage(name);
    if (found) return onExisting(found);
    const tmp = tempName(name, randomBytes(6).toString("hex"));
    let built: RawInfo | undefined;
    try {
      built = await build(tmp);
      await this.#call("rename", { from: tmp, to: name }, `publish image "${name}"`);
    } catch (err) {
      await this.#remove(tmp).catch(() => {});
      if (!(err instanceof DriverError && err.code === "AlreadyExists")) throw err;
      const other = await this.statImage(name);
      if (!other) throw new DriverError("Aborted", `image "${name}" keeps changing; retry`);
      return onExisting(other);
    }
    if (built) return infoOf({ ...built, name }); // a rename changes nothing else of it
    const made = await this.statImage(name);
    if (!made) throw new DriverError("Aborted", `image "${name}" keeps changing; retry`);
    return made;
  }

  async #remove(name: string): Promise<void> {
    await this.#ignoreMissing(this.#call("remove", { name, mark: DELETED_MARK }, `delete image "${name}"`));
  }

  async #ignoreMissing(p: Promise<unknown>): Promise<void> {
    await p.catch((err: unknown) => {
      if (!(err instanceof DriverError && err.code === "NotFound")) throw err;
    });
  }

  /** Temporary images of interrupted builds of `name` (whatever their age: the caller holds the name's lock). */
  async #removeTemps(name: string): Promise<void> {
    const names = await this.#call<string[]>("names", {}, "list images");
    for (const n of names) if (tempOf(n) === name) await this.#remove(n);
  }

  /** At most every sweepEveryMs: our images waiting in the trash for their clones to go, and temporaries older than tmpStaleMs. Best effort. */
  async #sweepStale(): Promise<void> {
    if (Date.now() < this.#nextSweep) return;
    this.#nextSweep = Date.now() + this.#o.sweepEveryMs;
    try {
      await this.#call("trash_purge", { mark: DELETED_MARK }, "purge the trash");
      const temps = (await this.#call<string[]>("names", {}, "list images")).filter((n) => tempOf(n) !== undefined);
      for (const t of temps) {
        const info = await this.#info(t);
        if (info && Date.now() - info.created * 1000 > this.#o.tmpStaleMs) await this.#remove(t);
      }
    } catch (err) {
      this.#o.logger?.warn({ pool: this.poolName, err: (err as Error).message }, "rbd pool sweep failed");
    }
  }
}

function infoOf(raw: RawInfo): ImageInfo {
  const owner = ownerOf(raw.meta);
  return {
    name: raw.name,
    id: raw.id,
    sizeBytes: raw.size,
    readOnly: raw.snaps.includes(raw.name),
    ...(owner ? { owner } : {}),
    ...(Number.isFinite(raw.created) ? { createdAt: raw.created * 1000 } : {}),
  };
}

const OwnerMeta = z.object({
  kind: z.enum(["volume", "snapshot"]).optional(),
  uuid: z.string().optional(),
  name: z.string().optional(),
  cluster: z.string().optional(),
  log: z.string().optional(),
});

/**
 * What an image's metadata says of its owner (each part cut to its bound: anyone with the pool's
 * caps can write metadata), or undefined without any: the one owner key, or the four keys of
 * images made before it.
 */
export function ownerOf(meta: Record<string, string>): Partial<ImageOwner> | undefined {
  const one = meta[OWNER_KEY];
  const raw: Record<string, unknown> =
    one !== undefined ? parseOwner(one) : Object.fromEntries(["kind", "uuid", "name", "cluster"].map((k) => [k, meta[`${META_PREFIX}${k}`]]));
  const o: Partial<ImageOwner> = {};
  if (raw.kind === "volume" || raw.kind === "snapshot") o.kind = raw.kind;
  for (const [key, field, max] of [
    ["uuid", "uuid", 64],
    ["name", "name", 128],
    ["cluster", "clusterID", 64],
    ["log", "log", 128],
  ] as const) {
    const v = raw[key];
    if (typeof v === "string") o[field] = v.slice(0, max);
  }
  return Object.keys(o).length > 0 ? o : undefined;
}

function parseOwner(text: string): Record<string, unknown> {
  try {
    const parsed = OwnerMeta.safeParse(JSON.parse(text.slice(0, 4096)));
    return parsed.success ? parsed.data : {};
  } catch {
    return {};
  }
}
