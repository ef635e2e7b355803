/**
 * The projection store as the journal's app code sees it (a port): locks, and the projection of
 * the log read and written as domain states (fold/evolve.ts) — never as Redis hashes. It owns its
 * words: what a lock is on, what a read plan asks, the indexes it keeps, where it differs from the
 * log (addresses, never keys), the projection's meta (meta.ts). How the states are encoded (keys,
 * fields, functions, ACL) is the adapter's business: redis/ holds the Redis one (production);
 * memory.ts an in-memory one (fast tests). One contract suite (test/contracts/store.contract.ts)
 * proves them equal.
 */
import type { Kind } from "@csi/contracts";
import { type Address, type Aggregate, addressKey, type Trail } from "../fold/evolve.js";
import type { ProjectionMeta, RebuildOver } from "./meta.js";

export type { ProjectionMeta, RebuildOver } from "./meta.js";

/**
 * What a lock is taken on: a request name of a kind, an aggregate, an image of a pool (gc); a
 * request id while a run of it works (`request`), its mark once it was answered (`served`) and that
 * answer, kept a shorter while (`answer`) (commands/run-served.ts "A request is served once").
 */
export type LockOn =
  | { kind: "name"; of: Kind; name: string }
  | { kind: Kind; uuid: string }
  | { kind: "image"; pool: string; imageName: string }
  | { kind: "request" | "served" | "answer"; requestId: string };

export interface ReadPlan {
  /** Taken all or none, with a bounded wait (then Aborted); held to the end of the run. */
  locks?: LockOn[];
  /** Aggregates read (under the locks) from the projection. */
  states?: Address[];
  /** Also read the record each of these names points at (same round trip). */
  follow?: boolean;
  /**
   * Also lock and read the request name of the first record read (same round trip): a delete, which
   * knows only the uuid, holds the record and its name from its first read. The lock taken is in
   * the reading (`Reading.locked`).
   */
  ownName?: boolean;
  /** Nodes whose claim counts are read (ResourceExhausted past a node's maximum). */
  nodeClaims?: string[];
  /** Aggregates folded from their own subject of the log (what the projection has lost, or a fence check). */
  fromLog?: Address[];
  /** Volumes whose nodes' device reports are read from the log (View.devices): what the nodes hold of them. */
  devices?: string[];
}

export const lockKey = (l: LockOn) =>
  l.kind === "name"
    ? `name:${l.of}:${l.name}`
    : l.kind === "image"
      ? `image:${l.pool}:${l.imageName}`
      : "requestId" in l
        ? `${l.kind}:${l.requestId}`
        : addressKey({ kind: l.kind, uuid: l.uuid });

/** States by `addressKey` (undefined: the aggregate has none in the projection). */
export type StateMap = Map<string, Aggregate | undefined>;

export interface Reading {
  /** The projection is complete (not flushed, not half rebuilt): what was read can be trusted. */
  complete: boolean;
  /** The plan's states, and the records its names point at (`follow`). */
  states: StateMap;
  /** Volumes each node of the plan holds claims on. */
  nodeClaims: Map<string, number>;
  /** Locks taken besides the plan's (`ownName`: the record's name). */
  locked?: LockOn[];
}

export type LockResult = { ok: true; read: Reading } | { ok: false; busy: LockOn };

/** A catch-up batch: the watermark it continues from, its last seq. */
export interface ReplayStep {
  prev: number;
  to: number;
}

/** A paged index: a kind's live records, or the snapshots of one source volume. */
export type IndexOf = { kind: Kind } | { snapshotsOf: string };

/** An index the projection keeps of its live records: a paged one (IndexOf), or the volumes a node holds claims on. */
export type ProjectionIndex = IndexOf | { claimsOf: string };

/** How long a deleted aggregate's tombstone (its last seq) is kept, so old replays cannot resurrect it. */
export const TOMBSTONE_TTL_MS = 24 * 3600 * 1000;

/**
 * The indexes a state is in: a live record in its kind's, a live snapshot in its source volume's,
 * a live volume in each claiming node's. What every store's indexes hold is this of its states.
 */
export function indexesOf(s: Aggregate | undefined): ProjectionIndex[] {
  if (!s || s.kind === "name" || !s.record) return [];
  const out: ProjectionIndex[] = [{ kind: s.kind }];
  if (s.kind === "snapshot") out.push({ snapshotsOf: s.record.sourceUuid });
  if (s.kind === "volume") for (const c of s.record.claims) out.push({ claimsOf: c.nodeId });
  return out;
}

/** The kind of the records an index lists. */
export const indexedKind = (i: ProjectionIndex): Kind => ("kind" in i ? i.kind : "snapshotsOf" in i ? "snapshot" : "volume");

/** An index as a report names it. */
export const indexName = (i: ProjectionIndex): string =>
  "kind" in i ? `the ${i.kind} index` : "snapshotsOf" in i ? `the snapshots of volume ${i.snapshotsOf}` : `the claims of node ${i.claimsOf}`;

/**
 * Where the projection differs from the log: an aggregate's state (no `index`), or whether `index`
 * lists the aggregate (it does and the log says it should not, or the other way round).
 */
export interface Difference {
  address: Address;
  index?: ProjectionIndex;
}

/** A difference as reports name it (and stores sort them): the aggregate's addressKey, and the index. */
export const differenceName = (d: Difference): string => (d.index ? `${addressKey(d.address)} in ${indexName(d.index)}` : addressKey(d.address));

/** Differences in the order every store answers them: by name, each once. */
export function sortedDifferences(ds: Iterable<Difference>): Difference[] {
  const byName = new Map<string, Difference>();
  for (const d of ds) byName.set(differenceName(d), d);
  return [...byName.keys()].sort().map((n) => byName.get(n) as Difference);
}

/** A lock an operation's end sets (taken again: extended), with its own token and time to live. */
export interface Mark {
  lock: LockOn;
  token: string;
  ttlMs: number;
}

export interface CommandStore {
  /** Take every lock of `plan` (all or none) with `token` for `ttlMs`, and read the plan's states. */
  lockAndRead(token: string, ttlMs: number, plan: ReadPlan): Promise<LockResult>;
  /**
   * An operation's end: write each trail's last state (idempotently: a write older than what is
   * there does nothing) and release `locks` held with `token`, in one step, only onto a complete
   * projection. Returns how many writes ran, or -1 if the projection refused them (nothing
   * written; locks still released). `marks`: locks set in the same step, whatever the
   * projection's answer (a request marked served and its answer, commands/run-served.ts).
   */
  applyAndUnlock(trails: Trail[], locks: LockOn[], token: string, marks?: Mark[]): Promise<number>;
  /** The tokens that marks (or locks) hold now, in order (undefined: none, or expired). */
  marksOf(locks: LockOn[]): Promise<(string | undefined)[]>;
  /**
   * A catch-up batch: the trails' last states written as `applyAndUnlock` writes them, and the
   * watermark moved from `step.prev` to `step.to`, only onto a complete projection whose watermark
   * is at least `prev`. Returns how many writes ran, or -1 if refused (nothing written).
   */
  applyBatch(trails: Trail[], step: ReplayStep): Promise<number>;
  /** Release `locks` held with `token` (one held with another token is left alone); nothing written. */
  release(locks: LockOn[], token: string): Promise<void>;
  /** Extend a lock still held with `token`; false when it was lost. */
  renew(lock: LockOn, token: string, ttlMs: number): Promise<boolean>;
  /** States as the projection holds them, whatever its completeness. */
  readStates(addresses: Address[]): Promise<StateMap>;
  /** States read with the projection's complete mark: undefined when it is not complete. */
  completeStates(addresses: Address[]): Promise<StateMap | undefined>;
  /** Up to `count` uuids of an index after `after` (0: all), with the complete mark: undefined when not complete. */
  completeIndexPage(index: IndexOf, after: string | undefined, count: number): Promise<string[] | undefined>;
}

/** The projection's own life: its meta, rebuilds, and the start-up comparison with the log. */
export interface ProjectionStore {
  projectionMeta(): Promise<ProjectionMeta | undefined>;
  projectionComplete(): Promise<boolean>;
  /** The cluster's rebuild lock (one rebuild per cluster). */
  tryRebuildLock(token: string, ttlMs: number): Promise<boolean>;
  renewRebuildLock(token: string, ttlMs: number): Promise<boolean>;
  releaseRebuildLock(token: string): Promise<void>;
  /**
   * Start a rebuild's epoch: `"force"` whatever the projection is (an operator's rebuild); else
   * only over the projection the caller judged (`over`: its meta as read, undefined when there was
   * none) — refused when another rebuild began or finished since (its epoch or complete mark moved).
   */
  beginRebuild(epoch: string, logId: string, over: RebuildOver): Promise<boolean>;
  /** Remove the whole projection (its states and indexes; not the locks, not the meta); returns how many records it held (`recordCount`). */
  wipeProjection(): Promise<number>;
  /**
   * Chunk `chunk` of a rebuild's states, only on `epoch` after every chunk before it; the last sets
   * the watermark `last`. `written`: what this rebuild wrote before of aggregates it writes again
   * (by addressKey), which these states replace (projection/redis/writes.ts `freshWrites`).
   */
  writeFresh(epoch: string, chunk: number, states: Aggregate[], last?: number, written?: ReadonlyMap<string, Aggregate>): Promise<boolean>;
  /** The rebuild's last write: complete, if its epoch is still there and replayed up to `last`. */
  markComplete(epoch: string, last: number): Promise<boolean>;
  /** How many records (volumes, snapshots, group snapshots) the projection holds, ended ones' tombstones while they last; request names aside. */
  recordCount(): Promise<number>;
  /**
   * Where the projection differs from `states` (the whole log folded), looking at all of it, or
   * only at `only` (differences found before); in `sortedDifferences` order. A tombstone, held or
   * not, is no difference (it expires): an ended record and none are the same.
   */
  differences(states: Iterable<Aggregate>, only?: Difference[]): Promise<Difference[]>;
}

export type JournalStore = CommandStore & ProjectionStore;
