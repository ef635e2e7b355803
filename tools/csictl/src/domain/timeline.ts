/**
 * A volume's (snapshot's, request name's) history as a person reads it: one row per event or
 * device-state report, in log order, with when, what, which request, who, and what changed.
 * Pure: events in, rows out.
 */
import { type ForeignRecordView, type JournalEvent, namespacedName, type PodInfo } from "@csi/contracts";
import { foreignDetail } from "./audit.js";
import { formatBytes } from "./sizes.js";

export interface HistoryEntry {
  seq: number;
  subject: string;
  event: Record<string, unknown>;
  /** A foreign record (not a journal's event): skipped by the fold, shown as such. */
  foreign?: Omit<ForeignRecordView, "seq" | "subject"> | undefined;
}

/** The TYPE cell of a foreign record's row. */
export const FOREIGN_ROW_TYPE = "(foreign, skipped)";

export interface TimelineRow {
  seq: number;
  time: string;
  type: string;
  requestId: string;
  /** "journal <replica>" for the journal's own decisions, "node <id> (<via>)" for a node's report. */
  actor: string;
  change: string;
}

const str = (v: unknown) => (v === undefined || v === null ? "" : String(v));
const kv = (m: unknown) =>
  Object.entries((m ?? {}) as Record<string, unknown>)
    .map(([k, v]) => `${k}=${str(v)}`)
    .join(",");

/** Whom Kubernetes made it for (its --extra-create-metadata): "pvc shop/data-0, pv pvc-…" and the like. */
const named = (...parts: [label: string, name: string][]) =>
  parts
    .filter(([, n]) => n !== "")
    .map(([label, n]) => `${label} ${n}`)
    .join(", ");

/** The pod a node step was for (podInfoOnMount): "for pod shop/web-0 (uid …, service account …)". */
function forPod(p: PodInfo | undefined): string {
  if (!p) return "";
  const more = [p.uid ? `uid ${p.uid}` : "", p.serviceAccount ? `service account ${p.serviceAccount}` : "", p.ephemeral ? "ephemeral" : ""].filter(Boolean);
  return `for pod ${namespacedName(p.namespace, p.name) || "(unnamed)"}${more.length ? ` (${more.join(", ")})` : ""}`;
}

/** Who did it: for a device report the node that reported it, else the service replica that appended it. */
export function actorOf(e: Record<string, unknown>): string {
  if (e.type === "DeviceStateReported") return `node ${str(e.nodeId)} (${str(e.via)})`;
  const a = e.actor as { service?: unknown; replica?: unknown } | undefined;
  return a ? `${str(a.service)} ${str(a.replica)}`.trim() : "";
}

/** What an event changed, in a few words. Unknown event types (a newer journal) show their fields. */
export function changeOf(raw: Record<string, unknown>): string {
  const e = raw as JournalEvent;
  switch (e.type) {
    case "NameReserved":
      return `name ${JSON.stringify(e.name)} → ${e.kind} ${e.uuid}`;
    case "NameReleased":
      return `name ${JSON.stringify(e.name)} released (${e.kind} ${e.uuid})`;
    case "VolumeReserved":
      return [
        `name ${JSON.stringify(e.name)}`,
        named(["pvc", namespacedName(e.kubernetes?.pvcNamespace, e.kubernetes?.pvcName)], ["pv", e.kubernetes?.pvName ?? ""]),
        `pool ${e.pool}`,
        `size ${formatBytes(e.sizeBytes)}`,
        `image ${e.imageName}`,
        e.source ? `from ${e.source.kind} ${e.source.uuid}` : "",
        Object.keys(e.parameters).length ? `params ${kv(e.parameters)}` : "",
      ]
        .filter(Boolean)
        .join(", ");
    case "VolumeCreated":
    case "SnapshotCreated":
      return `image id ${e.imageId}, size ${formatBytes(e.sizeBytes)}`;
    case "VolumeExpanded":
      return `size → ${formatBytes(e.sizeBytes)}`;
    case "VolumeModified":
      return Object.keys(e.mutableParameters).length ? `limits → ${kv(e.mutableParameters)}` : "limits removed";
    case "VolumeClaimed":
      return `claimed by node ${e.nodeId}: ${e.accessMode}, ${e.accessType}${e.readOnly ? ", read-only" : ""}`;
    case "VolumeUnclaimed":
      return `claim of node ${e.nodeId} released`;
    case "DeviceStateReported":
      return [e.state, e.device ? `device ${e.device}` : "", e.path ? `at ${e.path}` : "", forPod(e.pod), e.reason ? `(${e.reason})` : ""]
        .filter(Boolean)
        .join(" ");
    case "SnapshotReserved":
      return [
        `name ${JSON.stringify(e.name)}`,
        named(
          ["volumesnapshot", namespacedName(e.kubernetes?.volumeSnapshotNamespace, e.kubernetes?.volumeSnapshotName)],
          ["content", e.kubernetes?.volumeSnapshotContentName ?? ""],
        ),
        `of volume ${e.sourceUuid}`,
        `pool ${e.pool}`,
        `image ${e.imageName}`,
        e.groupSnapshotUuid ? `in group ${e.groupSnapshotUuid}` : "",
      ]
        .filter(Boolean)
        .join(", ");
    case "GroupSnapshotReserved":
      return `name ${JSON.stringify(e.name)}, pool ${e.pool}, ${e.members.length} member(s)`;
    case "VolumeDeleted":
    case "SnapshotDeleted":
    case "GroupSnapshotDeleted":
      return "deleted";
    case "GroupSnapshotCreated":
      return "every member cut";
    case "ReservationUndone":
      return `${e.kind} reservation undone: ${e.reason}`;
    default: {
      const { type: _t, v: _v, time: _time, requestId: _r, actor: _a, ...rest } = raw;
      return JSON.stringify(rest);
    }
  }
}

export function timelineRow(entry: HistoryEntry): TimelineRow {
  if (entry.foreign) return { seq: entry.seq, time: "", type: FOREIGN_ROW_TYPE, requestId: "", actor: "", change: foreignDetail(entry.foreign) };
  const e = entry.event;
  // A node's report: when the node did it (the event's own time is when the journal appended it).
  const time = e.type === "DeviceStateReported" && e.at ? e.at : e.time;
  return { seq: entry.seq, time: str(time), type: str(e.type), requestId: str(e.requestId), actor: actorOf(e), change: changeOf(e) };
}

/** Several pages or several aggregates' histories as one timeline: in log order, each event once. */
export function mergeHistories(...lists: HistoryEntry[][]): HistoryEntry[] {
  const bySeq = new Map<number, HistoryEntry>();
  for (const list of lists) for (const e of list) bySeq.set(e.seq, e);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/**
 * Live events from several subjects (one consumer each) back in log order: an entry is held
 * `holdMs` after it arrived, so that one of a lower sequence still on its way from another
 * subject goes out first; every sequence goes out once.
 */
export class Reorder {
  readonly #held: { entry: HistoryEntry; at: number }[] = [];
  readonly #sent = new Set<number>();

  constructor(
    private readonly holdMs: number,
    sent: Iterable<number> = [],
  ) {
    for (const s of sent) this.#sent.add(s);
  }

  push(entry: HistoryEntry, now: number): void {
    if (this.#sent.has(entry.seq) || this.#held.some((h) => h.entry.seq === entry.seq)) return;
    this.#held.push({ entry, at: now });
  }

  /** What may go out now, in sequence order: everything held long enough, and anything of a lower sequence than that. */
  take(now: number): HistoryEntry[] {
    const ripe = this.#held.filter((h) => now - h.at >= this.holdMs).map((h) => h.entry.seq);
    if (ripe.length === 0) return [];
    const upTo = Math.max(...ripe);
    const out = this.#held.filter((h) => h.entry.seq <= upTo).sort((a, b) => a.entry.seq - b.entry.seq);
    for (const h of out) {
      this.#held.splice(this.#held.indexOf(h), 1);
      this.#sent.add(h.entry.seq);
    }
    return out.map((h) => h.entry);
  }
}
