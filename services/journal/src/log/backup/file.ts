/**
 * The backup file of a cluster's event log (`csictl log export` / `log import` / `log restore`,
 * docs/operations.md "Backup and restore"): JSON lines, one stream message per line, between a
 * header and a footer that seals the count and the lines before it.
 *
 *   {"format":"csi-event-log","version":2,"cluster":"local","stream":"CSI_EVENTS_local","firstSeq":1,"lastSeq":3,"exportedAt":"…","seal":"hmac-sha256","keyId":"…"}
 *   {"seq":1,"subject":"csi.local.evt.name.vol.default.cHZjLTE","data":"{\"type\":\"NameReserved\",…}"}
 *   …
 *   {"end":true,"messages":3,"hmac":"…"}
 *
 * The seal (version 2) covers the header line and every message line, as written:
 *   - `hmac-sha256`: an HMAC-SHA-256 under the operator's backup key (`--key-file`), so a file
 *     edited by anyone without the key is refused; the header names the key by `keyId` (the first
 *     16 hex digits of the key's HMAC of a fixed text: it tells keys apart, it reveals nothing);
 *   - `sha256`: an unkeyed SHA-256 (an export without a key): it catches a damaged file, not an
 *     edited one (anyone can recompute it), so a restore takes it only with `--insecure-no-mac`.
 * Version 1 files (before keys: a SHA-256 of the message lines only, header not covered) are read
 * as unkeyed.
 *
 * `data` is the message's payload as it is in the stream, byte for byte (a JSON text, kept as a
 * string so that nothing is re-serialised). Pure: the reading and checking of lines, no I/O.
 * A restore checks the whole file before it writes anything (`BackupReader`): the header, the
 * seal, dense sequences, subjects of this cluster's log, each record's size against the server's
 * max_payload, and (with `invariants`) the log's own rules, the whole file replayed through the
 * fold (log-invariants.ts). So a truncated, edited, foreign or oversized file changes nothing.
 *
 * A log may hold foreign records (docs/journal.md, "Foreign records in the log"): they are
 * exported and restored as they are, on their sequences (journals skip them; the import counts
 * them), a payload that is not UTF-8 with its invalid bytes replaced. Sequences removed from the
 * stream (`csictl log purge-foreign`) are a line `{"seq":5,"removedThrough":7}`, restored as
 * removed too, so every later record keeps its sequence.
 */
import { createHash, createHmac, type Hash, type Hmac, timingSafeEqual } from "node:crypto";
import { subjects } from "@csi/contracts";
import { z } from "zod";
import { LogInvariantError, LogInvariants } from "../invariants.js";
import { classifyRecord, isForeign } from "../records.js";

export const BACKUP_FORMAT = "csi-event-log";
/** The version written; version 1 (unkeyed, header not sealed) is still read. */
export const BACKUP_VERSION = 2;
/**
 * A line longer than this is not ours: a record is at most a server's max_payload (1 MiB by
 * default), and JSON escapes a payload's quotes and control characters in its line.
 */
export const MAX_BACKUP_LINE = 8 * 1024 * 1024;
/** Room a restore leaves beside each record under the server's max_payload for the headers it publishes it with (expected stream and last sequence). */
export const RESTORE_HEADER_ROOM = 256;
/** A backup key: at least 256 bits, and a small file (a Kubernetes Secret's key, a file of random bytes or their base64). */
export const MIN_KEY_BYTES = 32;
export const MAX_KEY_BYTES = 4096;

const HEX64 = /^[0-9a-f]{64}$/;

export const BackupHeader = z
  .object({
    format: z.literal(BACKUP_FORMAT),
    version: z.union([z.literal(1), z.literal(2)]),
    cluster: z.string().min(1),
    stream: z.string().min(1),
    firstSeq: z.number().int().min(1),
    lastSeq: z.number().int().min(0),
    exportedAt: z.string(),
    /** The exported log's identity (its pools are bound to it): a restore gives it to the log it makes. Older backups lack it. */
    logIdentity: z.string().min(1).max(128).optional(),
    seal: z.enum(["hmac-sha256", "sha256"]).optional(),
    keyId: z
      .string()
      .regex(/^[0-9a-f]{16}$/)
      .optional(),
  })
  .refine((h) => h.version === 1 || h.seal !== undefined, { message: "a version 2 header names its seal" })
  .refine((h) => (h.seal === "hmac-sha256") === (h.keyId !== undefined), { message: "keyId goes with an hmac-sha256 seal, and only with it" });
export type BackupHeader = z.infer<typeof BackupHeader>;
/** What an export says of itself; the writer adds the format, version and seal. */
export type BackupHeaderFields = Pick<BackupHeader, "cluster" | "stream" | "firstSeq" | "lastSeq" | "exportedAt" | "logIdentity">;

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

export const BackupFooter = z
  .object({ end: z.literal(true), messages: z.number().int().min(0), sha256: z.string().regex(HEX64).optional(), hmac: z.string().regex(HEX64).optional() })
  .refine((f) => (f.sha256 === undefined) !== (f.hmac === undefined), { message: "a footer has one seal: sha256 or hmac" });
export type BackupFooter = z.infer<typeof BackupFooter>;

/**
 * A backup file that cannot be restored: says which line and why. `usage`: the command line is
 * what is missing (a key, or `--insecure-no-mac` for an unkeyed file), not the file.
 */
export class BackupError extends Error {
  override readonly name = "BackupError";
  constructor(
    message: string,
    readonly usage = false,
  ) {
    super(message);
  }
}

/** The operator's backup key. Its bytes never leave this object (no message shows them); `id` tells keys apart. */
export class BackupKey {
  readonly #key: Buffer;
  readonly id: string;

  private constructor(key: Buffer) {
    this.#key = key;
    this.id = createHmac("sha256", key).update("csi-event-log key id").digest("hex").slice(0, 16);
  }

  /** A key from a key file's bytes, trailing whitespace (the newline of `echo`, a Secret's) left out; `what` names the file in errors. */
  static fromFile(bytes: Uint8Array, what: string): BackupKey {
    let end = bytes.length;
    while (end > 0 && [0x0a, 0x0d, 0x20, 0x09].includes(bytes[end - 1] as number)) end--;
    if (end < MIN_KEY_BYTES)
      throw new BackupError(`${what}: a backup key has at least ${MIN_KEY_BYTES} bytes (e.g. head -c 32 /dev/urandom | base64), this one ${end}`, true);
    if (end > MAX_KEY_BYTES) throw new BackupError(`${what}: a backup key has at most ${MAX_KEY_BYTES} bytes`, true);
    return new BackupKey(Buffer.from(bytes.subarray(0, end)));
  }

  mac(): Hmac {
    return createHmac("sha256", this.#key);
  }
}

/** The running seal of a file's lines: an HMAC under the key, or an unkeyed SHA-256. */
class Seal {
  readonly #h: Hash | Hmac;
  constructor(key: BackupKey | undefined) {
    this.#h = key ? key.mac() : createHash("sha256");
  }
  update(line: string): void {
    this.#h.update(line);
  }
  hex(): string {
    return this.#h.digest("hex");
  }
}

const messageLine = (m: BackupMessage) => `${JSON.stringify({ seq: m.seq, subject: m.subject, data: m.data })}\n`;
const gapLine = (g: BackupGap) => `${JSON.stringify({ seq: g.seq, removedThrough: g.removedThrough })}\n`;

/** Writes the lines of a backup: `header`, then `message` (or `gap`) per stream sequence in order, then `footer`. Sealed with `key`, else unkeyed. */
export class BackupWriter {
  readonly #seal: Seal;
  #count = 0;

  constructor(private readonly key?: BackupKey) {
    this.#seal = new Seal(key);
  }

  header(h: BackupHeaderFields): string {
    const { cluster, stream, firstSeq, lastSeq, exportedAt, logIdentity } = h; // only these: the writer says what the seal is
    const seal = this.key ? { seal: "hmac-sha256" as const, keyId: this.key.id } : { seal: "sha256" as const };
    const head = {
      format: BACKUP_FORMAT,
      version: BACKUP_VERSION,
      cluster,
      stream,
      firstSeq,
      lastSeq,
      exportedAt,
      ...(logIdentity ? { logIdentity } : {}),
      ...seal,
    } satisfies BackupHeader;
    const line = `${JSON.stringify(head)}\n`;
    this.#seal.update(line);
    return line;
  }

  message(m: BackupMessage): string {
    const line = messageLine(m);
    this.#seal.update(line);
    this.#count++;
    return line;
  }

  /** Sequences `seq`…`removedThrough` that the stream no longer holds. */
  gap(g: BackupGap): string {
    const line = gapLine(g);
    this.#seal.update(line);
    this.#count += g.removedThrough - g.seq + 1;
    return line;
  }

  footer(): string {
    const seal = this.#seal.hex();
    return `${JSON.stringify({ end: true, messages: this.#count, ...(this.key ? { hmac: seal } : { sha256: seal }) } satisfies BackupFooter)}\n`;
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

export interface ReadOptions {
  /** The backup key: a file sealed with it is checked with it (required for such a file unless `insecureNoMac`). */
  key?: BackupKey | undefined;
  /** Take a file that cannot be authenticated: unkeyed (its SHA-256 is still checked), or keyed while no key is given (not checked). */
  insecureNoMac?: boolean | undefined;
  /** The server's max_payload: a record that would not fit beside the restore's headers is refused. */
  maxPayload?: number | undefined;
  /** Replay every record through the log's rules (log-invariants.ts). */
  invariants?: boolean | undefined;
}

/**
 * Checks a backup line by line, for the cluster it is to be restored into: the header (format,
 * version, the same cluster — subjects name their cluster, so a log cannot move to another — and
 * a seal the options accept), every message (sequences dense from `firstSeq`, a subject of this
 * cluster's log, a size within `maxPayload`; an event of a journal or a foreign record: `foreign`
 * counts the latter; with `invariants`, the log's rules), removed sequences, and the footer (count
 * of sequences and the seal). `line` returns the message or gap of a line; `end` throws unless
 * the footer was seen and matched.
 */
export class BackupReader {
  header?: BackupHeader;
  #footer?: BackupFooter;
  #seal?: Seal;
  /** Whether the footer's seal is checked (not for a keyed file read without its key). */
  #checkSeal = true;
  #count = 0;
  #n = 0;
  readonly #prefix: string;
  readonly #invariants?: LogInvariants;
  /** Records that are not events of a journal (restored as they are). */
  foreign = 0;
  /** Sequences removed from the stream (gap lines). */
  removed = 0;

  constructor(
    readonly cluster: string,
    private readonly opts: ReadOptions = {},
  ) {
    this.#prefix = subjects.eventsWildcard(cluster).slice(0, -1); // "csi.<c>.evt."
    if (opts.invariants) this.#invariants = new LogInvariants();
  }

  line(text: string): BackupMessage | BackupGap | undefined {
    const n = ++this.#n;
    if (this.#footer) {
      if (text.trim() === "") return undefined;
      throw new BackupError(`line ${n}: after the footer`);
    }
    if (!this.header) {
      this.#readHeader(text, n);
      return undefined;
    }
    if (text.startsWith('{"end"')) {
      this.#readFooter(text, n);
      return undefined;
    }
    const expected = this.header.firstSeq + this.#count;
    if (/^\{"seq":\d+,"removedThrough":/.test(text)) {
      const g = parseLine(BackupGap, text, n, "backup gap");
      if (g.seq !== expected) throw new BackupError(`line ${n}: sequence ${g.seq} where ${expected} was due (sequences must be dense)`);
      if (g.removedThrough > this.header.lastSeq)
        throw new BackupError(`line ${n}: sequence ${g.removedThrough} is past the header's last sequence ${this.header.lastSeq}`);
      this.#sealed(gapLine(g));
      this.#count += g.removedThrough - g.seq + 1;
      this.removed += g.removedThrough - g.seq + 1;
      return g;
    }
    const m = parseLine(BackupMessage, text, n, "backup message");
    if (m.seq !== expected) throw new BackupError(`line ${n}: sequence ${m.seq} where ${expected} was due (sequences must be dense)`);
    if (m.seq > this.header.lastSeq) throw new BackupError(`line ${n}: sequence ${m.seq} is past the header's last sequence ${this.header.lastSeq}`);
    if (!m.subject.startsWith(this.#prefix) || /[\s*>]/.test(m.subject))
      throw new BackupError(`line ${n}: subject ${JSON.stringify(m.subject.slice(0, 80))} is not of this cluster's log`);
    this.#checkSize(m, n);
    // A foreign record is restored as it is (journals skip it, as they did before the backup).
    const record = classifyRecord({ cluster: this.cluster }, { seq: m.seq, subject: m.subject, data: Buffer.from(m.data, "utf8") });
    if (isForeign(record)) this.foreign++;
    try {
      this.#invariants?.add(record);
    } catch (err) {
      if (err instanceof LogInvariantError) throw new BackupError(`line ${n}: ${err.message}; no journal writes such a log`);
      throw err;
    }
    this.#sealed(messageLine(m));
    this.#count++;
    return m;
  }

  #sealed(line: string): void {
    this.#seal?.update(line);
  }

  #readHeader(text: string, n: number): void {
    const h = parseLine(BackupHeader, text, n, "backup header (is this a csictl log export?)");
    if (h.cluster !== this.cluster) throw new BackupError(`the backup is of cluster ${h.cluster}, not ${this.cluster}: a log cannot move to another cluster`);
    if (h.stream !== subjects.streamName(this.cluster)) throw new BackupError(`the backup is of stream ${h.stream}, not ${subjects.streamName(this.cluster)}`);
    if (h.firstSeq !== 1)
      throw new BackupError(`the backup starts at sequence ${h.firstSeq}: the log was purged before it was exported, and its sequences cannot be reproduced`);
    const { key, insecureNoMac } = this.opts;
    if (h.seal === "hmac-sha256") {
      if (key && key.id !== h.keyId)
        throw new BackupError(`the backup is sealed with another key (key id ${h.keyId}; the key given has id ${key.id}): it cannot be authenticated`);
      if (!key && !insecureNoMac) throw new BackupError(`the backup is sealed with a key (key id ${h.keyId}): give it with --key-file`, true);
      this.#checkSeal = !!key;
    } else if (!insecureNoMac) {
      throw new BackupError(
        "the backup is not authenticated (exported without a key: anyone who could write the file could have changed it and its SHA-256); restore it only with --insecure-no-mac",
        true,
      );
    }
    this.#seal = new Seal(h.seal === "hmac-sha256" ? key : undefined);
    if (h.version >= 2) this.#sealed(`${text}\n`); // version 2 seals its header line as written
    this.header = h;
  }

  #readFooter(text: string, n: number): void {
    const f = parseLine(BackupFooter, text, n, "backup footer");
    if (f.messages !== this.#count) throw new BackupError(`line ${n}: the footer counts ${f.messages} messages, the file holds ${this.#count}`);
    const keyed = this.header?.seal === "hmac-sha256";
    const want = keyed ? f.hmac : f.sha256;
    if (want === undefined) throw new BackupError(`line ${n}: the footer has no ${keyed ? "hmac" : "sha256"}, which the header promises`);
    const got = (this.#seal as Seal).hex();
    if (this.#checkSeal && !timingSafeEqual(Buffer.from(got, "hex"), Buffer.from(want, "hex")))
      throw new BackupError(
        keyed
          ? `line ${n}: the file does not match its HMAC: it was changed after the export`
          : `line ${n}: the messages do not match the footer's SHA-256 (the file was changed)`,
      );
    this.#footer = f;
  }

  /** A record's payload and the restore's headers must fit in the server's max_payload. */
  #checkSize(m: BackupMessage, n: number): void {
    const max = this.opts.maxPayload;
    if (max === undefined) return;
    const bytes = Buffer.byteLength(m.data, "utf8");
    if (bytes + RESTORE_HEADER_ROOM > max)
      throw new BackupError(
        `line ${n}: sequence ${m.seq} holds ${bytes} bytes, more than this server's max_payload (${max}) leaves beside the restore's headers (${RESTORE_HEADER_ROOM}): raise max_payload, or restore to the server it came from`,
      );
  }

  /** The whole file was read: it must have had a header, every message up to lastSeq, and a matching footer. */
  end(): { header: BackupHeader; messages: number; foreign: number; removed: number } {
    if (!this.header) throw new BackupError("the file is empty");
    if (!this.#footer) throw new BackupError(`the file ends after ${this.#count} messages without its footer (truncated?)`);
    if (this.#count !== this.header.lastSeq - this.header.firstSeq + 1)
      throw new BackupError(`the header promises sequences ${this.header.firstSeq}–${this.header.lastSeq}, the file holds ${this.#count} messages`);
    return { header: this.header, messages: this.#count, foreign: this.foreign, removed: this.removed };
  }
}
