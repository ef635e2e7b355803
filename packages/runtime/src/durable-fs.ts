/**
 * Files that are on disk before we say so (docs/operations.md, "Durability"). A write is durable
 * only once its file is fsynced; a name (a create, a rename, an unlink, a mkdir) only once the
 * directory that holds it is fsynced (POSIX; ext4 and xfs commit every pending name with any fsync,
 * but we do not count on that for what we write ourselves). Each helper here returns once what it
 * did survives a power cut.
 */
import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, mkdirSync, openSync, writeFileSync } from "node:fs";
import { mkdir, open, rename, unlink } from "node:fs/promises";
import path from "node:path";

/** fsync a file or directory by its path. */
export async function syncPath(p: string): Promise<void> {
  const fh = await open(p, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** fsync the directory that holds `p`: its name (created, renamed or unlinked) is then durable. */
export function syncParent(p: string): Promise<void> {
  return syncPath(path.dirname(path.resolve(p)));
}

/** The directories mkdir -p made, parents first (`first`: the one mkdir says it made first). */
function madeDirs(dir: string, first: string): string[] {
  const made: string[] = [];
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    made.push(d);
    if (d === path.resolve(first) || d === path.dirname(d)) break;
  }
  return made.reverse();
}

/**
 * mkdir -p whose new directories are durable: each directory it made is fsynced into its parent
 * (parents before children: a child's entry is only reachable once its parent's is).
 */
export async function mkdirDurable(dir: string, mode = 0o700): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode });
  if (first === undefined) return;
  for (const d of madeDirs(dir, first)) await syncParent(d);
  await syncPath(path.resolve(dir));
}

function fsyncPathSync(p: string): void {
  const fd = openSync(p, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * writeFileDurable's synchronous sibling, for start-up code (a server's configuration file): the
 * directories made durable as mkdirDurable does, the file written and fsynced, then its directory.
 * Not atomic: for files nobody reads while they are written.
 */
export function writeFileDurableSync(file: string, data: string | Uint8Array): void {
  const dir = path.dirname(path.resolve(file));
  const first = mkdirSync(dir, { recursive: true });
  if (first !== undefined) for (const d of madeDirs(dir, first)) fsyncPathSync(path.dirname(d));
  writeFileSync(file, data);
  fsyncPathSync(file);
  fsyncPathSync(dir);
}

/**
 * Replace `file` atomically and durably: the data goes to a temp file beside it, which is fsynced,
 * renamed over `file`, and the directory fsynced; after a crash the file holds the old data or the
 * new, never a mix, and once this returns the new data survives a power cut.
 */
export async function writeFileDurable(file: string, data: string | Uint8Array, mode = 0o644): Promise<void> {
  const dir = path.dirname(path.resolve(file));
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(6).toString("hex")}`;
  try {
    await mkdirDurable(dir);
    const fh = await open(tmp, "wx", mode);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, file);
    await syncPath(dir);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
}

/**
 * fsyncs of one directory, grouped: callers that ask while one is running share the next one
 * (group commit). A caller returns only after an fsync that started after its own change.
 */
export class DirSync {
  #running: Promise<void> | undefined;
  #next: Promise<void> | undefined;

  constructor(readonly dir: string) {}

  sync(): Promise<void> {
    if (!this.#running) {
      this.#running = syncPath(this.dir).finally(() => {
        this.#running = undefined;
      });
      return this.#running;
    }
    // One is running: it may have started before our change, so we need the next one.
    this.#next ??= this.#running
      .catch(() => {})
      .then(() => {
        this.#next = undefined;
        return this.sync();
      });
    return this.#next;
  }
}
