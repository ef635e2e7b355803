/**
 * Audit, pure: the state at a point of the log (replay) and what `verify` finds, both from the
 * fold (evolve.ts) alone; what `gc` may act on. No I/O: the app reads the log, the pools and the
 * node registrations, and hands them in.
 */
import { type Finding, type GcAction, type Kind, type LogPoint, type ReplayEntry, SNAPSHOT_IMAGE_PREFIX, VOLUME_IMAGE_PREFIX } from "@csi/contracts";
import type { Command } from "./decider.js";
import { type Address, type Aggregate, foldInto, type RecordState, type States, statusOf } from "./evolve.js";
import { shared } from "./kinds.js";
import { eventsOf, type ForeignRecord, foreignView, isForeign, type LogRecord } from "./log-records.js";
import type { ImageInfo } from "./pool-backend.js";
import { groupHead, snapshotView, volumeView } from "./records.js";
import { nameState } from "./reservation.js";

// ------------------------------------------------------------------ replay

/** A point of the log: up to a stream sequence, or the longest prefix whose events are not later than a time. */
export type Point = { seq: number } | { time: number };

export function pointOf(at: LogPoint): Point {
  return typeof at === "number" ? { seq: at } : { time: Date.parse(at) };
}

/** What a replay has folded: the states, and the last event folded. */
export interface Replayed {
  states: States;
  upTo: { seq: number; time?: string };
}

export const emptyReplay = (): Replayed => ({ states: new Map(), upTo: { seq: 0 } });

/**
 * Fold `events` (in log order, continuing `r`) while they are within `at`; returns false at the
 * first one past it (the caller stops reading there). The streaming form of `replayAt`. A foreign
 * record has no time: it never ends a prefix by time; `upTo` is the last event folded.
 */
export function replayInto(r: Replayed, events: Iterable<LogRecord>, at: Point): boolean {
  const inside: LogRecord[] = [];
  let more = true;
  for (const e of events) {
    if ("seq" in at ? e.seq > at.seq : !isForeign(e) && Date.parse(e.event.time) > at.time) {
      more = false;
      break;
    }
    inside.push(e);
  }
  foldInto(r.states, inside);
  const last = eventsOf(inside).at(-1);
  if (last) r.upTo = { seq: last.seq, time: last.event.time };
  return more;
}

/** The state of everything `events` (a log, or one aggregate's part of it) say, at `at`. */
export function replayAt(events: Iterable<LogRecord>, at: Point): Replayed {
  const r = emptyReplay();
  replayInto(r, events, at);
  return r;
}

const isRecord = (s: Aggregate): s is RecordState => s.kind !== "name";

/** A record state as a replay shows it. */
export function replayEntry(s: RecordState): ReplayEntry {
  const head = { kind: s.kind, uuid: s.uuid, status: statusOf(s), seq: s.seq };
  switch (s.kind) {
    case "volume":
      return s.record ? { ...head, volume: volumeView(s.record) } : head;
    case "snapshot":
      return s.record ? { ...head, snapshot: snapshotView(s.record) } : head;
    case "groupsnapshot":
      return s.record ? { ...head, groupSnapshot: { ...groupHead(s.record), members: s.record.members } } : head;
  }
}

/**
 * The entries of a replay, by uuid: with `uuid`, that aggregate whatever its status; else every
 * live one after `after` (a paging token).
 */
export function replayEntries(states: States, opts: { uuid?: string; after?: string }): ReplayEntry[] {
  const records = [...states.values()].filter(isRecord);
  const chosen = opts.uuid ? records.filter((s) => s.uuid === opts.uuid) : records.filter((s) => s.record && (!opts.after || s.uuid > opts.after));
  return chosen.sort((a, b) => (a.uuid < b.uuid ? -1 : a.uuid > b.uuid ? 1 : 0)).map(replayEntry);
}

// ------------------------------------------------------------------ verify

/** A node whose last heartbeat is older than this many of its heartbeat intervals has stopped. */
export const STALE_HEARTBEATS = 3;

export interface Heartbeat {
  time: string;
  heartbeatMs: number;
}

export interface Observed {
  /** The log folded to its end. */
  states: States;
  /** The images of every pool, by pool name, listed BEFORE the log was folded (so every image's reservation is in the fold). */
  images: Map<string, ImageInfo[]>;
  /** Projection keys that differ from the fold. */
  drift: string[];
  /** The last registration of every node a claim names (undefined: none). */
  heartbeats: Map<string, Heartbeat | undefined>;
  now: number;
  olderThanMs: number;
  /** The foreign records the fold skipped, in log order. */
  foreign?: ForeignRecord[];
}

/** The image records of a fold by pool and image name: the images that must exist. */
function imageOwners(states: States): Map<string, Map<string, RecordState<"volume" | "snapshot">>> {
  const owners = new Map<string, Map<string, RecordState<"volume" | "snapshot">>>();
  for (const s of states.values()) {
    if ((s.kind !== "volume" && s.kind !== "snapshot") || !s.record) continue;
    const pool = owners.get(s.record.pool) ?? new Map();
    owners.set(s.record.pool, pool);
    pool.set(s.record.imageName, s);
  }
  return owners;
}

/** Every finding, in a stable order: leaked images, orphaned reservations, missing images, drift, stale claims, foreign records (by sequence). */
export function inspect(o: Observed): Finding[] {
  const owners = imageOwners(o.states);
  const leaked: Finding[] = [];
  const orphaned: Finding[] = [];
  const missing: Finding[] = [];
  for (const [pool, images] of o.images) {
    const mine = owners.get(pool) ?? new Map();
    for (const img of images) {
      if (!mine.has(img.name)) leaked.push({ type: "leakedImage", pool, imageName: img.name, imageId: img.id, sizeBytes: img.sizeBytes });
    }
  }
  for (const [pool, recs] of owners) {
    const listed = o.images.get(pool);
    if (!listed) continue; // a pool this journal does not serve: nothing to compare with
    const present = new Set(listed.map((i) => i.name));
    for (const s of recs.values()) {
      const r = s.record;
      if (!r || present.has(r.imageName)) continue;
      const head = { kind: s.kind as Kind, uuid: s.uuid, name: r.name, pool, imageName: r.imageName };
      if (r.imageId) missing.push({ type: "missingImage", ...head });
      else if (isOld(r.createdAt, o)) orphaned.push({ type: "orphanedReservation", ...head, reservedAt: r.createdAt });
    }
  }
  const stale: Finding[] = [];
  for (const s of o.states.values()) {
    if (s.kind !== "volume" || !s.record) continue;
    for (const c of s.record.claims) {
      const hb = o.heartbeats.get(c.nodeId);
      if (!hb || o.now - Date.parse(hb.time) > STALE_HEARTBEATS * hb.heartbeatMs) {
        stale.push({ type: "staleClaim", uuid: s.uuid, nodeId: c.nodeId, ...(hb ? { lastHeartbeat: hb.time } : {}) });
      }
    }
  }
  const byKey = (f: Finding) => ("uuid" in f ? f.uuid : "imageName" in f ? `${f.pool}/${f.imageName}` : "key" in f ? f.key : "");
  const sorted = (l: Finding[]) => l.sort((a, b) => (byKey(a) < byKey(b) ? -1 : byKey(a) > byKey(b) ? 1 : 0));
  const drift = o.drift.map((key): Finding => ({ type: "projectionDrift", key }));
  const foreign = (o.foreign ?? []).map((r): Finding => ({ type: "foreignRecord", ...foreignView(r) }));
  return [...sorted(leaked), ...sorted(orphaned), ...sorted(missing), ...drift, ...sorted(stale), ...foreign];
}

/** A reservation made before the threshold (an unreadable time counts as old: it cannot be younger). */
function isOld(createdAt: string, o: { now: number; olderThanMs: number }): boolean {
  const t = Date.parse(createdAt);
  return Number.isNaN(t) || o.now - t > o.olderThanMs;
}

export function countFindings(findings: Finding[]) {
  const n = (t: Finding["type"]) => findings.filter((f) => f.type === t).length;
  return {
    leakedImages: n("leakedImage"),
    orphanedReservations: n("orphanedReservation"),
    missingImages: n("missingImage"),
    projectionDrift: n("projectionDrift"),
    staleClaims: n("staleClaim"),
    foreignRecords: n("foreignRecord"),
  };
}

/** Node ids that claims of a fold name. */
export function claimedNodes(states: States): string[] {
  const ids = new Set<string>();
  for (const s of states.values()) if (s.kind === "volume" && s.record) for (const c of s.record.claims) ids.add(c.nodeId);
  return [...ids].sort();
}

// ------------------------------------------------------------------ gc

/** The aggregate an image is named after (`csi-vol-<uuid>`, `csi-snap-<uuid>`), if it is one of ours. */
export function imageOwner(imageName: string): { kind: "volume" | "snapshot"; uuid: string } | undefined {
  const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  for (const [prefix, kind] of [
    [VOLUME_IMAGE_PREFIX, "volume"],
    [SNAPSHOT_IMAGE_PREFIX, "snapshot"],
  ] as const) {
    if (imageName.startsWith(prefix) && uuid.test(imageName) && imageName.length === prefix.length + 36) return { kind, uuid: imageName.slice(prefix.length) };
  }
  return undefined;
}

/** What gc would do about the findings (leaked images and orphaned reservations; never anything else). */
export function gcPlan(findings: Finding[]): GcAction[] {
  return findings.flatMap((f): GcAction[] => {
    if (f.type === "leakedImage") {
      const owner = imageOwner(f.imageName);
      return [{ type: "removeLeakedImage", pool: f.pool, imageName: f.imageName, ...(owner ?? {}), outcome: "planned" }];
    }
    if (f.type === "orphanedReservation")
      return [{ type: "collectReservation", pool: f.pool, imageName: f.imageName, kind: f.kind, uuid: f.uuid, outcome: "planned" }];
    return [];
  });
}

/**
 * Whether a leaked image may still be removed, re-checked under its locks: its aggregate (if the
 * image is named after one) must not live, and so holds no claims; and the image must still be there.
 */
export function mayRemoveImage(owner: Aggregate | undefined, image: ImageInfo | undefined): string | undefined {
  if (!image) return "the image is gone";
  if (owner && owner.kind !== "name" && owner.record) return `${owner.kind} ${owner.uuid} owns it now`;
  return undefined;
}

/**
 * Whether a reservation may still be collected, re-checked under its locks: it lives, its image
 * was never made and is not in the pool, and it is older than the threshold.
 */
export function mayCollect(s: RecordState | undefined, image: ImageInfo | undefined, o: { now: number; olderThanMs: number }): string | undefined {
  const r = s?.record;
  if (!r) return "the reservation is gone";
  if (!("imageName" in r)) return "not an image reservation";
  if (r.imageId) return "its image was made";
  if (image) return "its image exists now";
  if ("claims" in r && r.claims.length > 0) return "it has claims";
  if (!isOld(r.createdAt, o)) return "it is younger than the threshold";
  return undefined;
}

/** gc: remove a leaked image under its lock (and its aggregate's, if named after one; re-checked from the log), then ImageLeakCollected. */
export function removeLeakedImage(requestId: string, action: GcAction): Command<GcAction> {
  const owner = imageOwner(action.imageName);
  const ref = { pool: action.pool, imageName: action.imageName };
  return {
    requestId,
    first: { locks: [{ kind: "image", ...ref }, ...(owner ? [owner] : [])], ...(owner ? { fromLog: [owner] } : {}) },
    decide: (v) => {
      const [done] = v.appended;
      if (done) return { reply: { ...action, outcome: "done", seq: done.seq } };
      const image = v.image(ref);
      if (image === undefined) return { stat: [ref] };
      const refused = mayRemoveImage(owner ? v.state(owner) : undefined, image ?? undefined);
      if (refused || !image) return { reply: { ...action, outcome: "skipped", reason: refused } };
      const reason = "in the pool without a reservation (audit.gc)";
      return {
        act: {
          effects: [{ op: "delete", ...ref }],
          events: [{ type: "ImageLeakCollected", pool: action.pool, imageName: image.name, imageId: image.id, sizeBytes: image.sizeBytes, reason }],
        },
      };
    },
  };
}

/** gc: collect an orphaned reservation under its uuid's and its name's locks: ReservationCollected (+ NameReleased). */
export function collectReservation(requestId: string, action: GcAction, o: { now: number; olderThanMs: number }): Command<GcAction> {
  const me: Address = { kind: action.kind as "volume" | "snapshot", uuid: action.uuid as string };
  const kind = me.kind as "volume" | "snapshot";
  return {
    requestId,
    first: { locks: [{ kind, uuid: me.uuid }], states: [me] },
    decide: (v) => {
      const [done] = v.appended;
      if (done) return { reply: { ...action, outcome: "done", seq: done.seq } };
      const state = v.state(me) as RecordState | undefined;
      const record = state?.record;
      if (!record) return { reply: { ...action, outcome: "skipped", reason: "the reservation is gone" } };
      const name: Address = { kind: "name", of: kind, name: record.name };
      if (!v.has(name)) return { read: { locks: [{ kind: "name", of: kind, name: record.name }], states: [name] } };
      const ref = { pool: record.pool, imageName: action.imageName };
      const image = v.image(ref);
      if (image === undefined) return { stat: [ref] };
      const refused = mayCollect(state, image ?? undefined, o);
      if (refused) return { reply: { ...action, outcome: "skipped", reason: refused } };
      const reason = "reserved without an image past the threshold (audit.gc)";
      const release = nameState(v, kind, record.name)?.uuid === me.uuid ? [shared.nameReleased(kind, record.name, me.uuid)] : [];
      return { act: { events: [{ type: "ReservationCollected", kind, uuid: me.uuid, reason }, ...release] } };
    },
  };
}
