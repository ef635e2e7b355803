/**
 * Audit, pure: the state at a point of the log (replay) and what `verify` finds, both from the
 * fold (evolve.ts) alone; what `gc` may act on. No I/O: the app reads the log, the pools and the
 * node registrations, and hands them in.
 */
import type { Finding, GcAction, ImageOwnerView, Kind, ReplayEntry } from "@csi/contracts";
import { type Command, nameState } from "../commands/index.js";
import { type Address, type Aggregate, addressKey, liveRecord, type RecordState, type States, statusOf } from "../fold/evolve.js";
import { imageOwner, shared } from "../fold/kinds.js";
import { type ForeignRecord, foreignView } from "../fold/log-record.js";
import { groupHead, snapshotView, volumeView } from "../fold/records.js";
import type { ImageInfo, ImageOwner, Leftover } from "../pools/port.js";

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
  /** The volumes the node held by its own state at `time` (its registration's `holding`), where it says. */
  holding?: readonly string[];
}

export interface Observed {
  /** The log folded to its end. */
  states: States;
  /** The images of every pool, by pool name, listed BEFORE the log was folded (so every image's reservation is in the fold). */
  images: Map<string, ImageInfo[]>;
  /** What of the projection differs from the fold, named (projection/port.ts `differenceName`: an aggregate, or an index's entry of it). */
  drift: string[];
  /** The last registration of every node a claim names (undefined: none). */
  heartbeats: Map<string, Heartbeat | undefined>;
  now: number;
  olderThanMs: number;
  /** The foreign records the fold skipped, in log order. */
  foreign?: ForeignRecord[];
  /** The cluster verifying: an image another cluster's metadata names is not its to judge. */
  clusterID?: string;
  /** Pools whose every image made by this driver carries its owner (RBD): an image there without one is foreign. */
  marksOwners?: ReadonlySet<string>;
  /** The log each pool is bound to, by pool name (pools whose images carry it): an image of another log is foreign. */
  logs?: ReadonlyMap<string, string>;
  /** Trash entries and temporaries per pool (pools that have them), listed with the images. */
  leftovers?: Map<string, Leftover[]>;
  /** What each node says it holds (its registration: volume uuids as of `time`), for stray devices. */
  holdings?: readonly { nodeId: string; time: string; holding?: readonly string[] }[];
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

/** What an image's owner metadata says, as a finding (and audit.images) shows it. */
export const ownerView = (o: Partial<ImageOwner> | undefined): { owner?: ImageOwnerView } =>
  o
    ? {
        owner: {
          ...(o.kind ? { kind: o.kind } : {}),
          ...(o.uuid ? { uuid: o.uuid } : {}),
          ...(o.name ? { name: o.name } : {}),
          ...(o.clusterID ? { cluster: o.clusterID } : {}),
          ...(o.log ? { log: o.log } : {}),
        },
      }
    : {};

/** What makes an image of a pool this cluster's to judge (foreignWhy). */
export interface Ours {
  /** The pool's every image made by this driver carries its owner (RBD). */
  marksOwners: boolean;
  clusterID?: string;
  /** The identity of the log the pool is bound to (pools that write it on their images). */
  log?: string;
}

/** Ours for one pool of `o`. */
const oursIn = (o: Pick<Observed, "marksOwners" | "clusterID" | "logs">, pool: string): Ours => ({
  marksOwners: o.marksOwners?.has(pool) ?? false,
  ...(o.clusterID ? { clusterID: o.clusterID } : {}),
  ...(o.logs?.get(pool) ? { log: o.logs.get(pool) } : {}),
});

/**
 * Why an image no record owns is not this cluster's to judge, or undefined: on a pool whose images
 * carry their owner, one without (made by someone else: never touched), another cluster's, or one
 * made under another event log (the pool's log lost and rebound, another stack's log).
 */
export function foreignWhy(owner: Partial<ImageOwner> | undefined, ours: Ours): string | undefined {
  if (!ours.marksOwners) return undefined;
  if (!owner) return "it carries no owner metadata of this driver";
  if (owner.clusterID && ours.clusterID && owner.clusterID !== ours.clusterID) return `its metadata names cluster ${JSON.stringify(owner.clusterID)}`;
  if (owner.log && ours.log && owner.log !== ours.log) return `its metadata names event log ${JSON.stringify(owner.log)}, not this pool's`;
  return undefined;
}

/** Trash entries nothing needs (this cluster's, or unnamed) and temporaries older than the threshold; foreign temporaries apart. */
function leftoverFindings(o: Observed): { left: Finding[]; foreign: Finding[] } {
  const left: Finding[] = [];
  const foreign: Finding[] = [];
  for (const [pool, entries] of o.leftovers ?? []) {
    for (const l of entries) {
      const head = { pool, imageName: l.name, imageId: l.id, sizeBytes: l.sizeBytes };
      const why = foreignWhy(l.owner, oursIn(o, pool));
      if (l.kind === "trash") {
        // Marked by a journal when it deleted the image (another cluster's purges its own); one clones still read from waits for them;
        // one in quarantine (gc's removal on a file pool) until its retention ends.
        const kept = l.neededByClones || (l.keepUntil !== undefined && l.keepUntil > o.now);
        if ((!why || !l.owner) && !kept) left.push({ type: "trashedImage", ...head, deletedAt: iso(l.since), ...ownerView(l.owner) });
      } else if (why) foreign.push({ type: "foreignImage", ...head, reason: why });
      else if (o.now - l.since > o.olderThanMs) left.push({ type: "tempImage", ...head, createdAt: iso(l.since), ...ownerView(l.owner) });
    }
  }
  return { left, foreign };
}

const iso = (ms: number) => (Number.isFinite(ms) ? new Date(ms).toISOString() : "");

/**
 * Every finding, in a stable order: leaked images, orphaned reservations, missing images, drift,
 * stale claims, foreign records (by sequence), then what only some pools have: foreign images,
 * trash entries, temporaries.
 */
export function inspect(o: Observed): Finding[] {
  const owners = imageOwners(o.states);
  const leaked: Finding[] = [];
  const foreignImages: Finding[] = [];
  const orphaned: Finding[] = [];
  const missing: Finding[] = [];
  const sized: Finding[] = [];
  for (const [pool, images] of o.images) {
    const mine = owners.get(pool) ?? new Map();
    for (const img of images) {
      if (mine.has(img.name)) continue;
      const head = { pool, imageName: img.name, imageId: img.id, sizeBytes: img.sizeBytes };
      const why = foreignWhy(img.owner, oursIn(o, pool));
      if (why) foreignImages.push({ type: "foreignImage", ...head, reason: why });
      else leaked.push({ type: "leakedImage", ...head, ...ownerView(img.owner) });
    }
  }
  for (const [pool, recs] of owners) {
    const listed = o.images.get(pool);
    if (!listed) continue; // a pool this journal does not serve: nothing to compare with
    const present = new Set(listed.map((i) => i.name));
    for (const s of recs.values()) {
      const r = s.record;
      if (!r) continue;
      const head = { kind: s.kind as Kind, uuid: s.uuid, name: r.name, pool, imageName: r.imageName };
      const made = present.has(r.imageName);
      if (r.imageId) {
        if (!made) missing.push({ type: "missingImage", ...head });
        const image = listed.find((i) => i.name === r.imageName);
        if (image && image.sizeBytes !== r.sizeBytes) sized.push({ type: "imageSizeDiffers", ...head, recordBytes: r.sizeBytes, imageBytes: image.sizeBytes });
      } else if (isOld(r.createdAt, o)) {
        // Never completed: the image never made, or made and never recorded (its journal died in between).
        orphaned.push({ type: "orphanedReservation", ...head, reservedAt: r.createdAt, ...(made ? { imageMade: true } : {}) });
      }
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
  const left = leftoverFindings(o);
  return [
    ...sorted(leaked),
    ...sorted(orphaned),
    ...sorted(missing),
    ...sorted(sized),
    ...strayDevices(o),
    ...drift,
    ...sorted(stale),
    ...foreign,
    ...sorted([...foreignImages, ...left.foreign]),
    ...sorted(left.left),
  ];
}

/** Volumes a node says it holds (its registration) that this log has no live record of; each node's, in uuid order. */
function strayDevices(o: Observed): Finding[] {
  const out: Finding[] = [];
  const mine = `${o.clusterID ?? ""}/`;
  for (const h of o.holdings ?? []) {
    const uuids = (h.holding ?? []).filter((k) => k.startsWith(mine)).map((k) => k.slice(mine.length));
    for (const uuid of uuids.sort()) {
      const s = o.states.get(addressKey({ kind: "volume", uuid }));
      if (!s || s.kind === "name" || !s.record) out.push({ type: "strayDevice", nodeId: h.nodeId, uuid, since: h.time });
    }
  }
  return out;
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
    // Only pools with owner metadata, a trash or temporaries have these: counted when there are any.
    ...(n("foreignImage") ? { foreignImages: n("foreignImage") } : {}),
    ...(n("trashedImage") ? { trashedImages: n("trashedImage") } : {}),
    ...(n("tempImage") ? { tempImages: n("tempImage") } : {}),
    ...(n("imageSizeDiffers") ? { imagesOfAnotherSize: n("imageSizeDiffers") } : {}),
    ...(n("strayDevice") ? { strayDevices: n("strayDevice") } : {}),
  };
}

/** Node ids that claims of a fold name. */
export function claimedNodes(states: States): string[] {
  const ids = new Set<string>();
  for (const s of states.values()) if (s.kind === "volume" && s.record) for (const c of s.record.claims) ids.add(c.nodeId);
  return [...ids].sort();
}

// ------------------------------------------------------------------ gc

/**
 * What gc needs to prove a leaked image abandoned (docs/operations.md, "gc removes only with
 * proof"): when each was made, since when each pool's images no record names may be this log's
 * (its binding, the log's restore), the uuids a node ever reported a device of, and the grace.
 */
export interface LeakProof {
  /** Image creation times by `pool/imageName` (epoch ms; absent: unknown). */
  createdAt: ReadonlyMap<string, number>;
  trustedSince: ReadonlyMap<string, number>;
  /** Uuids some node reported a device state of. */
  reported: ReadonlySet<string>;
  now: number;
  graceMs: number;
}

/**
 * Why a leaked image is kept (not provably an abandoned create of this log), or undefined when gc
 * may remove it: named after one of our aggregates; no event of the log ever names its uuid; made
 * after its pool was bound to this log and after any restore, and longer ago than the grace; and
 * no node ever reported a device of it. Pure.
 */
export function whyKeepLeak(f: { pool: string; imageName: string }, states: States, p: LeakProof): string | undefined {
  const owner = imageOwner(f.imageName);
  if (!owner) return "not named after a volume or snapshot of this driver";
  if (states.has(addressKey(owner))) return `the log names ${owner.kind} ${owner.uuid}`;
  const made = p.createdAt.get(`${f.pool}/${f.imageName}`);
  if (made === undefined) return "its pool does not tell when it was made";
  const since = p.trustedSince.get(f.pool) ?? Number.POSITIVE_INFINITY;
  if (made <= since)
    return `made before ${Number.isFinite(since) ? new Date(since).toISOString() : "its pool was bound"}, when its pool was bound to this log or the log restored: it may be another log's, or a volume the log lost`;
  if (p.now - made <= p.graceMs) return `younger than the grace period (${Math.round(p.graceMs / 60_000)} min): a create may still answer with it`;
  if (p.reported.has(owner.uuid)) return "a node reported a device of it";
  return undefined;
}

/**
 * What gc would do about the findings: leaked images proven abandoned (`proof`; the others listed
 * as skipped, with the reason they are kept), orphaned reservations, trash entries nothing needs,
 * temporaries whose build cannot be running (its aggregate ended or made: a reservation not made
 * yet is collected instead, with its temporaries). Never anything else: no foreign image.
 */
export function gcPlan(findings: Finding[], states: States = new Map(), proof?: LeakProof): GcAction[] {
  return findings.flatMap((f): GcAction[] => {
    switch (f.type) {
      case "leakedImage": {
        const action = { type: "removeLeakedImage" as const, pool: f.pool, imageName: f.imageName, ...(imageOwner(f.imageName) ?? {}) };
        const kept = proof && whyKeepLeak(f, states, proof);
        return [kept ? { ...action, outcome: "skipped", reason: `kept: ${kept}` } : { ...action, outcome: "planned" }];
      }
      case "orphanedReservation":
        return [{ type: "collectReservation", pool: f.pool, imageName: f.imageName, kind: f.kind, uuid: f.uuid, outcome: "planned" }];
      case "trashedImage":
        return [{ type: "purgeTrash", pool: f.pool, imageName: f.imageName, imageId: f.imageId, outcome: "planned" }];
      case "tempImage": {
        const kind = (["volume", "snapshot"] as const).find((k) => k === f.owner?.kind);
        const owner = kind && f.owner?.uuid ? { kind, uuid: f.owner.uuid } : undefined;
        if (owner && buildMayRun(states, owner)) return [];
        return [{ type: "removeTempImage", pool: f.pool, imageName: f.imageName, imageId: f.imageId, ...(owner ?? {}), outcome: "planned" }];
      }
      default:
        return [];
    }
  });
}

/** A build of this aggregate's image may still run (or resume): it is reserved and not made. */
function buildMayRun(states: States, a: { kind: "volume" | "snapshot"; uuid: string }): boolean {
  const r = liveRecord(states.get(addressKey(a)), a.kind);
  return r !== undefined && !r.imageId;
}

/**
 * Whether a leaked image may still be removed, re-checked under its locks: its aggregate (if the
 * image is named after one) must not live, and so holds no claims; and the image must still be there.
 */
export function mayRemoveImage(owner: Aggregate | undefined, image: ImageInfo | undefined, foreign: Ours = { marksOwners: false }): string | undefined {
  if (!image) return "the image is gone";
  if (owner && owner.kind !== "name" && owner.record) return `${owner.kind} ${owner.uuid} owns it now`;
  if (owner && owner.kind !== "name") return `the log names ${owner.kind} ${owner.uuid}`;
  const why = foreignWhy(image.owner, foreign);
  return why && `not this cluster's: ${why}`;
}

/**
 * Whether a reservation may still be collected, re-checked under its locks: it lives, its image
 * was never recorded (never made, or made by a journal that died before recording it: it goes
 * with the reservation), and it is older than the threshold.
 */
export function mayCollect(s: RecordState | undefined, o: { now: number; olderThanMs: number }): string | undefined {
  const r = s?.record;
  if (!r) return "the reservation is gone";
  if (!("imageName" in r)) return "not an image reservation";
  if (r.imageId) return "its image was made";
  if ("claims" in r && r.claims.length > 0) return "it has claims";
  if (!isOld(r.createdAt, o)) return "it is younger than the threshold";
  return undefined;
}

/** gc: remove a leaked image under its lock (and its aggregate's, if named after one; re-checked from the log), then ImageLeakCollected. */
export function removeLeakedImage(requestId: string, action: GcAction): Command<GcAction, "looked" | "removed"> {
  const owner = imageOwner(action.imageName);
  const ref = { pool: action.pool, imageName: action.imageName };
  return {
    requestId,
    first: {
      locks: [{ kind: "image", ...ref }, ...(owner ? [owner] : [])],
      ...(owner ? { fromLog: [owner], ...(owner.kind === "volume" ? { devices: [owner.uuid] } : {}) } : {}),
    },
    decide: (v, ctx) => {
      // What landed is the answer (its sequence), also when a failed step landed part of it.
      const [done] = v.appended;
      if (done) return { reply: { ...action, outcome: "done", seq: done.seq } };
      if (owner?.kind === "volume" && (v.devices(owner.uuid)?.reported ?? 0) > 0)
        return { reply: { ...action, outcome: "skipped", reason: "kept: a node reported a device of it" } };
      if (v.phase !== "looked") return { stat: [ref], phase: "looked" };
      const image = v.image(ref);
      const pool = ctx.pools.get(action.pool);
      const foreign: Ours = { marksOwners: pool?.marksOwners ?? false, clusterID: ctx.cluster.clusterID, ...(pool?.boundLog ? { log: pool.boundLog } : {}) };
      const refused = mayRemoveImage(owner ? v.state(owner) : undefined, image ?? undefined, foreign);
      if (refused || !image) return { reply: { ...action, outcome: "skipped", reason: refused } };
      const reason = "in the pool without a reservation (audit.gc)";
      return {
        act: {
          effects: [{ op: "delete", ...ref, quarantine: true }],
          events: [{ type: "ImageLeakCollected", pool: action.pool, imageName: image.name, imageId: image.id, sizeBytes: image.sizeBytes, reason }],
        },
        phase: "removed",
      };
    },
  };
}

/** gc: collect an orphaned reservation under its uuid's and its name's locks: ReservationCollected (+ NameReleased). */
export function collectReservation(
  requestId: string,
  action: GcAction,
  o: { now: number; olderThanMs: number },
): Command<GcAction, "nameRead" | "looked" | "collected"> {
  const me: Address = { kind: action.kind as "volume" | "snapshot", uuid: action.uuid as string };
  const kind = me.kind as "volume" | "snapshot";
  return {
    requestId,
    first: { locks: [{ kind, uuid: me.uuid }], states: [me] },
    decide: (v) => {
      // What landed is the answer (its sequence), also when a failed step landed part of it.
      const [done] = v.appended;
      if (done) return { reply: { ...action, outcome: "done", seq: done.seq } };
      const state = v.state(me) as RecordState | undefined;
      const record = state?.record;
      if (!record) return { reply: { ...action, outcome: "skipped", reason: "the reservation is gone" } };
      const name: Address = { kind: "name", of: kind, name: record.name };
      if (!v.has(name)) return { read: { locks: [{ kind: "name", of: kind, name: record.name }], states: [name] }, phase: "nameRead" };
      const ref = { pool: record.pool, imageName: action.imageName };
      if (v.phase !== "looked") return { stat: [ref], phase: "looked" };
      const image = v.image(ref);
      const refused = mayCollect(state, o);
      if (refused) return { reply: { ...action, outcome: "skipped", reason: refused } };
      const reason = image ? "its image made and never recorded, past the threshold (audit.gc)" : "reserved without an image past the threshold (audit.gc)";
      const release = nameState(v, kind, record.name)?.uuid === me.uuid ? [shared.nameReleased(kind, record.name, me.uuid)] : [];
      // The image (made and never recorded), and what an interrupted build left of it, go first.
      return {
        act: { effects: [{ op: "delete", ...ref, quarantine: true }], events: [{ type: "ReservationCollected", kind, uuid: me.uuid, reason }, ...release] },
        phase: "collected",
      };
    },
  };
}
