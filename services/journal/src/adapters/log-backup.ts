/**
 * Backup and restore of a cluster's event log (the source of truth; docs/operations.md, "Backup
 * and restore"), in the file format of domain/log-backup.ts.
 *
 * - `exportLog` reads the stream from its first message to its last as it is when the export
 *   starts, raw (payloads byte for byte), through `readStreamRange`, with bounded memory.
 * - `importLog` restores such a file into the cluster's stream, which must be empty (or absent:
 *   it is created as the journal creates it). The file is checked whole first — nothing is
 *   written for a truncated, edited or foreign file — then every message is published in order
 *   with `Nats-Expected-Last-Sequence` = its sequence − 1, so the restored log has the very same
 *   sequences (the projection and the journal's fences refer to them), and a writer that appends
 *   meanwhile (a journal left running) stops the import at once instead of interleaving.
 * The projection is not touched: the restored stream is another log (its creation time differs),
 * so a journal rebuilds the projection from it when it starts, or `csictl rebuild` does.
 * Foreign records go out and come back as they are; sequences removed from the stream (foreign
 * records purged) are written as gaps and restored as removed (a placeholder published on the
 * sequence and deleted at once), so the records after them keep their sequences.
 */
import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { DriverError, subjects } from "@csi/contracts";
import { AckedPublisher, readStreamRange } from "@csi/runtime";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { BackupError, BackupReader, BackupWriter, MAX_BACKUP_LINE } from "../domain/log-backup.js";
import { JetStreamLog } from "./event-log.js";

/** Publishes of an import in flight at once (acks are awaited in order). */
const IMPORT_WINDOW = 1024;

export interface ExportResult {
  stream: string;
  messages: number;
  lastSeq: number;
}

/** Writes the backup of `cluster`'s log through `write` (awaited per line, so a slow file is not outrun); `progress` gets the last sequence written. */
export async function exportLog(
  nc: NatsConnection,
  cluster: string,
  write: (text: string) => Promise<void>,
  progress: (seq: number, last: number) => void = () => {},
  apiPrefix?: string,
): Promise<ExportResult> {
  const stream = subjects.streamName(cluster);
  const jsm = await jetstreamManager(nc, apiPrefix ? { apiPrefix, checkAPI: false } : {});
  const info = await jsm.streams.info(stream).catch((err: unknown) => {
    throw new DriverError("NotFound", `cluster ${cluster} has no event log ${stream} (${(err as Error).message})`, { cause: err });
  });
  const last = info.state.last_seq;
  // The last sequence that holds a record (records at the end may have been removed) and the first.
  const present = info.state.messages === 0 ? 0 : (await new JetStreamLog(nc, { cluster, ...(apiPrefix ? { apiPrefix } : {}) }).info()).last;
  const first = info.state.messages === 0 ? last + 1 : info.state.first_seq;
  const w = new BackupWriter();
  await write(w.header({ format: "csi-event-log", version: 1, cluster, stream, firstSeq: 1, lastSeq: last, exportedAt: new Date().toISOString() }));
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
  return { stream, messages: count, lastSeq: last };
}

export interface ImportResult {
  stream: string;
  messages: number;
  lastSeq: number;
  /** Records restored that are not events of a journal (they were in the log; journals skip them). */
  foreign: number;
}

/** Where a removed sequence's placeholder is published (inside the stream's subjects; deleted at once). */
const placeholderSubject = (cluster: string) => `${subjects.eventsWildcard(cluster).slice(0, -1)}removed`;

/**
 * Restores a backup read from `lines` (called twice: once to check the whole file, once to
 * publish) into `cluster`'s stream, created with `replicas` if it does not exist.
 */
export async function importLog(
  nc: NatsConnection,
  cluster: string,
  lines: () => AsyncIterable<string>,
  opts: { replicas?: number; progress?: (seq: number, last: number) => void } = {},
): Promise<ImportResult> {
  // 1. The whole file, checked before anything is written.
  const check = new BackupReader(cluster);
  for await (const line of lines()) check.line(line);
  const { header, foreign } = check.end();

  // 2. An empty stream to restore into.
  const log = new JetStreamLog(nc, { cluster, ...(opts.replicas ? { replicas: opts.replicas } : {}) });
  await log.ensureStream();
  const jsm = await jetstreamManager(nc);
  const state = (await jsm.streams.info(log.stream)).state;
  if (state.messages > 0 || state.last_seq > 0)
    throw new DriverError(
      "FailedPrecondition",
      `${log.stream} is not empty (${state.messages} messages, last sequence ${state.last_seq}): a log is restored only into an empty stream; stop the cluster's journals and delete the stream first`,
    );

  // 3. Every message in order, each on the sequence it had.
  const publisher = new AckedPublisher(nc, 30_000);
  const reader = new BackupReader(cluster);
  const inFlight: { seq: number; ack: Promise<number> }[] = [];
  const settle = async (upTo: number) => {
    while (inFlight.length > upTo) {
      const { seq, ack } = inFlight.shift() as { seq: number; ack: Promise<number> };
      const got = await ack.catch((err: unknown) => {
        throw new DriverError("Aborted", `restoring sequence ${seq} failed: ${(err as Error).message} (did something append to ${log.stream} meanwhile?)`, {
          cause: err,
        });
      });
      if (got !== seq) throw new DriverError("Internal", `sequence ${seq} was stored as ${got}`);
      if (seq % 1024 === 0) opts.progress?.(seq, header.lastSeq);
    }
  };
  try {
    for await (const line of lines()) {
      const m = reader.line(line);
      if (!m) continue;
      if ("removedThrough" in m) {
        // Removed sequences: each a placeholder, published once everything before it is stored, and deleted.
        await settle(0);
        for (let seq = m.seq; seq <= m.removedThrough; seq++) {
          inFlight.push({ seq, ack: publisher.publish(placeholderSubject(cluster), "", { expectedLastSequence: seq - 1, expectedStream: log.stream }) });
          await settle(0);
          await jsm.streams.deleteMessage(log.stream, seq, false);
        }
        continue;
      }
      const ack = publisher.publish(m.subject, m.data, { expectedLastSequence: m.seq - 1, expectedStream: log.stream });
      ack.catch(() => {}); // awaited in settle(); never an unhandled rejection if an earlier one throws first
      inFlight.push({ seq: m.seq, ack });
      if (inFlight.length >= IMPORT_WINDOW) await settle(IMPORT_WINDOW / 2);
    }
    await settle(0);
  } finally {
    await Promise.allSettled(inFlight.map((f) => f.ack));
  }
  reader.end();
  opts.progress?.(header.lastSeq, header.lastSeq);
  return { stream: log.stream, messages: header.lastSeq - header.firstSeq + 1, lastSeq: header.lastSeq, foreign };
}

/**
 * `exportLog` into a file: written as `<file>.partial` (created exclusively, mode 0600) and renamed
 * to `<file>` once whole, so a file under the given name is always a complete backup; on failure
 * the partial file is removed. A file that cannot be created rejects with its errno error
 * (syscall "open").
 */
export async function exportLogToFile(
  nc: NatsConnection,
  cluster: string,
  file: string,
  progress?: (seq: number, last: number) => void,
  apiPrefix?: string,
): Promise<ExportResult> {
  const partial = `${file}.partial`;
  const out = createWriteStream(partial, { flags: "wx", mode: 0o600 });
  await once(out, "open");
  try {
    const r = await exportLog(
      nc,
      cluster,
      async (text) => {
        if (!out.write(text)) await once(out, "drain");
      },
      progress,
      apiPrefix,
    );
    out.end();
    await once(out, "finish");
    await rename(partial, file);
    return r;
  } catch (err) {
    out.destroy();
    await rm(partial, { force: true });
    throw err;
  }
}

/** The lines of a backup file, none longer than MAX_BACKUP_LINE (a longer one is refused before it fills memory). */
export async function* backupFileLines(file: string): AsyncGenerator<string> {
  let rest = "";
  for await (const chunk of createReadStream(file, { encoding: "utf8", highWaterMark: 256 * 1024 })) {
    const parts = (rest + (chunk as string)).split("\n");
    rest = parts.pop() as string;
    if (rest.length > MAX_BACKUP_LINE) throw new BackupError(`a line is longer than ${MAX_BACKUP_LINE} bytes; not a backup of this driver`);
    yield* parts;
  }
  if (rest !== "") yield rest;
}
