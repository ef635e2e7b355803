/**
 * The pure parts of `replay`, `verify` and `gc`: what a person types for a point of the log and
 * for an age, and the rows the tables show. The journal's audit.* commands do the work.
 */
import { composeVolumeId, type Finding, type ForeignRecordView, type GcAction, type ImageOwnerView, type PurgeAction, type ReplayEntry } from "@csi/contracts";
import { usageError } from "../errors.js";
import { formatBytes } from "./sizes.js";

/** `--at`: a stream sequence (digits) or an ISO time (checked here, so a typo never reaches the journal). */
export function parseLogPoint(text: string): number | string {
  const t = text.trim();
  if (/^\d+$/.test(t)) {
    const seq = Number(t);
    if (!Number.isSafeInteger(seq)) throw usageError(`--at: sequence ${t.slice(0, 40)} is too large`);
    return seq;
  }
  if (t.length <= 64 && /^\d{4}-\d\d-\d\d/.test(t) && !Number.isNaN(Date.parse(t))) return t;
  throw usageError(`--at must be a stream sequence or an ISO time (e.g. 1234, 2026-11-22T09:30:00Z), got ${JSON.stringify(t.slice(0, 40))}`);
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
/** The journal's bound on an age (10 years). */
const MAX_DURATION_MS = 10 * 365 * 86_400_000;

/** `--older-than`: `90s`, `10m`, `2h`, `1d`, `500ms`, or a sum such as `1h30m`; plain digits are ms. */
export function parseDuration(text: string): number {
  const t = text.trim().toLowerCase();
  const bad = () => usageError(`not a duration: ${JSON.stringify(text.slice(0, 40))} (e.g. 90s, 10m, 2h, 1d, 1h30m)`);
  if (/^\d+$/.test(t)) return bounded(Number(t), text);
  const parts = [...t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== t) throw bad();
  return bounded(Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * (DURATION_UNITS[p[2] as string] as number), 0)), text);
}

function bounded(ms: number, text: string): number {
  if (!Number.isSafeInteger(ms) || ms > MAX_DURATION_MS) throw usageError(`duration ${JSON.stringify(text.slice(0, 40))} is longer than 10 years`);
  return ms;
}

/** "2h", "10m", "1h30m", "0s": the shortest spelling of whole units. */
export function formatDuration(ms: number): string {
  if (ms === 0) return "0s";
  let rest = ms;
  let out = "";
  for (const [unit, size] of [
    ["d", 86_400_000],
    ["h", 3_600_000],
    ["m", 60_000],
    ["s", 1000],
    ["ms", 1],
  ] as const) {
    const n = Math.floor(rest / size);
    if (n > 0) out += `${n}${unit}`;
    rest -= n * size;
  }
  return out;
}

export const REPLAY_HEAD = ["KIND", "ID", "NAME", "STATUS", "SIZE", "NODES", "SEQ"];

/** A replayed aggregate's CSI id (cluster + pool + uuid), or its uuid when the record has no pool. */
export function replayId(clusterID: string, e: ReplayEntry): string {
  const view = e.volume ?? e.snapshot ?? e.groupSnapshot;
  return view ? composeVolumeId({ clusterID, poolID: view.poolId, uuid: e.uuid }) : e.uuid;
}

/** One replayed aggregate as a row: its CSI id, name, status, size, the nodes holding claims. */
export function replayRow(clusterID: string, e: ReplayEntry): (string | number | undefined)[] {
  const view = e.volume ?? e.snapshot ?? e.groupSnapshot;
  const id = replayId(clusterID, e);
  const size = e.volume?.sizeBytes ?? e.snapshot?.sizeBytes;
  const nodes = e.volume ? e.volume.claims.map((c) => c.nodeId).join(",") || undefined : undefined;
  return [e.kind, id, view?.name, e.status, size === undefined ? undefined : formatBytes(size), nodes, e.seq];
}

export const FINDING_HEAD = ["FINDING", "WHAT", "DETAIL"];

/** One finding of verify as a row: its type, what it is about, and why. */
export function findingRow(f: Finding): string[] {
  switch (f.type) {
    case "leakedImage":
      return [f.type, `${f.pool}/${f.imageName}`, `${formatBytes(f.sizeBytes)}${ownedBy(f.owner)}, no reservation owns it`];
    case "orphanedReservation":
      return [
        f.type,
        `${f.pool}/${f.imageName}`,
        `${f.kind} ${f.uuid} "${f.name}" reserved ${f.reservedAt}, ${f.imageMade ? "its image made and never recorded" : "no image"}`,
      ];
    case "missingImage":
      return [f.type, `${f.pool}/${f.imageName}`, `${f.kind} ${f.uuid} "${f.name}" is made but its image is gone (gc leaves it)`];
    case "projectionDrift":
      return [f.type, f.key, "the projection differs from the log (csictl rebuild)"];
    case "imageSizeDiffers":
      return [
        f.type,
        `${f.pool}/${f.imageName}`,
        `${f.kind} ${f.uuid} "${f.name}": the record says ${formatBytes(f.recordBytes)}, the image is ${formatBytes(f.imageBytes)} (gc leaves it)`,
      ];
    case "strayDevice":
      return [f.type, f.uuid, `node ${f.nodeId} holds it (registration of ${f.since}); this log has no live volume of it`];
    case "staleClaim":
      return [f.type, f.uuid, `claimed by ${f.nodeId}, last heartbeat ${f.lastHeartbeat ?? "never"}`];
    case "foreignRecord":
      return [f.type, `sequence ${f.seq} on ${f.subject}`, foreignDetail(f)];
    case "foreignImage":
      return [f.type, `${f.pool}/${f.imageName}`, `${formatBytes(f.sizeBytes)}, not ours: ${f.reason} (gc leaves it)`];
    case "trashedImage":
      return [
        f.type,
        `${f.pool}/${f.imageName}`,
        `${formatBytes(f.sizeBytes)}${ownedBy(f.owner)}, deleted ${f.deletedAt}, still in the trash, nothing needs it`,
      ];
    case "tempImage":
      return [f.type, `${f.pool}/${f.imageName}`, `${formatBytes(f.sizeBytes)}${ownedBy(f.owner)}, made ${f.createdAt} by a build that never finished`];
  }
}

/** ", of volume <uuid> "<name>"": what an image's metadata says of its owner (RBD). */
function ownedBy(o: ImageOwnerView | undefined): string {
  if (!o?.uuid) return "";
  return `, of ${o.kind ?? "aggregate"} ${o.uuid}${o.name ? ` ${JSON.stringify(o.name)}` : ""}${o.cluster ? ` in cluster ${o.cluster}` : ""}`;
}

/** What is wrong with a foreign record, its size and the start of its body (sanitised, quoted): a verify or history cell. */
export function foreignDetail(f: Pick<ForeignRecordView, "reason" | "detail" | "bytes" | "preview">): string {
  return `${f.reason}: ${f.detail}; ${formatBytes(f.bytes)}, starts ${f.preview}`;
}

export const PURGE_HEAD = ["SEQ", "SUBJECT", "REASON", "OUTCOME"];

export function purgeRow(a: PurgeAction): (string | number | undefined)[] {
  return [a.seq, a.subject, a.reason, a.why ? `${a.outcome} (${a.why})` : a.outcome];
}

export const GC_HEAD = ["ACTION", "IMAGE", "AGGREGATE", "OUTCOME", "SEQ"];

export function gcRow(a: GcAction): (string | number | undefined)[] {
  const aggregate = a.uuid ? `${a.kind ?? ""} ${a.uuid}`.trim() : undefined;
  return [a.type, `${a.pool}/${a.imageName}`, aggregate, a.reason ? `${a.outcome} (${a.reason})` : a.outcome, a.seq];
}
