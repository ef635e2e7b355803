/**
 * What a record of an event stream is (docs/journal.md, "Foreign records in the log"): a valid
 * event written by a journal, or a foreign record — anything else that landed on the stream's
 * subjects (a JetStream API reply sent there by a requester's reply subject, a message published
 * with the nats CLI, a record of a broken writer). Pure: bytes and a subject in, a LogRecord out.
 *
 * A record is an event when it is at most MAX_EVENT_BYTES, a JSON object, of a type a journal
 * writes, valid against that type's schema, and on the very subject its journal appends it on
 * (`eventSubject`: its aggregate's, its name's of this journal's instance, its volume's device
 * subject, its pool's). Anything else is foreign, with the reason and a short sanitised preview,
 * never more of its body. The fold skips a foreign record but moves the sequence of the
 * aggregate whose subject it is on past it (`subjectAddress`; evolve.ts): the next append's fence
 * is the subject's last sequence, whatever is there.
 */
import { type ForeignReason, isUuid, JournalEvent, KIND_TOKENS, type Kind, MAX_EVENT_BYTES, nameToken, quote, sanitizeMessage, subjects } from "@csi/contracts";
import { type Address, addressOf } from "../fold/evolve.js";
import type { ForeignRecord, LogRecord } from "../fold/log-record.js";

export { eventsOf, type ForeignRecord, foreignView, isForeign, type LogRecord, shownSubject } from "../fold/log-record.js";

/** Which log a record is read from: its cluster, and the instance whose request names this journal keeps (unset: any instance's). */
export interface LogOf {
  cluster: string;
  instance?: string | undefined;
}

/** How much of a foreign record a preview shows (bytes of its start, sanitised and quoted). */
const PREVIEW_BYTES = 48;
/** How long the `detail` of a foreign record may be (it names a field and a problem, never a value). */
const DETAIL_BYTES = 160;

const KIND_OF_TOKEN = new Map<string, Kind>(Object.entries(KIND_TOKENS).map(([kind, tok]) => [tok, kind as Kind]));
const EVENT_TYPES: ReadonlySet<string> = new Set(JournalEvent.options.map((o) => o.shape.type.value));

/**
 * The aggregate a subject of `log` is the fence of: `csi.<c>.evt.<vol|snap|grp>.<uuid>`, or a
 * request name `csi.<c>.evt.name.<vol|snap|grp>.<instance>.<base64url(name)>` (of the log's
 * instance, when it is known). None for device and pool subjects and anything else.
 */
export function subjectAddress(log: LogOf, subject: string): Address | undefined {
  const t = subject.split(".");
  if (t[0] !== "csi" || t[1] !== log.cluster || t[2] !== "evt") return undefined;
  if (t.length === 5) {
    const kind = KIND_OF_TOKEN.get(t[3] as string);
    return kind && isUuid(t[4] as string) ? { kind, uuid: t[4] as string } : undefined;
  }
  if (t.length === 7 && t[3] === "name") {
    const of = KIND_OF_TOKEN.get(t[4] as string);
    if (!of || (log.instance !== undefined && t[5] !== log.instance)) return undefined;
    const name = Buffer.from(t[6] as string, "base64url").toString("utf8");
    return name !== "" && nameToken(name) === t[6] ? { kind: "name", of, name } : undefined;
  }
  return undefined;
}

/**
 * The subject a journal of `log` appends `e` on. A name event's instance is the log's, or (when
 * the log's is not known) the one `onSubject` names, so only the kind and the name are checked.
 * Undefined when the event's fields make no subject (a pool name that is not one token).
 */
export function eventSubject(log: LogOf, e: JournalEvent, onSubject = ""): string | undefined {
  // What subjects.ts builds, without checking tokens the schema checked already (uuids, kinds) on every event of a replay.
  const prefix = `csi.${log.cluster}.evt.`;
  try {
    switch (e.type) {
      case "NameReserved":
      case "NameReleased":
        return subjects.nameEvents(log.cluster, KIND_TOKENS[e.kind], log.instance ?? (onSubject.split(".")[5] || "_"), e.name);
      case "DeviceStateReported":
        return `${prefix}dev.${e.uuid}`;
      case "ImageLeakCollected":
        return subjects.poolEvents(log.cluster, e.pool);
      default: {
        const a = addressOf(e);
        return a && a.kind !== "name" ? `${prefix}${KIND_TOKENS[a.kind]}.${a.uuid}` : undefined;
      }
    }
  } catch {
    return undefined;
  }
}

function utf8(data: Uint8Array, max = data.byteLength): string {
  return Buffer.from(data.buffer, data.byteOffset, Math.min(max, data.byteLength)).toString("utf8");
}

/**
 * A foreign record of `raw`: why, a bounded detail, its size and a sanitised preview of its start
 * (never more of its body). A function of its own rather than a closure made for every record
 * read: under tsx (the bench, the tests) each such closure also cost a `__name` call, about 1 µs
 * per event of a replay.
 */
function foreignRecord(log: LogOf, raw: RawRecord, reason: ForeignReason, detail: string): ForeignRecord {
  const { seq, subject, data } = raw;
  const address = subjectAddress(log, subject);
  return {
    seq,
    subject,
    foreign: {
      reason,
      detail: sanitizeMessage(detail, DETAIL_BYTES),
      bytes: data.byteLength,
      preview: JSON.stringify(sanitizeMessage(utf8(data, PREVIEW_BYTES * 4), PREVIEW_BYTES)),
    },
    ...(address ? { address } : {}),
  };
}

/** A message of the log as it was read: its stream sequence, subject and body. */
export interface RawRecord {
  seq: number;
  subject: string;
  data: Uint8Array;
}

/**
 * A record read from the log: a stored event, or a foreign record saying why. Never throws: what
 * cannot be read as an event is foreign.
 */
export function classifyRecord(log: LogOf, raw: RawRecord): LogRecord {
  const { seq, subject, data } = raw;
  if (data.byteLength > MAX_EVENT_BYTES)
    return foreignRecord(log, raw, "too-large", `${data.byteLength} bytes, more than the ${MAX_EVENT_BYTES} an event may have`);
  let value: unknown;
  try {
    value = JSON.parse(utf8(data));
  } catch {
    return foreignRecord(log, raw, "not-json", "not JSON");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return foreignRecord(log, raw, "not-json", "not a JSON object");
  const type = (value as { type?: unknown }).type;
  if (typeof type !== "string") return foreignRecord(log, raw, "unknown-type", "no event type");
  if (!EVENT_TYPES.has(type)) return foreignRecord(log, raw, "unknown-type", `unknown event type ${quote(type, 32)}`);
  const parsed = JournalEvent.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path.length ? issue.path.map(String).join(".") : "(event)";
    return foreignRecord(log, raw, "schema", `${type}: ${field}: ${issue?.message ?? "invalid"}`);
  }
  const event = parsed.data;
  const expected = eventSubject(log, event, subject);
  if (expected !== subject) return foreignRecord(log, raw, "wrong-subject", `a ${type} that belongs on another subject`);
  return { seq, subject, event };
}
