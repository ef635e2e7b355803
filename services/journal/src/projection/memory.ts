/**
 * The projection store in memory: what RedisStore (projection/redis/store.ts) does, observably, at the
 * port (projection/port.ts), without a server — for fast tests of the runner. It also states the
 * store's semantics in few lines (test/contracts/store.contract.ts holds both to them):
 *
 * - Locks are taken all or none, each with a token and a TTL (on the clock `now`); a lock held —
 *   by anyone, the same token too — is busy. Only its token renews or releases it.
 * - The projection holds each aggregate's last state: a write lands only if its sequence is newer
 *   than the one held (the guard). An ended record is kept as a tombstone (its sequence) for
 *   TOMBSTONE_TTL_MS; a name keeps its uuid (none once released) and its sequence.
 * - The indexes are the held states' (port.ts `indexesOf`): a kind's live records, the live
 *   snapshots of a source volume, the volumes a node holds claims on; paged in uuid order.
 * - The meta: the rebuild's epoch and log, the watermark `applied`, `complete`. An apply lands only
 *   on a complete projection, a replay batch only if it starts at or before the watermark (which
 *   moves up to its end); refused, it writes nothing (-1) and still releases the locks.
 * - A rebuild: a new epoch (refused over a complete projection unless forced, and the projection is
 *   then incomplete), a wipe, chunks of states written as they are, in order, on that epoch only
 *   (the last sets the watermark), complete once the watermark reached the log's end.
 * - Differences from the log are the aggregates whose states differ (a tombstone is none), and
 *   the indexes that list an aggregate the log's state would not (or the other way round).
 */
import { isDeepStrictEqual } from "node:util";
import { type Address, type Aggregate, addressKey, addressOfState, isEnded, type Trail } from "../fold/evolve.js";
import { expectedMeta, type ProjectionMeta, type RebuildOver } from "./meta.js";
import {
  type Difference,
  differenceName,
  type IndexOf,
  indexesOf,
  indexName,
  type JournalStore,
  type LockOn,
  type LockResult,
  lockKey,
  type Mark,
  type ProjectionIndex,
  type ReadPlan,
  type ReplayStep,
  type StateMap,
  sortedDifferences,
  TOMBSTONE_TTL_MS,
} from "./port.js";

export interface MemoryStoreOptions {
  /** The clock (ms) of lock TTLs and tombstones. */
  now?: () => number;
}

/** A state as compared: an ended record's tombstone is none (it expires). */
const compared = (s: Aggregate | undefined): Aggregate | undefined => (isEnded(s) ? undefined : s);

/** Whether two states are the same (as JSON holds them: an absent field and an undefined one are alike). */
const sameState = (a: Aggregate | undefined, b: Aggregate | undefined) =>
  isDeepStrictEqual(a && JSON.parse(JSON.stringify(a)), b && JSON.parse(JSON.stringify(b)));

/** Whether the state is in `index`. */
const listedIn = (s: Aggregate | undefined, index: ProjectionIndex) => indexesOf(compared(s)).some((i) => indexName(i) === indexName(index));

/** The differences of one aggregate: its state, and each index that lists it in one of the two states only. */
function differencesOf(want: Aggregate | undefined, have: Aggregate | undefined): Difference[] {
  const [w, h] = [compared(want), compared(have)];
  const s = w ?? h;
  if (!s) return [];
  const address = addressOfState(s);
  const out: Difference[] = sameState(w, h) ? [] : [{ address }];
  for (const index of [...indexesOf(w), ...indexesOf(h)]) if (listedIn(w, index) !== listedIn(h, index)) out.push({ address, index });
  return out;
}

/** The key of the cluster's rebuild lock (no LockOn's `lockKey` looks like it). */
const REBUILD = "rebuild";

export class MemoryStore implements JournalStore {
  readonly #now: () => number;
  readonly #locks = new Map<string, { token: string; until: number }>();
  /** Each aggregate's last state by `addressKey`; a tombstone until `until`. */
  readonly #states = new Map<string, { state: Aggregate; until?: number }>();
  /** The meta; `written`: the rebuild's chunks written so far. None: no projection at all. */
  #meta?: ProjectionMeta & { written: number };

  constructor(opts: MemoryStoreOptions = {}) {
    this.#now = opts.now ?? Date.now;
  }

  // ---------------------------------------------------------------- locks

  #take(key: string, token: string, ttlMs: number): boolean {
    const held = this.#locks.get(key);
    if (held && held.until > this.#now()) return false;
    this.#locks.set(key, { token, until: this.#now() + ttlMs });
    return true;
  }

  #renew(key: string, token: string, ttlMs: number): boolean {
    const held = this.#locks.get(key);
    if (!held || held.token !== token || held.until <= this.#now()) return false;
    held.until = this.#now() + ttlMs;
    return true;
  }

  #release(key: string, token: string): void {
    if (this.#locks.get(key)?.token === token) this.#locks.delete(key);
  }

  async lockAndRead(token: string, ttlMs: number, plan: ReadPlan): Promise<LockResult> {
    const taken: string[] = [];
    for (const l of plan.locks ?? []) {
      if (!this.#take(lockKey(l), token, ttlMs)) {
        for (const k of taken) this.#locks.delete(k);
        return { ok: false, busy: l };
      }
      taken.push(lockKey(l));
    }
    const states = this.#read(plan.states ?? []);
    // `follow`: the record the plan's first name points at.
    const name = plan.follow ? plan.states?.find((a) => a.kind === "name") : undefined;
    const named = name && states.get(addressKey(name));
    if (name?.kind === "name" && named?.kind === "name" && named.uuid) {
      for (const [k, s] of this.#read([{ kind: name.of, uuid: named.uuid }])) states.set(k, s);
    }
    // `ownName`: the request name of the plan's first record, locked and read.
    const first = plan.ownName ? plan.states?.find((a) => a.kind !== "name") : undefined;
    const owner = first && states.get(addressKey(first));
    const ownName = owner && owner.kind !== "name" && owner.record ? { kind: "name" as const, of: owner.kind, name: owner.record.name } : undefined;
    if (ownName) {
      if (!this.#take(lockKey(ownName), token, ttlMs)) {
        for (const k of taken) this.#locks.delete(k);
        return { ok: false, busy: ownName };
      }
      for (const [k, s] of this.#read([ownName])) states.set(k, s);
    }
    const nodeClaims = new Map((plan.nodeClaims ?? []).map((n) => [n, this.#index({ claimsOf: n }).length]));
    return { ok: true, read: { complete: this.#meta?.complete === true, states, nodeClaims, ...(ownName ? { locked: [ownName] } : {}) } };
  }

  async renew(lock: LockOn, token: string, ttlMs: number): Promise<boolean> {
    return this.#renew(lockKey(lock), token, ttlMs);
  }

  async tryRebuildLock(token: string, ttlMs: number): Promise<boolean> {
    return this.#take(REBUILD, token, ttlMs);
  }

  async renewRebuildLock(token: string, ttlMs: number): Promise<boolean> {
    return this.#renew(REBUILD, token, ttlMs);
  }

  async releaseRebuildLock(token: string): Promise<void> {
    this.#release(REBUILD, token);
  }

  // ---------------------------------------------------------------- states

  /** The state held for `key` (an expired tombstone is gone). */
  #held(key: string): Aggregate | undefined {
    const h = this.#states.get(key);
    if (h?.until === undefined || h.until > this.#now()) return h?.state;
    this.#states.delete(key);
    return undefined;
  }

  #all(): Aggregate[] {
    return [...this.#states.keys()].flatMap((k) => this.#held(k) ?? []);
  }

  #put(s: Aggregate): void {
    this.#states.set(addressKey(addressOfState(s)), { state: structuredClone(s), ...(isEnded(s) ? { until: this.#now() + TOMBSTONE_TTL_MS } : {}) });
  }

  #read(addresses: Address[]): StateMap {
    return new Map(addresses.map((a) => [addressKey(a), structuredClone(this.#held(addressKey(a)))]));
  }

  /** Uuids in `index`, in order. */
  #index(index: ProjectionIndex): string[] {
    return this.#all()
      .flatMap((s) => (s.kind !== "name" && listedIn(s, index) ? [s.uuid] : []))
      .sort();
  }

  async applyAndUnlock(trails: Trail[], locks: LockOn[], token: string, marks: Mark[] = []): Promise<number> {
    for (const m of marks) this.#locks.set(lockKey(m.lock), { token: m.token, until: this.#now() + m.ttlMs });
    return this.#apply(trails, locks, token);
  }

  async marksOf(locks: LockOn[]): Promise<(string | undefined)[]> {
    return locks.map((l) => {
      const held = this.#locks.get(lockKey(l));
      return held && held.until > this.#now() ? held.token : undefined;
    });
  }

  async applyBatch(trails: Trail[], step: ReplayStep): Promise<number> {
    return this.#apply(trails, [], "", step);
  }

  async release(locks: LockOn[], token: string): Promise<void> {
    for (const l of locks) this.#release(lockKey(l), token);
  }

  #apply(trails: Trail[], locks: LockOn[], token: string, replay?: ReplayStep): number {
    const meta = this.#meta;
    const ok = meta?.complete === true && (!replay || meta.applied >= replay.prev);
    let applied = 0;
    if (ok) {
      for (const t of trails) {
        const after = t.states.at(-1);
        if (!after || after.seq <= (this.#held(addressKey(addressOfState(after)))?.seq ?? 0)) continue;
        this.#put(after);
        applied++;
      }
      if (replay) meta.applied = Math.max(meta.applied, replay.to);
    }
    for (const l of locks) this.#release(lockKey(l), token);
    return ok ? applied : -1;
  }

  async readStates(addresses: Address[]): Promise<StateMap> {
    return this.#read(addresses);
  }

  async completeStates(addresses: Address[]): Promise<StateMap | undefined> {
    return this.#meta?.complete ? this.#read(addresses) : undefined;
  }

  async completeIndexPage(index: IndexOf, after: string | undefined, count: number): Promise<string[] | undefined> {
    if (!this.#meta?.complete) return undefined;
    const uuids = this.#index(index).filter((u) => !after || u > after);
    return count > 0 ? uuids.slice(0, count) : uuids;
  }

  // ---------------------------------------------------------------- the projection's life

  async projectionMeta(): Promise<ProjectionMeta | undefined> {
    const m = this.#meta;
    return m && { epoch: m.epoch, log: m.log, applied: m.applied, complete: m.complete };
  }

  async projectionComplete(): Promise<boolean> {
    return this.#meta?.complete === true;
  }

  async beginRebuild(epoch: string, logId: string, over: RebuildOver): Promise<boolean> {
    const want = expectedMeta(over);
    if (want && ((this.#meta?.epoch ?? "") !== want.epoch || (this.#meta?.complete === true) !== want.complete)) return false;
    this.#meta = { epoch, log: logId, applied: 0, complete: false, written: 0 };
    return true;
  }

  async wipeProjection(): Promise<number> {
    const n = await this.recordCount();
    this.#states.clear();
    return n;
  }

  async writeFresh(epoch: string, chunk: number, states: Aggregate[], last?: number): Promise<boolean> {
    const m = this.#meta;
    if (!m || m.epoch !== epoch || m.complete || m.written !== chunk) return false;
    for (const s of states) this.#put(s);
    m.written++;
    if (last !== undefined) m.applied = last;
    return true;
  }

  async markComplete(epoch: string, last: number): Promise<boolean> {
    const m = this.#meta;
    if (!m || m.epoch !== epoch || m.applied < last) return false;
    m.complete = true;
    return true;
  }

  async recordCount(): Promise<number> {
    return this.#all().filter((s) => s.kind !== "name").length;
  }

  async differences(states: Iterable<Aggregate>, only?: Difference[]): Promise<Difference[]> {
    const want = new Map([...states].map((s) => [addressKey(addressOfState(s)), s]));
    if (only) {
      const asked = new Set(only.map(differenceName));
      const looked = only.flatMap((d) => differencesOf(want.get(addressKey(d.address)), this.#held(addressKey(d.address))));
      return sortedDifferences(looked.filter((d) => asked.has(differenceName(d))));
    }
    const keys = new Set([...want.keys(), ...this.#states.keys()]);
    return sortedDifferences([...keys].flatMap((k) => differencesOf(want.get(k), this.#held(k))));
  }
}
