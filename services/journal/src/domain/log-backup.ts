/**
 * The backup file of a cluster's event log (`csictl log export` / `csictl log import`,
 * docs/operations.md "Backup and restore"): JSON lines, one stream message per line, between a
 * header and a footer that seals the count and a SHA-256 of the message lines.
 *
 *   {"format":"csi-event-log","version":1,"cluster":"local","stream":"CSI_EVENTS_local","firstSeq":1,"lastSeq":3,"exportedAt":"…"}
 *   {"seq":1,"subject":"csi.local.evt.name.vol.default.cHZjLTE","data":"{\"type\":\"NameReserved\",…}"}
 *   …
 *   {"end":true,"messages":3,"sha256":"…"}
 *
 * `data` is the message's payload as it is in the stream, byte for byte (a JSON text, kept as a
 * string so that nothing is re-serialised). Pure: the reading and checking of lines, no I/O.
 * An import checks the whole file before it writes anything (`BackupReader`), so a truncated,
 * edited or foreign file changes nothing.
 *
 * A log may hold foreign records (docs/journal.md, "Foreign records in the log"): they are
 * exported and restored as they are, on their sequences (journals skip them; the import counts
 * them), a payload that is not UTF-8 with its invalid bytes replaced. Sequences removed from the
 * stream (`csictl log purge-foreign`) are a line `{"seq":5,"removedThrough":7}`, restored as
 * removed too, so every later record keeps its sequence.
 */
import { createHash, type Hash } from "node:crypto";
import { subjects } from "@csi/contracts";
import { z } from "zod";
import { classifyRecord, isForeign } from "./log-records.js";

export const BACKUP_FORMAT = "csi-event-log";
export const BACKUP_VERSION = 1;
/** A line longer than this is not ours (events are bounded far below it; see contracts bounds). */
export const MAX_BACKUP_LINE = 1024 * 1024;

export const BackupHeader = z.object({
  format: z.literal(BACKUP_FORMAT),
  version: z.literal(BACKUP_VERSION),
  cluster: z.string().min(1),
  stream: z.string().min(1),
  firstSeq: z.number().int().min(1),
  lastSeq: z.number().int().min(0),
  exportedAt: z.string(),
});
export type BackupHeader = z.infer<typeof BackupHeader>;

export const BackupMessage = z.object({
  seq: z.number().int().min(1),
  subject: z.string().min(1).max(1024),
  data: z.string(),
});
export type BackupMessage = z.infer<typeof BackupMessage>;

/** Sequences `seq`…`removedThrough` were removed from the stream (foreign records purged). */
export const BackupGap = z.object({ seq: z.number().int().min(1), removedThrough: z.number().int().min(1) }).refine((g) => g.removedThrough >= g.seq, {
  message: "removedThrough must not be before seq",
});
export type BackupGap = z.infer<typeof BackupGap>;

export const BackupFooter = z.object({ end: z.literal(true), messages: z.number().int().min(0), sha256: z.string().regex(/^[0-9a-f]{64}$/) });
export type BackupFooter = z.infer<typeof BackupFooter>;

/** A backup file that cannot be restored: says which line and why. */
export class BackupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BackupError";
  }
}

/** Writes the lines of a backup: `header`, then `message` per stream message in order, then `footer`. */
export class BackupWriter {
  readonly #hash: Hash = createHash("sha256");
  #count = 0;

  header(h: BackupHeader): string {
    return `${JSON.stringify(h)}\n`;
  }

  message(m: BackupMessage): string {
    const line = `${JSON.stringify({ seq: m.seq, subject: m.subject, data: m.data })}\n`;
    this.#hash.update(line);
    this.#count++;
    return line;
  }

  /** Sequences `seq`…`removedThrough` that the stream no longer holds. */
  gap(g: BackupGap): string {
    const line = `${JSON.stringify({ seq: g.seq, removedThrough: g.removedThrough })}\n`;
    this.#hash.update(line);
    this.#count += g.removedThrough - g.seq + 1;
    return line;
  }

  footer(): string {
    return `${JSON.stringify({ end: true, messages: this.#count, sha256: this.#hash.digest("hex") } satisfies BackupFooter)}\n`;
  }
}

function parseLine<T>(schema: z.ZodType<T>, line: string, n: number, what: string): T {
  if (line.length > MAX_BACKUP_LINE) throw new BackupError(`line ${n}: longer than ${MAX_BACKUP_LINE} bytes; not a backup of this driver`);
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    throw new BackupError(`line ${n}: not JSON`);
  }
  const r = schema.safeParse(value);
  if (!r.success) throw new BackupError(`line ${n}: not a ${what}: ${r.error.issues.map((i) => `${i.path.join(".") || "(line)"} ${i.message}`).join("; ")}`);
  return r.data;
}

/**
 * Checks a backup line by line, for the cluster it is to be restored into: the header (format,
 * version, the same cluster — subjects name their cluster, so a log cannot move to another),
 * every message (sequences dense from `firstSeq`, a subject of this cluster's log, a payload that
 * or foreign record: `foreign` counts the latter), removed sequences, and the footer (count of
 * sequences and SHA-256 of the message lines). `line` returns the message or gap of a line; `end`
 * throws unless the footer was seen and matched.
 */
export class BackupReader {
  header?: BackupHeader;
  #footer?: BackupFooter;
  readonly #hash: Hash = createHash("sha256");
  #count = 0;
  #n = 0;
  readonly #prefix: string;
  /** Records that are not events of a journal (restored as they are). */
  foreign = 0;

  constructor(readonly cluster: string) {
    this.#prefix = subjects.eventsWildcard(cluster).slice(0, -1); // "csi.<c>.evt."
  }

  line(text: string): BackupMessage | BackupGap | undefined {
    const n = ++this.#n;
    if (this.#footer) {
      if (text.trim() === "") return undefined;
      throw new BackupError(`line ${n}: after the footer`);
    }
    if (!this.header) {
      const h = parseLine(BackupHeader, text, n, "backup header (is this a csictl log export?)");
      if (h.cluster !== this.cluster) throw new BackupError(`the backup is of cluster ${h.cluster}, not ${this.cluster}: a log cannot move to another cluster`);
      if (h.stream !== subjects.streamName(this.cluster))
        throw new BackupError(`the backup is of stream ${h.stream}, not ${subjects.streamName(this.cluster)}`);
      if (h.firstSeq !== 1)
        throw new BackupError(`the backup starts at sequence ${h.firstSeq}: the log was purged before it was exported, and its sequences cannot be reproduced`);
      this.header = h;
      return undefined;
    }
    if (text.startsWith('{"end"')) {
      const f = parseLine(BackupFooter, text, n, "backup footer");
      if (f.messages !== this.#count) throw new BackupError(`line ${n}: the footer counts ${f.messages} messages, the file holds ${this.#count}`);
      if (f.sha256 !== this.#hash.digest("hex")) throw new BackupError(`line ${n}: the messages do not match the footer's SHA-256 (the file was changed)`);
      this.#footer = f;
      return undefined;
    }
    const expected = this.header.firstSeq + this.#count;
    if (/^\{"seq":\d+,"removedThrough":/.test(text)) {
      const g = parseLine(BackupGap, text, n, "backup gap");
      if (g.seq !== expected) throw new BackupError(`line ${n}: sequence ${g.seq} where ${expected} was due (sequences must be dense)`);
      if (g.removedThrough > this.header.lastSeq)
        throw new BackupError(`line ${n}: sequence ${g.removedThrough} is past the header's last sequence ${this.header.lastSeq}`);
      this.#hash.update(`${JSON.stringify({ seq: g.seq, removedThrough: g.removedThrough })}\n`);
      this.#count += g.removedThrough - g.seq + 1;
      return g;
    }
    const m = parseLine(BackupMessage, text, n, "backup message");
    if (m.seq !== expected) throw new BackupError(`line ${n}: sequence ${m.seq} where ${expected} was due (sequences must be dense)`);
    if (m.seq > this.header.lastSeq) throw new BackupError(`line ${n}: sequence ${m.seq} is past the header's last sequence ${this.header.lastSeq}`);
    if (!m.subject.startsWith(this.#prefix) || /[\s*>]/.test(m.subject))
      throw new BackupError(`line ${n}: subject ${JSON.stringify(m.subject.slice(0, 80))} is not of this cluster's log`);
    // A foreign record is restored as it is (journals skip it, as they did before the backup).
    if (isForeign(classifyRecord({ cluster: this.cluster }, { seq: m.seq, subject: m.subject, data: Buffer.from(m.data, "utf8") }))) this.foreign++;
    this.#hash.update(`${JSON.stringify({ seq: m.seq, subject: m.subject, data: m.data })}\n`);
    this.#count++;
    return m;
  }

  /** The whole file was read: it must have had a header, every message up to lastSeq, and a matching footer. */
  end(): { header: BackupHeader; messages: number; foreign: number } {
    if (!this.header) throw new BackupError("the file is empty");
    if (!this.#footer) throw new BackupError(`the file ends after ${this.#count} messages without its footer (truncated?)`);
    if (this.#count !== this.header.lastSeq - this.header.firstSeq + 1)
      throw new BackupError(`the header promises sequences ${this.header.firstSeq}–${this.header.lastSeq}, the file holds ${this.#count} messages`);
    return { header: this.header, messages: this.#count, foreign: this.foreign };
  }
}
