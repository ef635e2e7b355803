/**
 * Backup and restore of a cluster's event log (the source of truth; docs/operations.md, "Backup
 * and restore"), in the file format of log/backup/file.ts.
 *
 * Export (`exportLog`): the stream from its first message to its last as it is when the export
 * starts, raw (payloads byte for byte), through `readStreamRange`, with bounded memory; sealed with
 * the operator's key (HMAC-SHA-256), or an unkeyed SHA-256 without one. Into a file
 * (`exportLogToFile`) it is written under a temporary name in the same directory and linked to its
 * name once whole and on disk: `link` fails if the name exists, so an existing backup is never
 * replaced, not even by a race; or into a stream (`-`: stdout).
 *
 * Restore (`importLog`), in steps that each leave something a re-run can recover from:
 *   1. check:  the input (a file, or stdin) is read ONCE into a private temporary copy while it is
 *              checked whole: header and seal (the key's HMAC, or `--insecure-no-mac`), dense
 *              sequences, this cluster's subjects, sizes within the server's max_payload, and the
 *              whole log replayed through the fold with the log's rules (log/invariants.ts).
 *              Every later step reads the copy, and checks that it hashes as it did here. Nothing
 *              is written before this step ends; a failure leaves everything as it was.
 *   2. stage:  into the staging stream CSI_RESTORE_<c> (a leftover one is deleted first): every
 *              record on its own sequence, then the stream's count and last sequence checked. This
 *              proves the server takes every record (limits, replicas, permissions) while the log is
 *              untouched; a failure deletes the staging stream and leaves the log as it was. While
 *              it exists, journals of the cluster do not start (they wait for it to go).
 *   3. switch: the log (CSI_EVENTS_<c>) is deleted and created anew, and every record is published
 *              into it from the checked copy with `Nats-Expected-Last-Sequence` = its sequence − 1 —
 *              the same sequences (the projection and the journal's fences refer to them); anything
 *              else appending meanwhile stops it. Then its count and last sequence are checked.
 *              A failure or crash here leaves the log incomplete and the staging stream in place
 *              (so journals still wait): running the same restore again does it whole.
 *   4. done:   the staging stream is deleted; journals may start, and rebuild the projection from
 *              the restored log (another stream: its creation time differs from the one the
 *              projection was built from).
 * The staging stream's content is never copied into the log: the log is written from the checked
 * copy. `log import` restores only into an empty or absent stream; `log restore` (`replace`)
 * replaces whatever the stream holds. Journals must be stopped: the caller's `noWriters` is asked
 * before step 2 and again before step 3.
 * Foreign records go out and come back as they are; sequences removed from the stream (foreign
 * records purged) are written as gaps and restored as removed (a placeholder published on the
 * sequence and deleted at once), so the records after them keep their sequences.
 */

import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { constants, createReadStream, createWriteStream } from "node:fs";
import { copyFile, link, mkdtemp, open, rm, stat, unlink } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { StringDecoder } from "node:string_decoder";
import { DriverError, subjects } from "@csi/contracts";
import { AckedPublisher, readStreamRange } from "@csi/runtime";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { emptyReplay, type Replayed, replayInto } from "../../fold/replay.js";
import { identityOf, JetStreamLog, logStreamConfig, streamInfoOrNone } from "../jetstream.js";
import { FOLD_BATCH } from "../port.js";
import { classifyRecord, type LogRecord } from "../records.js";
import {
  BackupError,
  type BackupGap,
  type BackupHeader,
  BackupKey,
  type BackupMessage,
  BackupReader,
  BackupWriter,
  MAX_BACKUP_LINE,
  MAX_KEY_BYTES,
  type ReadOptions,
} from "./file.js";

/** Publishes of a restore in flight at once (acks are awaited in order). */
const IMPORT_WINDOW = 1024;
/** How long one publish of a restore waits for its ack. */
const ACK_MS = 30_000;

/** The backup key in a key file (`--key-file`, a Kubernetes Secret mount): its bytes, trailing whitespace left out. */
export async function readBackupKey(file: string): Promise<BackupKey> {
  const bytes = await stat(file)
    .then(async (st) => {
      if (!st.isFile() || st.size > MAX_KEY_BYTES + 2) throw new BackupError(`key file ${file}: not a file of at most ${MAX_KEY_BYTES} bytes`, true);
      const fh = await open(file, "r");
      try {
        return await fh.readFile();
      } finally {
        await fh.close();
      }
    })
    .catch((err: NodeJS.ErrnoException) => {
      if (err instanceof BackupError) throw err;
      throw new BackupError(`cannot read key file ${file}: ${err.code ?? err.message}`, true);
    });
  return BackupKey.fromFile(bytes, `key file ${file}`);
}

// ------------------------------------------------------------------ export

export interface ExportResult {
  stream: string;
  messages: number;
  lastSeq: number;
  /** The key id the file is sealed with; none: an unkeyed SHA-256. */
  keyId?: string;
}

export interface ExportOptions {
  key?: BackupKey | undefined;
  /** Gets the last sequence written and the last of the export. */
  progress?: (seq: number, last: number) => void;
  /** Reads through this JetStream API prefix (csictl in the account layout). */
  apiPrefix?: string | undefined;
}

/** Writes the backup of `cluster`'s log through `write` (awaited per line, so a slow file is not outrun). */
export async function exportLog(nc: NatsConnection, cluster: string, write: (text: string) => Promise<void>, opts: ExportOptions = {}): Promise<ExportResult> {
  const { apiPrefix, progress = () => {} } = opts;
  const stream = subjects.streamName(cluster);
  const jsm = await jetstreamManager(nc, apiPrefix ? { apiPrefix, checkAPI: false } : {});
  const info = await jsm.streams.info(stream).catch((err: unknown) => {
    throw new DriverError("NotFound", `cluster ${cluster} has no event log ${stream} (${(err as Error).message})`, { cause: err });
  });
  const last = info.state.last_seq;
  // The last sequence that holds a record (records at the end may have been removed) and the first.
  const present = info.state.messages === 0 ? 0 : (await new JetStreamLog(nc, { cluster, ...(apiPrefix ? { apiPrefix } : {}) }).info()).last;
  const first = info.state.messages === 0 ? last + 1 : info.state.first_seq;
  const w = new BackupWriter(opts.key);
  await write(w.header({ cluster, stream, firstSeq: 1, lastSeq: last, exportedAt: new Date().toISOString(), logIdentity: identityOf(info).identity }));
  let count = 0;
  let next = 1; // the next sequence the file must account for
  const gapTo = async (seq: number) => {
    if (seq > next) await write(w.gap({ seq: next, removedThrough: seq - 1 }));
    next = Math.max(next, seq);
  };
  if (present >= first) {
    for await (const chunk of readStreamRange(nc, jsm, stream, { from: first, to: present })) {
      for (const m of chunk) {
        await gapTo(m.seq);
        await write(w.message({ seq: m.seq, subject: m.subject, data: Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).toString("utf8") }));
        count++;
        next = m.seq + 1;
      }
      progress(chunk[chunk.length - 1]?.seq ?? first, last);
    }
  }
  await gapTo(last + 1);
  const held = info.state.messages;
  if (count !== held) throw new DriverError("Internal", `read ${count} messages of ${stream}, expected ${held} (messages removed while exporting?)`);
  await write(w.footer());
  progress(last, last);
  return { stream, messages: count, lastSeq: last, ...(opts.key ? { keyId: opts.key.id } : {}) };
}

/** A writer of text onto a stream that waits for `drain` (a slow disk or pipe is not outrun) and rejects on the stream's error (a closed pipe). */
function streamWriter(out: NodeJS.WritableStream): (text: string) => Promise<void> {
  let failed: Error | undefined;
  out.on("error", (err: Error) => {
    failed = err;
  });
  return async (text) => {
    if (failed) throw failed;
    if (!out.write(text)) await once(out, "drain"); // rejects if the stream errs meanwhile
    if (failed) throw failed;
  };
}

/** `exportLog` onto a stream (`-`: stdout). A failure leaves the output without its footer: an import refuses it as truncated. */
export async function exportLogTo(nc: NatsConnection, cluster: string, out: NodeJS.WritableStream, opts: ExportOptions = {}): Promise<ExportResult> {
  return exportLog(nc, cluster, streamWriter(out), opts);
}

/** A backup never replaces a file (docs/csictl.md): a usage error, checked before and at the end (`link`). */
const fileExists = (file: string) => new BackupError(`${file} exists: a backup never replaces a file; choose another name, or remove it first`, true);

/**
 * `exportLog` into a new file (mode 0600): written under a temporary name beside it, flushed to
 * disk, then linked to `file` — which fails if `file` exists, so an existing backup is never
 * replaced, even by another export racing this one. Where the file system has no hard links, the
 * whole file is copied to `file` (created exclusively). A file that cannot be created rejects
 * with its errno error (syscall "open").
 */
export async function exportLogToFile(nc: NatsConnection, cluster: string, file: string, opts: ExportOptions = {}): Promise<ExportResult> {
  await newBackupFile(file);
  const partial = path.join(path.dirname(file), `.${path.basename(file)}.${randomBytes(6).toString("hex")}.partial`);
  const out = createWriteStream(partial, { flags: "wx", mode: 0o600 });
  try {
    await once(out, "open");
    const r = await exportLog(nc, cluster, streamWriter(out), opts);
    out.end();
    await once(out, "close");
    await onDisk(partial);
    await publishFile(partial, file);
    return r;
  } finally {
    out.destroy();
    await unlink(partial).catch(() => {});
  }
}

/** Throws the usage error an export onto an existing file gets (checked again, race-free, when the backup is linked to its name). */
export async function newBackupFile(file: string): Promise<void> {
  const taken = await stat(file).then(
    () => true,
    () => false,
  );
  if (taken) throw fileExists(file);
}

/** fsync of a file written and closed: a backup is on disk before it is under its name. */
async function onDisk(file: string): Promise<void> {
  const fh = await open(file, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** The whole temporary file under its name: a hard link (atomic, refused if the name exists), else an exclusive copy. */
async function publishFile(partial: string, file: string): Promise<void> {
  try {
    await link(partial, file);
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw fileExists(file);
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP" && code !== "EXDEV") throw err;
  }
  try {
    await copyFile(partial, file, constants.COPYFILE_EXCL);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") throw fileExists(file);
    await unlink(file).catch(() => {});
    throw err;
  }
  await onDisk(file);
}

// ------------------------------------------------------------------ reading a backup

/**
 * The lines of a byte stream, none longer than MAX_BACKUP_LINE (a longer one is refused before it
 * fills memory); `onBytes` sees every chunk as read (to hash or copy it).
 */
export async function* backupLines(chunks: AsyncIterable<Buffer | string>, onBytes: (b: Buffer) => Promise<void> | void = () => {}): AsyncGenerator<string> {
  const decoder = new StringDecoder("utf8");
  let rest = "";
  for await (const chunk of chunks) {
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    await onBytes(bytes);
    const parts = (rest + decoder.write(bytes)).split("\n");
    rest = parts.pop() as string;
    if (rest.length > MAX_BACKUP_LINE) throw new BackupError(`a line is longer than ${MAX_BACKUP_LINE} bytes; not a backup of this driver`);
    yield* parts;
  }
  rest += decoder.end();
  if (rest !== "") yield rest;
}

/** The lines of a backup file (bench/, tests). */
export function backupFileLines(file: string): AsyncGenerator<string> {
  return backupLines(createReadStream(file, { highWaterMark: 256 * 1024 }));
}

/** A checked backup's private copy (step 1): where it is, its SHA-256, and what the check found. */
interface Checked {
  dir: string;
  copy: string;
  sha256: string;
  header: BackupHeader;
  foreign: number;
  removed: number;
}

/** Step 1: `input` read once into a private copy while the whole of it is checked (`read` options); nothing kept on failure. */
async function checkIntoCopy(input: string | NodeJS.ReadableStream, cluster: string, read: ReadOptions, progress: Progress): Promise<Checked> {
  const source = typeof input === "string" ? createReadStream(input, { highWaterMark: 256 * 1024 }) : input;
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-restore-"));
  const copy = path.join(dir, "backup.jsonl");
  const out = await open(copy, "wx", 0o600);
  const hash = createHash("sha256");
  try {
    const reader = new BackupReader(cluster, { ...read, invariants: true });
    let n = 0;
    const lines = backupLines(source as AsyncIterable<Buffer>, async (b) => {
      hash.update(b);
      await out.write(b);
    });
    for await (const line of lines) {
      const m = reader.line(line);
      if (m && ++n % 4096 === 0) progress("check", m.seq, reader.header?.lastSeq ?? m.seq);
    }
    const { header, foreign, removed } = reader.end();
    progress("check", header.lastSeq, header.lastSeq);
    return { dir, copy, sha256: hash.digest("hex"), header, foreign, removed };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  } finally {
    await out.close().catch(() => {});
  }
}

/** Every record of the checked copy, in order, to `put`; throws if the copy no longer hashes as it did when checked. */
async function replayCopy(c: Checked, cluster: string, read: ReadOptions, put: (m: BackupMessage | BackupGap) => Promise<void>): Promise<void> {
  const hash = createHash("sha256");
  const reader = new BackupReader(cluster, read);
  for await (const line of backupLines(createReadStream(c.copy, { highWaterMark: 256 * 1024 }), (b) => void hash.update(b))) {
    const m = reader.line(line);
    if (m) await put(m);
  }
  reader.end();
  if (hash.digest("hex") !== c.sha256) throw new BackupError("the checked copy of the backup changed while it was restored; nothing more is written from it");
}

// ------------------------------------------------------------------ writing a log on its sequences

/**
 * Publishes records of a backup into `stream` in order, each on its own sequence
 * (`Nats-Expected-Last-Sequence` = its sequence − 1), up to IMPORT_WINDOW in flight; removed
 * sequences as placeholders published and deleted at once. `subjectOf` maps a record's subject to
 * the one it is stored under.
 */
class SequencedWriter {
  readonly #publisher: AckedPublisher;
  readonly #inFlight: { seq: number; ack: Promise<number> }[] = [];

  constructor(
    nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly placeholder: string,
    private readonly subjectOf: (subject: string) => string,
    private readonly progress: (seq: number) => void,
  ) {
    this.#publisher = new AckedPublisher(nc, ACK_MS);
  }

  async put(m: BackupMessage | BackupGap): Promise<void> {
    if ("removedThrough" in m) {
      // Removed sequences: each a placeholder, published once everything before it is stored, and deleted.
      await this.#settle(0);
      for (let seq = m.seq; seq <= m.removedThrough; seq++) {
        this.#send(seq, this.placeholder, "");
        await this.#settle(0);
        await this.jsm.streams.deleteMessage(this.stream, seq, false);
      }
      return;
    }
    this.#send(m.seq, this.subjectOf(m.subject), m.data);
    if (this.#inFlight.length >= IMPORT_WINDOW) await this.#settle(IMPORT_WINDOW / 2);
  }

  #send(seq: number, subject: string, data: string): void {
    const ack = this.#publisher.publish(subject, data, { expectedLastSequence: seq - 1, expectedStream: this.stream });
    ack.catch(() => {}); // awaited in #settle(); never an unhandled rejection if an earlier one throws first
    this.#inFlight.push({ seq, ack });
  }

  async #settle(upTo: number): Promise<void> {
    while (this.#inFlight.length > upTo) {
      const { seq, ack } = this.#inFlight.shift() as { seq: number; ack: Promise<number> };
      const got = await ack.catch((err: unknown) => {
        throw new DriverError(
          "Aborted",
          `writing sequence ${seq} into ${this.stream} failed: ${(err as Error).message} (did something append to it meanwhile?)`,
          {
            cause: err,
          },
        );
      });
      if (got !== seq) throw new DriverError("Internal", `sequence ${seq} was stored in ${this.stream} as ${got}`);
      if (seq % 1024 === 0) this.progress(seq);
    }
  }

  /** Everything sent is stored (or the first failure thrown); on failure every ack is still awaited, so nothing is left in flight. */
  async end(ok: boolean): Promise<void> {
    if (ok) await this.#settle(0);
    await Promise.allSettled(this.#inFlight.map((f) => f.ack));
  }
}

// ------------------------------------------------------------------ restore

export type ImportPhase = "check" | "stage" | "write";

type Progress = (phase: ImportPhase, seq: number, last: number) => void;

export interface ImportOptions extends ReadOptions {
  /** Replicas of the streams made; default: those of the stream there, else 1. */
  replicas?: number | undefined;
  /** Replace what the stream holds (`log restore`); else it must be empty or absent (`log import`). */
  replace?: boolean | undefined;
  progress?: Progress;
  /** Throws if a writer of the log (a journal replica) runs: asked before the staging stream is made and before the log is replaced. */
  noWriters?: () => Promise<void>;
  /** Tests: awaited as each step ends ("checked", "staged", "deleted", "written"); one that never resolves is a crash there. */
  onStep?: (step: "checked" | "staged" | "deleted" | "written") => Promise<void>;
}

export interface ImportResult {
  stream: string;
  messages: number;
  lastSeq: number;
  /** Records restored that are not events of a journal (they were in the log; journals skip them). */
  foreign: number;
  /** What the stream held before (`replace`): undefined when it was absent. */
  replaced?: { messages: number; lastSeq: number };
}

/**
 * Whether a log restore of `cluster` is under way, or was interrupted (its staging stream exists):
 * journals wait for it. `seenOne`: the caller already saw one under way — it then lasts until the
 * log exists again too, since a restore ends only with the log written, and a re-run of an
 * interrupted one deletes its leftover staging stream and makes it anew (step 2) while the log may
 * be gone (a crash after step 3 deleted it): in that gap a waiting journal took the restore for
 * ended and made a log of its own (seen once in a `.ci/run` under two CPU hogs, test/restore.test.ts).
 */
export async function restoreUnderWay(jsm: JetStreamManager, cluster: string, seenOne = false): Promise<boolean> {
  if ((await streamInfoOrNone(jsm, subjects.restoreStreamName(cluster))) !== undefined) return true;
  return seenOne && (await streamInfoOrNone(jsm, subjects.streamName(cluster))) === undefined;
}

/** A stream holds exactly the backup: its last sequence, and every record but the removed ones. */
async function expectRestored(jsm: JetStreamManager, stream: string, c: Checked): Promise<void> {
  const state = (await jsm.streams.info(stream)).state;
  const messages = c.header.lastSeq - c.removed;
  if (state.last_seq !== c.header.lastSeq || state.messages !== messages)
    throw new DriverError(
      "Internal",
      `${stream} holds ${state.messages} messages up to sequence ${state.last_seq}, not the backup's ${messages} up to ${c.header.lastSeq}`,
    );
}

const placeholder = (wildcard: string) => `${wildcard.slice(0, -1)}removed`;

/**
 * Restores a backup (`input`: a file, or a stream such as stdin) into `cluster`'s log in the
 * steps the top of this file describes. A BackupError: the file was refused, nothing written.
 */
/**
 * A backup checked whole (as a restore checks it) and folded, nothing written: what the log would
 * say after `log restore` — its dry run compares it with the pools (audit/findings.ts's inspect).
 */
export async function foldBackup(
  input: string | NodeJS.ReadableStream,
  cluster: string,
  opts: ReadOptions & { progress?: Progress } = {},
): Promise<{ header: BackupHeader; replayed: Replayed; foreign: number }> {
  const read: ReadOptions = { key: opts.key, insecureNoMac: opts.insecureNoMac, maxPayload: opts.maxPayload };
  const checked = await checkIntoCopy(input, cluster, read, opts.progress ?? (() => {}));
  try {
    const replayed = emptyReplay();
    const batch: LogRecord[] = [];
    const all = { seq: Number.MAX_SAFE_INTEGER };
    await replayCopy(checked, cluster, read, async (m) => {
      if ("removedThrough" in m) return;
      batch.push(classifyRecord({ cluster }, { seq: m.seq, subject: m.subject, data: Buffer.from(m.data, "utf8") }));
      if (batch.length >= FOLD_BATCH) replayInto(replayed, batch.splice(0), all);
    });
    replayInto(replayed, batch, all);
    return { header: checked.header, replayed, foreign: checked.foreign };
  } finally {
    await rm(checked.dir, { recursive: true, force: true });
  }
}

export async function importLog(nc: NatsConnection, cluster: string, input: string | NodeJS.ReadableStream, opts: ImportOptions = {}): Promise<ImportResult> {
  const progress = opts.progress ?? (() => {});
  const read: ReadOptions = { key: opts.key, insecureNoMac: opts.insecureNoMac, maxPayload: opts.maxPayload ?? nc.info?.max_payload };
  const checked = await checkIntoCopy(input, cluster, read, progress);
  try {
    await opts.onStep?.("checked");
    const jsm = await jetstreamManager(nc);
    const stream = subjects.streamName(cluster);
    const before = await streamInfoOrNone(jsm, stream);
    if (!opts.replace && before && (before.state.messages > 0 || before.state.last_seq > 0))
      throw new DriverError(
        "FailedPrecondition",
        `${stream} is not empty (${before.state.messages} messages, last sequence ${before.state.last_seq}): log import restores only into an empty stream; log restore replaces it${(await restoreUnderWay(jsm, cluster)) ? ` (an earlier restore was interrupted: ${subjects.restoreStreamName(cluster)} exists; run log restore with the same file)` : ""}`,
      );
    await opts.noWriters?.();
    const replicas = opts.replicas ?? before?.config.num_replicas ?? 1;
    await stage(nc, jsm, cluster, checked, { read, replicas, progress });
    await opts.onStep?.("staged");
    try {
      await opts.noWriters?.();
    } catch (err) {
      await jsm.streams.delete(subjects.restoreStreamName(cluster)).catch(() => {});
      throw err;
    }
    // The restored log is the backed-up one (its pools are bound to it): its identity, else (an older
    // backup) the one of the log it replaces; restored now, which gc reads (docs/operations.md).
    const identity = { identity: checked.header.logIdentity ?? (before ? identityOf(before).identity : undefined), restoredAt: new Date().toISOString() };
    await switchLog(nc, jsm, cluster, checked, { read, replicas, progress, replacing: !!before, onStep: opts.onStep, identity });
    await jsm.streams.delete(subjects.restoreStreamName(cluster));
    const { lastSeq } = checked.header;
    return {
      stream,
      messages: lastSeq - checked.removed,
      lastSeq,
      foreign: checked.foreign,
      ...(before ? { replaced: { messages: before.state.messages, lastSeq: before.state.last_seq } } : {}),
    };
  } finally {
    await rm(checked.dir, { recursive: true, force: true });
  }
}

interface WriteOptions {
  read: ReadOptions;
  replicas: number;
  progress: Progress;
}

/** Step 2: the whole backup into a fresh staging stream (a leftover one deleted first), checked; on failure it is deleted again. */
async function stage(nc: NatsConnection, jsm: JetStreamManager, cluster: string, c: Checked, o: WriteOptions): Promise<void> {
  const name = subjects.restoreStreamName(cluster);
  if (await streamInfoOrNone(jsm, name)) await jsm.streams.delete(name);
  const description = `csictl log restore of ${subjects.streamName(cluster)} under way (or interrupted: run it again); journals of cluster ${cluster} wait while this stream exists`;
  await jsm.streams.add(logStreamConfig(name, subjects.restoreWildcard(cluster), o.replicas, description));
  // A record of csi.<c>.evt.… is staged on csi.<c>.restore.evt.….
  const ours = `csi.${cluster}.`;
  const staged = subjects.restoreWildcard(cluster).slice(0, -1);
  const w = new SequencedWriter(
    nc,
    jsm,
    name,
    placeholder(subjects.restoreWildcard(cluster)),
    (s) => staged + s.slice(ours.length),
    (seq) => o.progress("stage", seq, c.header.lastSeq),
  );
  try {
    await replayCopy(c, cluster, o.read, (m) => w.put(m));
    await w.end(true);
    await expectRestored(jsm, name, c);
  } catch (err) {
    await w.end(false);
    await jsm.streams.delete(name).catch(() => {});
    throw err;
  }
  o.progress("stage", c.header.lastSeq, c.header.lastSeq);
}

/** Step 3: the log deleted, made anew and written from the checked copy on its sequences, then checked. */
async function switchLog(
  nc: NatsConnection,
  jsm: JetStreamManager,
  cluster: string,
  c: Checked,
  o: WriteOptions & { replacing: boolean; onStep: ImportOptions["onStep"]; identity: { identity?: string | undefined; restoredAt: string } },
): Promise<void> {
  const stream = subjects.streamName(cluster);
  try {
    if (o.replacing) await jsm.streams.delete(stream);
    await o.onStep?.("deleted");
    const { identity, restoredAt } = o.identity;
    await new JetStreamLog(nc, { cluster, replicas: o.replicas }).ensureStream({ ...(identity ? { identity } : {}), restoredAt });
    const w = new SequencedWriter(
      nc,
      jsm,
      stream,
      placeholder(subjects.eventsWildcard(cluster)),
      (s) => s,
      (seq) => o.progress("write", seq, c.header.lastSeq),
    );
    try {
      await replayCopy(c, cluster, o.read, (m) => w.put(m));
      await w.end(true);
    } finally {
      await w.end(false);
    }
    await expectRestored(jsm, stream, c);
    await o.onStep?.("written");
  } catch (err) {
    throw new DriverError(
      "Aborted",
      `the restore was interrupted while ${stream} was being replaced: the log is incomplete, and ${subjects.restoreStreamName(cluster)} (the checked backup, staged) keeps journals from starting; run the same restore again (${(err as Error).message})`,
      { cause: err },
    );
  }
  o.progress("write", c.header.lastSeq, c.header.lastSeq);
}
