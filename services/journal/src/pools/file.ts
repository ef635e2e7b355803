/**
 * FilePool: the embedded pool backend. Each image is a sparse file in one directory, so a single
 * machine can run the whole driver for real (the node-agent attaches images with a loop device).
 *
 * Layout of the pool root (created with mode 0700 on first use):
 *   <name>.img          an image. Mode 0644 = writable (image or clone); 0444 = snapshot (read-only).
 *   .tmp-<name>-<hex>   a file being built (a snapshot's or clone's copy); never visible under a
 *                       final name. Its builder touches it every TMP_KEEPALIVE_MS while it works.
 *
 * Temp files of an interrupted build (the journal was killed mid-copy) are swept
 *   - by deleteImage(<name>) and by the next build of <name> (the CO's retry, on any replica),
 *     whatever their age: the journal deletes or builds an image under the lock of its name, so
 *     any other builder of that image has lost its lock (it is dead, or fenced off and about to fail);
 *   - by any operation, at most every `sweepEveryMs` (and at start), once untouched for
 *     TMP_STALE_MS: a live builder keeps its temp file younger than that.
 * A temp file this pool object is building itself is never swept by it.
 *
 * Snapshots and clones are published atomically: built in full under a temp name
 * (`cp --reflink=auto --sparse=always`), then hard-linked to `<name>.img`. A new empty image is
 * created in place with O_EXCL (see createImage).
 * link(2) fails with EEXIST when the name is taken, so of N racing creators exactly one wins and
 * the others see the winner's complete file, never a half-built one. The temp name is always
 * unlinked afterwards. (Needs a filesystem with hard links — ext4, xfs, btrfs, tmpfs — and GNU cp.)
 *
 * Image id = the file's inode number in lowercase hex. It is stable for the image's whole life
 * (link and resize keep the inode) and unique among the live files of the filesystem; the kernel
 * may reuse it after a delete, so it is not unique across time — the journal pairs it with the name.
 *
 * Resize is grow-only. Its size check and truncate are serialized per name inside this process;
 * across processes the journal's per-name lock does that.
 *
 * Durable before it returns (docs/operations.md, "Durability"): every operation that changes the
 * pool fsyncs what it changed before it returns, so the journal never writes an event naming an
 * image that a power cut could take back: a new or resized image's file (its size), a built copy's
 * file before it is linked, and the pool directory after every name it adds or removes (the
 * directory fsyncs of concurrent operations are shared: DirSync). The pool root itself is made
 * durable in its parent when it is created.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { type BigIntStats, closeSync, fstatSync, fsync, ftruncateSync, openSync } from "node:fs";
import { chmod, link, lstat, readdir, readFile, rename, statfs, truncate, unlink, utimes } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { DriverError, MiB } from "@csi/contracts";
import { DirSync, KeyedMutex, mkdirDurable, syncPath, writeFileDurable } from "@csi/runtime";
import { imageOwner } from "../fold/kinds.js";
import type { ImageInfo, Leftover, PoolBackend, PoolBinding, PoolCapacity, PoolOwnerRef } from "./port.js";
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

const IMG = ".img";

/**
 * The hot path of CreateVolume: exclusive create under the final name, then size it, with
 * synchronous metadata syscalls; returns the file's inode. Measured on this machine: 20–90 µs of
 * CPU per create on a journaled ext4 against 75–160 µs when the open goes through the thread pool
 * (docs/performance.md). EEXIST and other errors are thrown as they are. The bench's bare chain
 * and file-create probe call it too, so they measure exactly this.
 */
export function createSizedFile(file: string, size: number, mode: number): bigint {
  const fd = openSync(file, "wx", mode);
  try {
    ftruncateSync(fd, size);
    return fstatSync(fd, { bigint: true }).ino;
  } finally {
    closeSync(fd);
  }
}

const fsyncFd = promisify(fsync);

/**
 * createSizedFile made durable: the file (its inode and size) fsynced on the thread pool, then its
 * directory entry (`dir`, shared with concurrent creates). The journal's image create and the bench's
 * durable bare chain both call it.
 */
export async function createDurableFile(file: string, size: number, mode: number, dir: DirSync): Promise<{ ino: bigint; createdAt: number }> {
  const fd = openSync(file, "wx", mode);
  let st: BigIntStats;
  try {
    ftruncateSync(fd, size);
    st = fstatSync(fd, { bigint: true });
    await fsyncFd(fd);
  } finally {
    closeSync(fd);
  }
  await dir.sync();
  return { ino: st.ino, createdAt: bornAt(st) };
}

/** A file's birth time (statx), or its change time where the filesystem keeps none. */
const bornAt = (st: BigIntStats): number => Number(st.birthtimeMs > 0n ? st.birthtimeMs : st.ctimeMs);
const IMAGE_MODE = 0o644;
const SNAPSHOT_MODE = 0o444;
/** A live builder touches its temp file this often... */
const TMP_KEEPALIVE_MS = 5_000;
/** ...so one untouched this long is a leftover (six missed touches). */
const TMP_STALE_MS = 30_000;
/** How often operations look for stale temp files (one readdir of the pool). */
const SWEEP_EVERY_MS = 30_000;
/** Where gc's removals wait (docs/operations.md, "gc removes only with proof"), and how long. */
const TRASH_DIR = ".trash";
export const TRASH_RETENTION_MS = 7 * 24 * 3600 * 1000;

const run = promisify(execFile);

export interface FilePoolOptions {
  name: string;
  id: number;
  /** The pool directory. */
  root: string;
  maxImageBytes?: number;
  /** How often operations look for stale temp files (default SWEEP_EVERY_MS). */
  sweepEveryMs?: number;
  /** Fault injection for tests: hold every built copy this long, temp file in place, before publishing it. */
  holdCopyMs?: number;
  /** How long gc's removals wait in `.trash/` before gc purges them (default TRASH_RETENTION_MS). */
  trashRetentionMs?: number;
}

export class FilePool implements PoolBackend {
  readonly poolName: string;
  readonly poolId: number;
  readonly root: string;
  readonly maxImageBytes: number;
  readonly #rootPrefix: string;
  #ready: Promise<void> | undefined;
  readonly #resizes = new KeyedMutex();
  /** Temp files this object is building right now (never swept by it). */
  readonly #building = new Set<string>();
  #nextSweep = 0;
  readonly #sweepEveryMs: number;
  readonly #holdCopyMs: number;
  readonly #trashRetentionMs: number;
  /** The pool directory's fsyncs, shared by concurrent operations. */
  readonly #dir: DirSync;

  constructor({
    name,
    id,
    root,
    maxImageBytes = DEFAULT_MAX_IMAGE_BYTES,
    sweepEveryMs = SWEEP_EVERY_MS,
    holdCopyMs = 0,
    trashRetentionMs = TRASH_RETENTION_MS,
  }: FilePoolOptions) {
    if (!Number.isSafeInteger(id) || id < 0) {
      throw new DriverError("InvalidArgument", `pool id must be a non-negative integer, got ${id}`);
    }
    if (!Number.isSafeInteger(maxImageBytes) || maxImageBytes < MiB) {
      throw new DriverError("InvalidArgument", `maxImageBytes must be an integer >= 1 MiB`);
    }
    this.poolName = name;
    this.poolId = id;
    this.root = path.resolve(root);
    this.#rootPrefix = this.root.endsWith(path.sep) ? this.root : this.root + path.sep;
    this.maxImageBytes = maxImageBytes;
    this.#sweepEveryMs = sweepEveryMs;
    this.#holdCopyMs = holdCopyMs;
    this.#trashRetentionMs = trashRetentionMs;
    this.#dir = new DirSync(this.root);
  }

  /** mkdir -p the root and sweep stale temp files. Every operation calls it; it runs once. */
  init(): Promise<void> {
    this.#ready ??= (async () => {
      await mkdirDurable(this.root, 0o700);
      await this.#sweepStale();
    })().catch((err: unknown) => {
      this.#ready = undefined;
      fail(err, `pool "${this.poolName}": init`);
    });
    return this.#ready;
  }

  /** Where a node finds an image of this pool: its file. */
  publishContext(name: string): Record<string, string> {
    return { imagePath: this.imagePath(name) };
  }

  /** Absolute path of an image file (node-agent/test use); validated to stay inside the pool root. */
  imagePath(name: string): string {
    const file = path.resolve(this.root, checkImageName(name) + IMG);
    if (!file.startsWith(this.#rootPrefix)) {
      throw new DriverError("InvalidArgument", `image name ${JSON.stringify(name)} escapes the pool`);
    }
    return file;
  }

  async createImage(name: string, sizeBytes: number): Promise<ImageInfo> {
    const file = this.imagePath(name);
    const size = this.#checkSize(sizeBytes);
    await this.init();
    await this.#sweepStale();
    // The journal creates each image name once, under its reservation lock; an image left
    // smaller by a crash is seen as incomplete (commands/deciders/reservation.ts).
    try {
      const made = await createDurableFile(file, size, IMAGE_MODE, this.#dir);
      return { name, id: made.ino.toString(16), sizeBytes: size, readOnly: false, createdAt: made.createdAt };
    } catch (err) {
      if (errno(err) !== "EEXIST") fail(err, `create image "${name}"`);
    }
    // Someone else's image of that name: the common compatibility rules decide.
    const existing = await this.#stat(name, file);
    if (!existing) throw new DriverError("Aborted", `image "${name}" keeps changing; retry`);
    return sameWritable(name, size)(existing);
  }

  async resizeImage(name: string, sizeBytes: number): Promise<ImageInfo> {
    const file = this.imagePath(name);
    const size = this.#checkSize(sizeBytes);
    return this.#resizes.run(name, async () => {
      const img = await this.#stat(name, file);
      if (!img) throw new DriverError("NotFound", `image "${name}" not found`);
      if (img.readOnly) throw new DriverError("InvalidArgument", `image "${name}" is a read-only snapshot`);
      if (size <= img.sizeBytes) return img;
      try {
        await truncate(file, size);
        await syncPath(file);
      } catch (err) {
        if (errno(err) === "ENOENT") throw new DriverError("NotFound", `image "${name}" not found`);
        fail(err, `resize image "${name}"`);
      }
      return { ...img, sizeBytes: size };
    });
  }

  /**
   * Delete the image and the temp files of its interrupted builds (see the top of this file).
   * `quarantine` (gc's removal of an image no record names): moved into `.trash/` instead, kept
   * TRASH_RETENTION_MS before gc purges it (an operator can move it back meanwhile).
   */
  async deleteImage(name: string, { copied = true, quarantine = false }: { copied?: boolean; quarantine?: boolean } = {}): Promise<void> {
    const file = this.imagePath(name);
    try {
      if (quarantine) await this.#quarantine(name, file);
      else await unlink(file);
    } catch (err) {
      if (errno(err) !== "ENOENT") fail(err, `delete image "${name}"`);
    }
    // Also when it was gone already: an earlier try may have unlinked it and died before this.
    await this.#dir.sync().catch((err: unknown) => fail(err, `delete image "${name}"`));
    // Interrupted copies of this image: one readdir of the pool, so only when a copy built it
    // (a plain create never makes temp files; a delete must not cost O(images in the pool)).
    if (copied) await this.#sweep((entry) => tempOf(entry) === name);
  }

  async snapshotImage(source: string, snapName: string): Promise<ImageInfo> {
    const src = this.imagePath(source);
    const file = this.imagePath(snapName);
    return this.#publish(snapName, file, isSnapshot(snapName), async (tmp) => {
      await this.#source(source, src);
      await this.#copy(source, src, tmp);
      await chmod(tmp, SNAPSHOT_MODE);
    });
  }

  async cloneImage(source: string, target: string, sizeBytes: number): Promise<ImageInfo> {
    const src = this.imagePath(source);
    const file = this.imagePath(target);
    const size = this.#checkSize(sizeBytes);
    const tooSmall = (have: number) => new DriverError("OutOfRange", `clone size ${size} is smaller than source "${source}" (${have} bytes)`);
    return this.#publish(target, file, sameWritable(target, size), async (tmp) => {
      const from = await this.#source(source, src);
      if (size < from.sizeBytes) throw tooSmall(from.sizeBytes);
      await this.#copy(source, src, tmp);
      await chmod(tmp, IMAGE_MODE);
      // Check the copy, not the earlier stat: the source may have grown meanwhile.
      const copied = await this.#stat(target, tmp);
      if (!copied) throw new DriverError("Internal", `clone of "${source}" vanished`);
      if (size < copied.sizeBytes) throw tooSmall(copied.sizeBytes);
      if (size > copied.sizeBytes) await truncate(tmp, size);
    });
  }

  async statImage(name: string): Promise<ImageInfo | undefined> {
    return this.#stat(name, this.imagePath(name));
  }

  async imageNames(): Promise<ReadonlySet<string>> {
    await this.init();
    const entries = await readdir(this.root, { withFileTypes: true });
    return new Set(
      entries
        .filter((e) => e.isFile() && e.name.endsWith(IMG))
        .map((e) => e.name.slice(0, -IMG.length))
        .filter(isImageName),
    );
  }

  async listImages(): Promise<ImageInfo[]> {
    const names = [...(await this.imageNames())].sort();
    const infos = await Promise.all(names.map((n) => this.#stat(n, path.join(this.root, n + IMG))));
    return infos.filter((i): i is ImageInfo => i !== undefined);
  }

  async capacity(): Promise<PoolCapacity> {
    await this.init();
    const s = await statfs(this.root);
    return { totalBytes: s.blocks * s.bsize, freeBytes: s.bavail * s.bsize, maxImageBytes: this.maxImageBytes };
  }

  // --- internals ---

  #checkSize(sizeBytes: number): number {
    return checkSize(sizeBytes, this.maxImageBytes);
  }

  /** Info of an image file; undefined if missing. Only regular files count (lstat: no symlinks). */
  async #stat(name: string, file: string): Promise<ImageInfo | undefined> {
    const st = await lstat(file, { bigint: true }).catch((err: unknown) => {
      if (errno(err) === "ENOENT") return undefined;
      fail(err, `stat image "${name}"`);
    });
    if (!st) return undefined;
    if (!st.isFile()) throw new DriverError("Internal", `image "${name}" is not a regular file`);
    return { name, id: st.ino.toString(16), sizeBytes: Number(st.size), readOnly: (st.mode & 0o200n) === 0n, createdAt: bornAt(st) };
  }

  async #source(name: string, file: string): Promise<ImageInfo> {
    const img = await this.#stat(name, file);
    if (!img) throw new DriverError("NotFound", `source image "${name}" not found`);
    return img;
  }

  /** cp with reflink when the filesystem has it, else a sparse copy. `to` must not exist. */
  async #copy(name: string, from: string, to: string): Promise<void> {
    try {
      await run("cp", ["--reflink=auto", "--sparse=always", "--", from, to]);
    } catch (err) {
      if (!(await this.#stat(name, from))) throw new DriverError("NotFound", `source image "${name}" not found`);
      throw err;
    }
  }

  /**
   * Return the image `name`, building it under a temp name with `build` and linking it into
   * place if it does not exist yet. An existing image (found first, or won by a racing caller)
   * goes through `onExisting`, which returns it if compatible or throws.
   */
  async #publish(name: string, file: string, onExisting: (img: ImageInfo) => ImageInfo, build: (tmp: string) => Promise<void>): Promise<ImageInfo> {
    await this.init();
    await this.#sweepStale();
    await this.#sweep((entry) => tempOf(entry) === name); // earlier, interrupted builds of this image
    const found = await this.#stat(name, file);
    if (found) return onExisting(found);
    const tmp = path.join(this.root, tempName(name, randomBytes(6).toString("hex")));
    this.#building.add(tmp);
    const keepAlive = setInterval(() => {
      const now = new Date();
      utimes(tmp, now, now).catch(() => {}); // not there yet, or gone: nothing to keep
    }, TMP_KEEPALIVE_MS);
    try {
      await build(tmp);
      if (this.#holdCopyMs > 0) await sleep(this.#holdCopyMs);
      const built = await this.#stat(name, tmp);
      if (!built) throw new DriverError("Internal", `temp file for "${name}" vanished`);
      await syncPath(tmp); // the copy's data and size, before any name points at it
      for (let attempt = 0; attempt < 3; attempt++) {
        try {
          await link(tmp, file);
          await unlink(tmp).catch(() => {});
          await this.#dir.sync();
          return built;
        } catch (err) {
          if (errno(err) !== "EEXIST") throw err;
        }
        const other = await this.#stat(name, file);
        if (other) return onExisting(other);
        // Deleted between our link and our stat: try again.
      }
      throw new DriverError("Aborted", `image "${name}" keeps changing; retry`);
    } catch (err) {
      fail(err, `create image "${name}"`);
    } finally {
      clearInterval(keepAlive);
      this.#building.delete(tmp);
      await unlink(tmp).catch(() => {});
    }
  }

  /**
   * The pool's binding to its log (`<root>/.csi-pool.json`, written durably): see PoolBackend.bind.
   * No binding yet: an empty pool, or one of a log that already holds records (a pool of this log
   * from before bindings), is bound now — images made before the binding are then never removed by gc;
   * images and an empty log are another log's pool, refused (unless `rebind`).
   */
  async bind(to: PoolOwnerRef, o: { logRecords: number; rebind: boolean }): Promise<PoolBinding> {
    await this.init();
    const file = path.join(this.root, BINDING_FILE);
    const text = await readFile(file, "utf8").catch((err: unknown) => {
      if (errno(err) === "ENOENT") return undefined;
      throw err;
    });
    const images = async () => (await this.listImages()).length;
    const d = await decideBinding(parseBinding(text, file), to, { ...o, images, where: this.root, place: "directory", now: Date.now() });
    if ("keep" in d) return d.keep;
    await writeFileDurable(file, `${JSON.stringify(d.write)}\n`, 0o600);
    return d.write;
  }

  /** `<root>/.trash/<name>.img@<epoch ms>`, durably: the trash directory made, both directories fsynced. */
  async #quarantine(name: string, file: string): Promise<void> {
    const trash = path.join(this.root, TRASH_DIR);
    await mkdirDurable(trash, 0o700);
    await rename(file, path.join(trash, `${name}${IMG}@${Date.now()}`));
    await Promise.all([syncPath(trash), this.#dir.sync()]);
  }

  /** The quarantined images: each a trash entry, kept until its retention ends. */
  async #trash(): Promise<Leftover[]> {
    const trash = path.join(this.root, TRASH_DIR);
    const out: Leftover[] = [];
    for (const entry of await readdir(trash).catch(() => [])) {
      const m = /^(.+)\.img@(\d{1,15})$/.exec(entry);
      const st = m ? await lstat(path.join(trash, entry)).catch(() => undefined) : undefined;
      if (!m || !st?.isFile()) continue;
      const since = Number(m[2]);
      const owner = imageOwner(m[1] ?? "");
      out.push({
        kind: "trash",
        name: entry,
        id: st.ino.toString(16),
        sizeBytes: st.size,
        since,
        keepUntil: since + this.#trashRetentionMs,
        ...(owner ? { owner } : {}),
      });
    }
    return out;
  }

  /**
   * The temp files of builds (verify's `tempImage`): each with the aggregate its image is named
   * after, and its last touch as `since` (a live builder touches it every TMP_KEEPALIVE_MS). Not
   * the ones this pool object is building. The file pool keeps no trash.
   */
  async leftovers(): Promise<Leftover[]> {
    const out: Leftover[] = await this.#trash();
    for await (const t of this.#temps()) {
      const owner = imageOwner(t.image);
      out.push({ kind: "temp", name: t.entry, id: t.st.ino.toString(16), sizeBytes: t.st.size, since: t.st.mtimeMs, ...(owner ? { owner } : {}) });
    }
    return out;
  }

  /** A temp file removed if it is still the one listed (its inode) and not one of our own builds; false when it was gone. */
  async removeLeftover(l: Pick<Leftover, "kind" | "name" | "id">): Promise<boolean> {
    if (l.kind === "trash") return this.#purge(l);
    if (l.kind !== "temp" || tempOf(l.name) === undefined) throw new DriverError("InvalidArgument", `"${l.name.slice(0, 64)}" is not a temp file of this pool`);
    const file = path.join(this.root, l.name);
    if (this.#building.has(file)) return false;
    const st = await lstat(file).catch(() => undefined);
    if (!st?.isFile() || st.ino.toString(16) !== l.id) return false;
    await unlink(file).catch(() => {});
    return true;
  }

  /** A quarantined image purged: only the entry of that inode, and only once its retention ended (false: kept). */
  async #purge(l: Pick<Leftover, "name" | "id">): Promise<boolean> {
    const entry = (await this.#trash()).find((t) => t.name === l.name && t.id === l.id);
    if (!entry || (entry.keepUntil ?? 0) > Date.now()) return false;
    await unlink(path.join(this.root, TRASH_DIR, entry.name)).catch(() => {});
    await syncPath(path.join(this.root, TRASH_DIR));
    return true;
  }

  /** Sweep temp files untouched for TMP_STALE_MS, at most every sweepEveryMs (a cheap check otherwise). */
  async #sweepStale(): Promise<void> {
    if (Date.now() < this.#nextSweep) return;
    this.#nextSweep = Date.now() + this.#sweepEveryMs;
    const cutoff = Date.now() - TMP_STALE_MS;
    await this.#sweep(() => true, cutoff);
  }

  /** Remove the temp files that `which` names (untouched since `before`, if given), except our own builds. Best effort. */
  async #sweep(which: (entry: string) => boolean, before = Number.POSITIVE_INFINITY): Promise<void> {
    for await (const t of this.#temps(which)) if (t.st.mtimeMs < before) await unlink(t.file).catch(() => {});
  }

  /** The temp files of the pool (those `which` names), except the ones this object is building: each with the image it builds. */
  async *#temps(which: (entry: string) => boolean = () => true) {
    for (const entry of await readdir(this.root).catch(() => [])) {
      const image = tempOf(entry);
      const file = path.join(this.root, entry);
      if (image === undefined || !which(entry) || this.#building.has(file)) continue;
      const st = await lstat(file).catch(() => undefined);
      if (st?.isFile()) yield { entry, file, image, st };
    }
  }
}

/** The file of a pool's binding to its log, in the pool's directory. */
const BINDING_FILE = ".csi-pool.json";
function errno(err: unknown): unknown {
  return typeof err === "object" && err !== null ? (err as { code?: unknown }).code : undefined;
}

/** Rethrow as a DriverError: out of space → ResourceExhausted, anything unexpected → Internal. */
function fail(err: unknown, what: string): never {
  if (err instanceof DriverError) throw err;
  const code = errno(err);
  const stderr = String((err as { stderr?: unknown } | undefined)?.stderr ?? "");
  if (code === "ENOSPC" || code === "EDQUOT" || /no space left|quota exceeded/i.test(stderr)) {
    throw new DriverError("ResourceExhausted", `${what}: pool is full`, { cause: err });
  }
  throw new DriverError("Internal", `${what} failed`, { cause: err });
}
