/**
 * Keeps the Redis projection equal to the event log: catches it up from its watermark, rebuilds
 * it from the first sequence when it is missing, half built, ahead of the log or from another
 * log, and checks it against the log at start-up.
 *
 * A rebuild cannot be left half done (docs/journal.md, "Rebuilds"): it takes the cluster's rebuild
 * lock (one rebuild per cluster; the lock is renewed while it runs), starts a new epoch in the
 * meta hash (which marks the projection incomplete, so no operation writes into it), wipes the
 * projection keys, folds the whole log in memory and writes each aggregate once, in chunks that
 * each apply only if the epoch is still its own and every chunk before it landed (the last one
 * sets the watermark), and writes `complete` last, on the same condition.
 * A FLUSHALL or a Redis restart anywhere in between removes or changes the epoch: the next batch
 * (or the complete mark) is refused and the rebuild starts over. Everything one process does to
 * the projection is single-flight: concurrent callers share one sync.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverError } from "@csi/contracts";
import { SentAhead } from "@csi/runtime";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { type Aggregate, addressKey, beforesNeeded, foldFrom, foldInto, foldStep, type States, type Trail } from "../fold/evolve.js";
import { type ForeignRecord, isForeign, type LogRecord } from "../fold/log-record.js";
import { type EventLog, FOLD_BATCH } from "../log/port.js";
import { judgeProjection } from "./meta.js";
import { type Difference, differenceName, type JournalStore } from "./port.js";

/**
 * A replay batch folded (once) into trails: each aggregate starts from its `known` state or,
 * when not known (and not started afresh by its first record), from what the projection holds
 * (read in one round trip, only if some are needed).
 */
async function foldBatch(
  store: JournalStore,
  records: LogRecord[],
  known: { has(key: string): boolean; get(key: string): Aggregate | undefined },
): Promise<Trail[]> {
  const read = await store.readStates(beforesNeeded(records, known));
  return foldFrom(records, (key) => (read.has(key) ? read.get(key) : known.get(key))).trails();
}

/**
 * The states a replay has folded so far (or read), most recent last, at most `max` of them: the
 * aggregates of the next batch start from here; one that fell out is read from Redis again.
 */
class StateCache {
  readonly #m = new Map<string, Aggregate | undefined>();
  constructor(private readonly max: number) {}
  has(key: string) {
    return this.#m.has(key);
  }
  get(key: string) {
    return this.#m.get(key);
  }
  set(key: string, s: Aggregate | undefined) {
    this.#m.delete(key);
    this.#m.set(key, s);
    if (this.#m.size > this.max) {
      for (const k of this.#m.keys()) {
        this.#m.delete(k);
        if (this.#m.size <= this.max * 0.9) break;
      }
    }
  }
}

/**
 * What a rebuild has changed and not written yet (by addressKey), each with what the rebuild
 * wrote of it before (null: nothing) — oldest first, as far as `take` keeps it so.
 */
class Unwritten {
  readonly #m = new Map<string, { was: Aggregate | null; at: number }>();
  #changes = 0;

  get size(): number {
    return this.#m.size;
  }

  /** `key` changed; `before`: its state before the change (if it was not waiting, that is what the rebuild wrote of it, or nothing). */
  changed(key: string, before: Aggregate | undefined): void {
    this.#changes++;
    const e = this.#m.get(key);
    if (e) e.at = this.#changes;
    else this.#m.set(key, { was: before ?? null, at: this.#changes });
  }

  /**
   * Up to `count` of them, oldest first, that none of the last `quiet` changes touched (0: any),
   * each with what was written of it before; they are no longer waiting. Those passed over for a
   * recent change go to the back. With `quiet` + `count` waiting, `count` are found: the last
   * `quiet` changes touched at most `quiet` of them.
   */
  take(count: number, quiet: number): [string, Aggregate | null][] {
    const out: [string, Aggregate | null][] = [];
    const recent: string[] = [];
    for (const [key, e] of this.#m) {
      if (out.length >= count) break;
      if (this.#changes - e.at < quiet) recent.push(key);
      else out.push([key, e.was]);
    }
    for (const [key] of out) this.#m.delete(key);
    for (const key of recent) {
      const e = this.#m.get(key);
      this.#m.delete(key);
      if (e) this.#m.set(key, e);
    }
    return out;
  }
}

/**
 * Every time Redis is back after a drop (a restart; a Sentinel failover to a replica that missed the
 * last writes), the projection is caught up before the next command reads it (Projector.distrust).
 */
export function distrustAfterRedisDrops(redis: Redis, projector: Projector): void {
  let wasReady = redis.status === "ready" || redis.status === "reconnecting";
  redis.on("ready", () => {
    if (wasReady) projector.distrust();
    wasReady = true;
  });
}

/**
 * The moment the log answers again after being down, a projection distrusted meanwhile (an append
 * of a run in flight got no answer) is caught up at once — while those runs read the log and undo
 * what they must — instead of by the next command, which would otherwise start the catch-up only
 * then, after the CO's retry (a leader kill under load: ~0.5 s of the first success after the new
 * leader's election; docs/operations.md, "Right behind the election"). Returns the unsubscribe.
 */
export function catchUpWhenLogAnswers(reach: { onUp(f: () => void): () => void }, projector: Projector, logger: Logger): () => void {
  return reach.onUp(() => {
    if (!projector.distrusted) return;
    projector
      .current()
      .catch((err: unknown) => logger.info({ err: String(err) }, "catch-up after the log answered again failed: the next command tries again"));
  });
}

/** Aggregates a replay keeps in memory between its batches. */
const CACHE_STATES = 50_000;
/** Replay batches (or rebuild chunks) sent to Redis before the first of them is awaited (each is conditional on the one before). */
const IN_FLIGHT = 8;
/** Aggregates per script call of a rebuild's writes at most (a shared index gets one ZADD of 2 arguments per member). */
const CHUNK_STATES = 1000;
/**
 * Aggregates a rebuild keeps changed and unwritten while it reads the log; past this many, the
 * least recently changed are written (most will not change again: one that does is written again).
 */
const REBUILD_PENDING = 20_000;

export interface ProjectorOptions {
  /** Events per catch-up batch (one Lua call each); also aggregates per rebuild chunk (at most CHUNK_STATES). */
  batch?: number;
  /** How long a caller waits for the projection to be complete before Unavailable. */
  waitMs?: number;
  /** TTL of the cluster's rebuild lock; it is renewed every third of it. */
  lockTtlMs?: number;
  /** Aggregates a rebuild keeps changed and unwritten while it reads the log (REBUILD_PENDING; tests make it small). */
  rebuildPending?: number;
}

export class Projector {
  #busy?: Promise<number>;
  /** Redis came back since the last catch-up: the projection may be behind its own watermark's writes. */
  #distrusted = false;
  #owed?: Promise<void>;
  readonly #batch: number;
  readonly #waitMs: number;
  readonly #lockTtlMs: number;
  readonly #rebuildPending: number;

  constructor(
    private readonly log: EventLog,
    private readonly store: JournalStore,
    private readonly logger: Logger,
    opts: ProjectorOptions = {},
  ) {
    this.#batch = opts.batch ?? 512;
    this.#waitMs = opts.waitMs ?? 10_000;
    this.#lockTtlMs = opts.lockTtlMs ?? 10_000;
    this.#rebuildPending = opts.rebuildPending ?? REBUILD_PENDING;
  }

  /** Bring the projection up to the log: catch up if it can be trusted, else rebuild it. Single-flight. */
  catchUp(): Promise<number> {
    return this.#run();
  }

  /**
   * Redis came back after its connection dropped — maybe to a replica Sentinel promoted, which lacks
   * the last writes the old primary had not yet replicated (Redis replicates asynchronously). What
   * it has is a prefix of what was written (projection data and watermark together), so a catch-up
   * from its watermark restores the rest; until then, no operation reads from it (`current`).
   * Also called when an append got no answer (Operation.append): the event may be in the log
   * without the projection knowing, and the next decision must see it.
   */
  distrust(): void {
    this.#distrusted = true;
  }

  /** Whether a catch-up is owed since Redis came back (an operation that read meanwhile reads again after `current`). */
  get distrusted(): boolean {
    return this.#distrusted;
  }

  /**
   * Resolves at once unless Redis came back since the last catch-up; then catches up first
   * (single-flight, shared by every caller), waiting at most `waitMs` like `ready`.
   */
  async current(): Promise<void> {
    if (this.#distrusted) {
      this.#distrusted = false;
      const p: Promise<void> = this.catchUp()
        .then(
          () => {},
          (err: unknown) => {
            this.#distrusted = true; // the next caller tries again
            throw err;
          },
        )
        .finally(() => {
          if (this.#owed === p) this.#owed = undefined;
        });
      this.#owed = p;
    }
    if (this.#owed) await this.#within(this.#owed);
  }

  /** Drop the projection and rebuild it from the log, even if it looks fine (admin `rebuild`). */
  rebuild(reason = "asked for"): Promise<number> {
    return this.#run(reason);
  }

  /**
   * Resolves once the projection is complete (syncing it if not), waiting at most `waitMs`:
   * past that (another replica's rebuild of a long log) the caller gets Unavailable and retries.
   */
  async ready(): Promise<void> {
    if (await this.store.projectionComplete()) return;
    await this.#within(this.catchUp());
  }

  /** `p`, or Unavailable after `waitMs` (the caller retries; `p` goes on). */
  async #within(p: Promise<unknown>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DriverError("Unavailable", "the projection is being rebuilt from the event log, retry")), this.#waitMs);
    });
    try {
      await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Start-up: sync, then compare every projection key with the log replayed in memory; a
   * projection that disagrees (a key removed or changed by hand, a lost write) is rebuilt.
   */
  async start(): Promise<number> {
    const last = await this.catchUp();
    const started = performance.now();
    const { differ, states } = await this.compare();
    const ms = Math.round(performance.now() - started);
    if (differ.length === 0) {
      this.logger.info({ aggregates: states.size, ms }, "projection checked against the log");
      return last;
    }
    this.logger.warn({ differences: differ.length, first: differ.slice(0, 5).map(differenceName), ms }, "projection disagrees with the log");
    return this.rebuild("disagrees with the log");
  }

  /** One sync at a time in this process; a forced rebuild runs after the sync in progress. */
  #run(force?: string): Promise<number> {
    if (this.#busy && !force) return this.#busy;
    const before = this.#busy?.catch(() => 0);
    const p: Promise<number> = (async () => {
      await before;
      return this.#sync(force);
    })().finally(() => {
      if (this.#busy === p) this.#busy = undefined;
    });
    this.#busy = p;
    return p;
  }

  async #sync(force?: string): Promise<number> {
    for (;;) {
      const [meta, info] = await Promise.all([this.store.projectionMeta(), this.log.info()]);
      const judged = force ? { ok: false as const, reason: force } : judgeProjection(meta, info);
      if (judged.ok && meta) {
        const last = await this.#replay(meta.applied + 1);
        if (last !== undefined) return last;
        continue; // flushed or rebuilt under us: look again
      }
      const token = randomBytes(16).toString("hex");
      if (!(await this.store.tryRebuildLock(token, this.#lockTtlMs))) {
        await sleep(50 + Math.random() * 100); // another replica rebuilds: wait for `complete`
        continue;
      }
      try {
        await this.#rebuildLocked(token, force);
      } finally {
        await this.store.releaseRebuildLock(token).catch(() => {});
      }
      force = undefined; // done (or interrupted: the projection is then incomplete, judged again)
    }
  }

  /** One rebuild attempt under the rebuild lock; the caller looks at the projection again afterwards. */
  async #rebuildLocked(token: string, force: string | undefined): Promise<void> {
    const renew = setInterval(() => this.store.renewRebuildLock(token, this.#lockTtlMs).catch(() => false), Math.max(50, Math.floor(this.#lockTtlMs / 3)));
    renew.unref();
    try {
      // Judged again under the lock: another replica may have finished a rebuild meanwhile.
      const [info, meta] = await Promise.all([this.log.info(), this.store.projectionMeta()]);
      const judged = force ? { ok: false as const, reason: force } : judgeProjection(meta, info);
      if (judged.ok) return;
      const epoch = randomBytes(16).toString("hex");
      // Begun over the very projection judged (or any, when forced): a projection complete but of
      // another log (a restored stream) or ahead of it is rebuilt; one another rebuild began or
      // finished meanwhile is judged again.
      if (!(await this.store.beginRebuild(epoch, info.id, force ? "force" : meta))) {
        this.logger.info({ reason: judged.reason }, "projection changed before its rebuild began: judging it again");
        await sleep(50 + Math.random() * 100);
        return;
      }
      const started = performance.now();
      // A first start (no projection, an empty log) is no trouble: said, not warned.
      const first = judged.reason === "missing" && info.last === 0;
      this.logger[first ? "info" : "warn"]({ epoch, reason: judged.reason, log: info.id, was: meta?.log }, "projection rebuild started");
      const { last, wiped, ok } = await this.#foldAndWrite(epoch);
      if (ok && (await this.store.markComplete(epoch, last))) {
        this.logger.info({ epoch, from: 1, to: last, wiped, ms: Math.round(performance.now() - started) }, "projection rebuilt");
        return;
      }
      this.logger.warn({ epoch }, "projection rebuild interrupted (Redis flushed or restarted, or another rebuild took over): starting over");
    } finally {
      clearInterval(renew);
    }
  }

  /**
   * A rebuild's reads and writes: the projection wiped while the log is read from its start and
   * folded in memory; the aggregates the fold changed are written into the wiped projection in
   * chunks (`freshWrites`, at most CHUNK_STATES aggregates per script call) while the log is still
   * read, least recently changed first, once more than REBUILD_PENDING of them wait — so Redis
   * works beside the reading instead of after it; the rest when the log is read, the last chunk
   * setting the watermark. An aggregate the log changes again after it was written is written
   * again (its hash whole, the index entries it lost removed: write_fresh). Each chunk applies
   * only on this epoch after every chunk before it; chunks are sent up to IN_FLIGHT ahead of their
   * replies, so a refusal (flushed, restarted, another rebuild) refuses the rest too. Redis's work
   * grows with the aggregates, not the events. `ok` false: a chunk was refused.
   */
  async #foldAndWrite(epoch: string): Promise<{ last: number; wiped: number; ok: boolean }> {
    const wiping = this.store.wipeProjection();
    wiping.catch(() => {}); // awaited before the first chunk, or below
    const size = Math.min(this.#batch, CHUNK_STATES);
    const states: States = new Map();
    const unwritten = new Unwritten();
    const out = new SentAhead<boolean>(IN_FLIGHT);
    let chunk = 0;
    let ok = true;
    const send = async (count: number, quiet: number, last?: number) => {
      await wiping;
      const aggregates: Aggregate[] = [];
      const written = new Map<string, Aggregate>();
      for (const [key, was] of unwritten.take(count, quiet)) {
        aggregates.push(states.get(key) as Aggregate);
        if (was) written.set(key, was);
      }
      const answer = await out.add(this.store.writeFresh(epoch, chunk++, aggregates, last, written));
      if (answer !== undefined) ok = answer && ok;
    };
    let seen = 0;
    try {
      await this.log.read(
        1,
        async (batch) => {
          for (const r of batch) {
            const step = foldStep(states, r);
            if (!step || step.after === step.before) continue;
            unwritten.changed(step.key, step.before);
            if (unwritten.size >= this.#rebuildPending + size) await send(size, this.#rebuildPending);
            if (!ok) return false;
          }
          seen = batch[batch.length - 1]?.seq ?? seen;
          return ok;
        },
        { batch: FOLD_BATCH },
      );
      while (ok && unwritten.size > size) await send(size, 0);
      if (ok) await send(size, 0, seen);
      for (const answer of await out.rest()) ok = answer && ok;
    } finally {
      await Promise.allSettled([out.settle(), wiping]); // nothing of the rebuild left running, however it ended
    }
    return { last: seen, wiped: await wiping, ok };
  }

  /**
   * Catch up from `from` in batches, each applied only onto a complete projection whose
   * watermark is where the batch starts. Batches are planned from the states the replay folded
   * (a cache) or read from Redis, and sent without waiting for the one before (up to
   * IN_FLIGHT): each one's condition holds only if the one before was applied, so a refusal
   * stops the rest too. Returns the log's last sequence, or undefined if a batch was refused.
   */
  async #replay(from: number): Promise<number | undefined> {
    const started = performance.now();
    const cache = new StateCache(CACHE_STATES);
    const out = new SentAhead<number>(IN_FLIGHT);
    let prev = from - 1;
    let events = 0;
    let applied = 0;
    let refused = false;
    const count = (n: number | undefined) => {
      if (n === undefined) return;
      if (n < 0) refused = true;
      else applied += n;
    };
    let last: number;
    try {
      last = await this.log.read(
        from,
        async (batch) => {
          if (refused) return false;
          const trails = await foldBatch(this.store, batch, cache);
          for (const t of trails) cache.set(addressKey(t.address), t.states.at(-1));
          const to = batch[batch.length - 1]?.seq ?? prev;
          const sent = this.store.applyBatch(trails, { prev, to });
          prev = to;
          events += batch.length;
          count(await out.add(sent));
          return !refused;
        },
        { batch: this.#batch },
      );
      for (const n of await out.rest()) count(n);
    } finally {
      await out.settle();
    }
    if (refused) return undefined;
    if (events > 0) {
      this.logger.info({ from, to: prev, events, applied, ms: Math.round(performance.now() - started) }, "projection caught up");
    }
    return last;
  }

  /**
   * The log folded (evolve) up to its end as it is now, into `states` (from `upTo` on); the
   * foreign records it skipped are pushed onto `foreign`. Returns the last sequence folded.
   */
  async fold(states: States = new Map(), upTo = 0, foreign?: ForeignRecord[]): Promise<number> {
    let seen = upTo;
    await this.log.read(
      upTo + 1,
      async (batch) => {
        foldInto(states, batch);
        if (foreign) for (const r of batch) if (isForeign(r)) foreign.push(r);
        seen = batch[batch.length - 1]?.seq ?? seen;
      },
      { batch: FOLD_BATCH },
    );
    return seen;
  }

  /**
   * Fold the whole log in memory and compare what it says the projection holds with all the
   * projection holds (port.ts `differences`: aggregates, and the indexes that list them). What
   * differs is looked at again (after a catch-up, with the events appended meanwhile) a few times,
   * so other replicas' writes in flight are not taken for damage.
   */
  async compare(): Promise<{ differ: Difference[]; states: States; upTo: number; foreign: ForeignRecord[] }> {
    const states: States = new Map();
    const foreign: ForeignRecord[] = [];
    let upTo = await this.fold(states, 0, foreign);
    let differ = await this.store.differences(states.values());
    for (let round = 0; differ.length > 0 && round < 3; round++) {
      await this.catchUp();
      upTo = await this.fold(states, upTo, foreign);
      differ = await this.store.differences(states.values(), differ);
    }
    return { differ, states, upTo, foreign };
  }
}
