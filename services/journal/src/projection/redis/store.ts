/**
 * The Redis side of the journal: per-name/per-uuid locks and the omap projection.
 *
 * Round trips are what a CreateVolume costs, so each step is one function of the journal's Redis
 * function library (redis/functions.ts; FCALL, every key declared):
 *   lockAndRead    take every lock of an operation (all or none) and read what it decides on
 *   applyAndUnlock apply the events the operation appended and release the locks (compare-and-delete);
 *                  the same function serves applyBatch (a catch-up batch, advancing the watermark)
 *                  and release (locks alone)
 * and the projection's own life (see projection/redis/projection-state.ts for the meta hash):
 *   beginRebuild   a new epoch over an empty meta; writeFresh a chunk of the rebuild's writes;
 *                  markComplete the last write of a rebuild.
 * Every apply is conditional: the operation's and a catch-up batch on a complete projection (a
 * batch also only where its watermark starts), a rebuild's chunk on its epoch after every chunk
 * before it. A refused apply writes nothing (it still releases the locks).
 * Every key of one cluster shares the `{cluster}` hash tag, so the functions stay in one slot
 * under Redis Cluster too. The projection's keys are listed from the key index the functions keep
 * (Keys.keyIndex), not by SCAN.
 */
import { randomBytes } from "node:crypto";
import { DriverError } from "@csi/contracts";
import type { ChainableCommander, Redis } from "ioredis";
import { type Address, type Aggregate, addressKey, type Trail } from "../../fold/evolve.js";
import { expectedMeta, type ProjectionMeta, type RebuildOver } from "../meta.js";
import {
  type Difference,
  differenceName,
  type IndexOf,
  type JournalStore,
  type LockOn,
  type LockResult,
  type Mark,
  type ReadPlan,
  type ReplayStep,
  type StateMap,
  sortedDifferences,
} from "../port.js";
import { ensureJournalFunctions, isMissingFunction, JOURNAL_FUNCTIONS } from "./functions.js";
import { type Hash, nameFromRedis, stateFromHash } from "./hash.js";
import { entryOfKey, type Keys, keysOfDifference } from "./layout.js";
import { differencesAt, metaFromHash } from "./projection-state.js";
import { freshWrites, type Mutation, projectionOf, type RedisOp, type Stored, writesOf } from "./writes.js";

/** Keys of one function call, each once, numbered as KEYS in Lua (1-based) after the fixed ones. */
export class CallKeys {
  readonly keys: string[];
  readonly #at = new Map<string, number>();
  constructor(...fixed: string[]) {
    this.keys = [];
    for (const k of fixed) this.at(k);
  }
  /** The key's index into KEYS (added on first use). */
  at(key: string): number {
    let i = this.#at.get(key);
    if (i === undefined) {
      i = this.keys.push(key);
      this.#at.set(key, i);
    }
    return i;
  }
}

type LockAndReadReply = [0, string] | [1, number, string, string, string, string, string];

/** A read plan as the lock_and_read function takes it: keys to lock, hashes, hash fields, set sizes. */
export interface ReadSpec {
  locks: string[];
  hashes: string[];
  fields: [string, string][];
  counts?: string[];
  /** Also read the hash `<recordPrefix><value of fields[0]>` (the record a name points at). */
  recordPrefix?: string;
  /** Also lock `<lockPrefix><name of hashes[0]>` and read that name's entry (`dir`, field `<fieldPrefix><name>`) and fence (`dirSeq`). */
  ownName?: { lockPrefix: string; fieldPrefix: string; dir: string; dirSeq: string };
}

/** cjson encodes an empty Lua table as {} rather than []. */
function luaArray<T>(json: string): T[] {
  const v = JSON.parse(json) as unknown;
  return Array.isArray(v) ? (v as T[]) : [];
}

function pairsToHash(flat: string[] | Record<string, never>): Hash | undefined {
  if (!Array.isArray(flat) || flat.length === 0) return undefined;
  const h: Hash = {};
  for (let i = 0; i + 1 < flat.length; i += 2) h[flat[i] as string] = flat[i + 1] as string;
  return h;
}

export class RedisStore implements JournalStore {
  readonly #r: Redis;
  readonly #down: () => string | undefined;
  /** The library being made sure of after an FCALL found it missing (single-flight). */
  #ensuring?: Promise<boolean>;

  /**
   * `opts.down`: why Redis is known to be unreachable now, if it is (the journal's RedisLink): then
   * every call fails at once with Unavailable instead of waiting in the client's offline queue.
   */
  constructor(
    redis: Redis,
    readonly keys: Keys,
    opts: { down?: () => string | undefined } = {},
  ) {
    this.#r = redis;
    this.#down = opts.down ?? (() => undefined);
  }

  /**
   * Make sure the function library is in Redis: loaded here if this user may (an open Redis),
   * else Unavailable naming the admin's step. True if this call loaded it.
   */
  ensureFunctions(): Promise<boolean> {
    this.#ensuring ??= ensureJournalFunctions(this.#r).finally(() => {
      this.#ensuring = undefined;
    });
    return this.#ensuring;
  }

  static newToken(): string {
    return randomBytes(16).toString("hex");
  }

  /** The Redis key of a lock. */
  lockKey(l: LockOn): string {
    const k = this.keys;
    if (l.kind === "name") return k.nameLock(l.of, l.name);
    if (l.kind === "image") return k.lock(`image.${l.pool}.${l.imageName}`);
    if ("requestId" in l) return k.lock(`${l.kind}.${l.requestId}`);
    return k.uuidLock(l.kind, l.uuid);
  }

  async lockAndRead(token: string, ttlMs: number, plan: ReadPlan): Promise<LockResult> {
    const k = this.keys;
    const locks = plan.locks ?? [];
    const states = plan.states ?? [];
    // A name is two fields (its directory entry, its fence); the first name's record can be followed.
    const names = states.filter((a) => a.kind === "name");
    const records = states.filter((a) => a.kind !== "name");
    const followed = plan.follow ? names[0] : undefined;
    const owned = plan.ownName ? records[0] : undefined;
    const spec: ReadSpec = {
      locks: locks.map((l) => this.lockKey(l)),
      hashes: records.map((a) => k.record(a.kind, a.uuid)),
      fields: names.flatMap((a): [string, string][] => [
        [k.dir(a.of), k.dirField(a.of, a.name)],
        [k.dirSeq(a.of), a.name],
      ]),
      counts: (plan.nodeClaims ?? []).map((n) => k.nodeClaims(n)),
      ...(followed ? { recordPrefix: k.record(followed.of, "") } : {}),
      ...(owned
        ? { ownName: { lockPrefix: k.nameLock(owned.kind, ""), fieldPrefix: k.dirField(owned.kind, ""), dir: k.dir(owned.kind), dirSeq: k.dirSeq(owned.kind) } }
        : {}),
    };
    const res = await this.lockAndReadKeys(token, ttlMs, spec);
    if (!res.ok) {
      const own = owned && spec.ownName && res.busy.startsWith(spec.ownName.lockPrefix) ? res.busy.slice(spec.ownName.lockPrefix.length) : undefined;
      return { ok: false, busy: locks[spec.locks.indexOf(res.busy)] ?? { kind: "name", of: owned?.kind ?? "volume", name: own ?? res.busy } };
    }
    const { read } = res;
    const out: StateMap = new Map();
    records.forEach((a, i) => {
      out.set(addressKey(a), stateFromHash(a.kind, a.uuid, read.hashes[i]));
    });
    names.forEach((a, i) => {
      const uuid = read.fields[2 * i];
      out.set(addressKey(a), nameFromRedis(a.of, a.name, uuid, Number(read.fields[2 * i + 1] ?? 0)));
      if (a === followed && uuid) out.set(addressKey({ kind: a.of, uuid }), stateFromHash(a.of, uuid, read.record));
    });
    const nodeClaims = new Map((plan.nodeClaims ?? []).map((n, i) => [n, read.counts[i] ?? 0]));
    const ownName = owned && read.own ? ({ kind: "name", of: owned.kind, name: read.own.name } as const) : undefined;
    if (ownName && read.own) out.set(addressKey(ownName), nameFromRedis(ownName.of, ownName.name, read.own.uuid, read.own.seq));
    return { ok: true, read: { complete: read.projectionComplete, states: out, nodeClaims, ...(ownName ? { locked: [ownName] } : {}) } };
  }

  /** lock_and_read with keys as they are (tests drive the function with it). */
  async lockAndReadKeys(token: string, ttlMs: number, spec: ReadSpec) {
    const counts = spec.counts ?? [];
    const own = spec.ownName;
    const keys = [this.keys.projection, ...spec.locks, ...spec.hashes, ...spec.fields.map((f) => f[0]), ...counts, ...(own ? [own.dir, own.dirSeq] : [])];
    const args = [
      token,
      ttlMs,
      spec.locks.length,
      spec.hashes.length,
      spec.fields.length,
      counts.length,
      spec.recordPrefix ?? "",
      own?.lockPrefix ?? "",
      own?.fieldPrefix ?? "",
      ...spec.fields.map((f) => f[1]),
    ];
    const res = await this.#fcall<LockAndReadReply>(JOURNAL_FUNCTIONS.lockAndRead, keys, args);
    if (res[0] === 0) return { ok: false as const, busy: res[1] };
    const [, complete, hashesJson, fieldsJson, countsJson, recordJson, ownJson] = res;
    const [ownName, ownUuid, ownSeq] = luaArray<string>(ownJson);
    const hashes = luaArray<string[] | Record<string, never>>(hashesJson).map(pairsToHash);
    const fields = luaArray<string>(fieldsJson);
    return {
      ok: true as const,
      read: {
        projectionComplete: complete === 1,
        hashes: spec.hashes.map((_, i) => hashes[i]),
        fields: spec.fields.map((_, i) => fields[i] || undefined),
        counts: luaArray<number>(countsJson),
        record: pairsToHash(luaArray<string>(recordJson)),
        ...(ownName ? { own: { name: ownName, uuid: ownUuid || undefined, seq: Number(ownSeq || 0) } } : {}),
      },
    };
  }

  /** Write the trails' last states and release `locks` (one round trip); see CommandStore. */
  applyAndUnlock(trails: Trail[], locks: LockOn[], token: string, marks: Mark[] = []): Promise<number> {
    return this.applyMutations(
      writesOf(this.keys, trails),
      locks.map((l) => [this.lockKey(l), token]),
      undefined,
      marks.map((m) => ({ key: this.lockKey(m.lock), token: m.token, ttlMs: m.ttlMs })),
    );
  }

  async marksOf(locks: LockOn[]): Promise<(string | undefined)[]> {
    const values = await this.#call(() => Promise.all(locks.map((l) => this.#r.get(this.lockKey(l)))));
    return values.map((v) => v ?? undefined);
  }

  /** A catch-up batch: the trails' writes and the watermark moved (one round trip); see CommandStore. */
  applyBatch(trails: Trail[], step: ReplayStep): Promise<number> {
    return this.applyMutations(writesOf(this.keys, trails), [], step);
  }

  /** Release `locks` held with `token` (the same function with nothing to write). */
  async release(locks: LockOn[], token: string): Promise<void> {
    await this.applyMutations(
      [],
      locks.map((l) => [this.lockKey(l), token]),
    );
  }

  /**
   * Apply mutations (idempotently) and release locks: one round trip. Without `replay` (an
   * operation's own events) only onto a complete projection; a catch-up batch also advances the
   * watermark from `prev` to `to` (also only onto a complete projection).
   * Returns how many mutations ran, or -1 if the projection refused them (nothing written).
   */
  /** Mutations as the apply_and_unlock function takes them, and locks as [key, token] (tests drive the function with it). */
  async applyMutations(
    muts: Mutation[],
    locks: [string, string][],
    replay?: ReplayStep,
    marks: { key: string; token: string; ttlMs: number }[] = [],
  ): Promise<number> {
    const k = new CallKeys(this.keys.projection, this.keys.keyIndex);
    const wire = muts.map((m) => ({ g: [k.at(m.guard[0]), m.guard[1]], s: m.seq, o: m.ops.map(([cmd, key, ...rest]) => [cmd, k.at(String(key)), ...rest]) }));
    const held = locks.map(([key, token]) => [k.at(key), token]);
    const cond = replay ? { p: replay.prev, w: replay.to } : {};
    const sets = marks.map((m) => [k.at(m.key), m.token, m.ttlMs]);
    const args = [JSON.stringify(wire), JSON.stringify(held), JSON.stringify(cond), JSON.stringify(sets)];
    return this.#fcall<number>(JOURNAL_FUNCTIONS.applyAndUnlock, k.keys, args);
  }

  async renew(lock: LockOn, token: string, ttlMs: number): Promise<boolean> {
    return this.#renew(this.lockKey(lock), token, ttlMs);
  }

  async #renew(key: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.#fcall<number>(JOURNAL_FUNCTIONS.renew, [key], [token, ttlMs])) === 1;
  }

  /** The projection's meta hash (undefined: there is no projection at all). */
  async projectionMeta(): Promise<ProjectionMeta | undefined> {
    return metaFromHash(await this.#call(() => this.#r.hgetall(this.keys.projection)));
  }

  async projectionComplete(): Promise<boolean> {
    return (await this.#call(() => this.#r.hget(this.keys.projection, "complete"))) === "1";
  }

  /** Start a rebuild's epoch (the meta hash replaced): forced, or only over the projection judged (ProjectionStore). */
  async beginRebuild(epoch: string, logId: string, over: RebuildOver): Promise<boolean> {
    const want = expectedMeta(over);
    const args = want ? [epoch, logId, "0", want.epoch, want.complete ? "1" : "0"] : [epoch, logId, "1", "", ""];
    return (await this.#fcall<number>(JOURNAL_FUNCTIONS.beginRebuild, [this.keys.projection], args)) === 1;
  }

  /**
   * One chunk of a rebuild's writes (`freshWrites`), applied only on its `epoch`, not complete,
   * after every chunk before it (the meta's `written` counts them: a Redis restarted from a
   * snapshot taken mid-rebuild has fewer, and refuses). The last chunk also sets `applied` to
   * the log's `last` sequence. False: refused, nothing written.
   */
  writeFresh(epoch: string, chunk: number, states: Aggregate[], last?: number, written?: ReadonlyMap<string, Aggregate>): Promise<boolean> {
    return this.writeFreshOps(epoch, chunk, freshWrites(this.keys, states, written), last);
  }

  /** writeFresh of Redis commands as they are (tests drive the function with it). */
  async writeFreshOps(epoch: string, chunk: number, ops: RedisOp[], last?: number): Promise<boolean> {
    const k = new CallKeys(this.keys.projection, this.keys.keyIndex);
    const flat: (string | number)[] = [];
    for (const op of ops) {
      flat.push(op.length, op[0], k.at(String(op[1])));
      for (let i = 2; i < op.length; i++) flat.push(String(op[i]));
    }
    const args = [epoch, chunk, last === undefined ? "" : String(last), JSON.stringify(flat)];
    return (await this.#fcall<number>(JOURNAL_FUNCTIONS.writeFresh, k.keys, args)) === 1;
  }

  /** The rebuild's last write: complete, if its epoch is still there and replayed up to `last`. */
  async markComplete(epoch: string, last: number): Promise<boolean> {
    return (await this.#fcall<number>(JOURNAL_FUNCTIONS.markComplete, [this.keys.projection], [epoch, last])) === 1;
  }

  /**
   * Every projection key (`{c}:csi.*`; not the locks, not the meta hash) the key index holds:
   * ZSCAN of the index (every key there from start to end is listed once at least), not SCAN.
   */
  async projectionKeys(): Promise<string[]> {
    const keys = new Set<string>();
    let cursor = "0";
    do {
      const [next, found] = await this.#call(() => this.#r.zscan(this.keys.keyIndex, cursor, "COUNT", 1000));
      cursor = next;
      for (let i = 0; i < found.length; i += 2) keys.add(found[i] as string);
    } while (cursor !== "0");
    return [...keys];
  }

  /**
   * Remove every projection key the index holds, and the index, 1,000 keys at a time (each chunk
   * unindexed in the same round trip: a crash in between leaves only the rest indexed); returns
   * how many records they held (`#counting`). Only under the rebuild lock on an epoch just
   * begun: nothing else writes the projection meanwhile. Keys a projection made before the key
   * index left behind are emptied by the rebuild's first write into each (write_fresh).
   */
  async wipeProjection(): Promise<number> {
    let removed = 0;
    for (;;) {
      const keys = await this.#call(() => this.#r.zrange(this.keys.keyIndex, "0", "999"));
      if (keys.length === 0) return removed;
      const p = this.#r.pipeline();
      const count = this.#counting(keys, p);
      p.unlink(...keys).zrem(this.keys.keyIndex, ...keys);
      removed += count((await this.#call(() => p.exec())) ?? []);
    }
  }

  /**
   * The command that counts the records projection `keys` hold (the record keys among them that
   * exist: a tombstone until it expires), queued first on `p`, and how to read its answer.
   */
  #counting(keys: string[], p: ChainableCommander): (res: [Error | null, unknown][]) => number {
    const records = keys.filter((key) => {
      const e = entryOfKey(this.keys, key);
      return !!e && "record" in e;
    });
    if (records.length === 0) return () => 0;
    p.exists(...records);
    return ([[err, n] = [null, 0]]) => {
      if (err) throw new DriverError("Unavailable", "redis unavailable", { cause: err });
      return Number(n ?? 0);
    };
  }

  /**
   * These keys with their values (absent keys are left out): the start-up check reads Redis with
   * it, 1,000 keys per call of the library's `dump` (each answer one JSON string: decoding a reply
   * per field cost the check about 4 µs of CPU per event of the log; docs/journal.md).
   */
  async dumpProjection(keys: string[]): Promise<Map<string, Stored>> {
    const out = new Map<string, Stored>();
    for (let i = 0; i < keys.length; i += 1000) {
      const chunk = keys.slice(i, i + 1000);
      const dumped = luaArray<[string, string[] | Record<string, never>]>(await this.#fcall<string>(JOURNAL_FUNCTIONS.dump, chunk, []));
      chunk.forEach((k, j) => {
        const [type, values] = dumped[j] ?? ["none", []];
        if (!Array.isArray(values) || values.length === 0) return;
        if (type === "hash") out.set(k, { hash: pairsToHash(values) as Hash });
        else if (type === "set" || type === "zset") out.set(k, { members: values });
      });
    }
    return out;
  }

  /** The cluster's rebuild lock: SET NX PX, renewed and released (compare-and-delete) with its token. */
  async tryRebuildLock(token: string, ttlMs: number): Promise<boolean> {
    return (await this.#call(() => this.#r.set(this.keys.lock("rebuild"), token, "PX", ttlMs, "NX"))) === "OK";
  }

  renewRebuildLock(token: string, ttlMs: number): Promise<boolean> {
    return this.#renew(this.keys.lock("rebuild"), token, ttlMs);
  }

  async releaseRebuildLock(token: string): Promise<void> {
    await this.applyMutations([], [[this.keys.lock("rebuild"), token]]);
  }

  /** The records of the projection (`#counting` of every key the index holds, 1,000 at a time). */
  async recordCount(): Promise<number> {
    const keys = await this.projectionKeys();
    let n = 0;
    for (let i = 0; i < keys.length; i += 1000) {
      const p = this.#r.pipeline();
      const count = this.#counting(keys.slice(i, i + 1000), p);
      n += count((await this.#call(() => p.exec())) ?? []);
    }
    return n;
  }

  /**
   * Where the projection differs from `states` (the whole log folded), compared key by key and
   * named in the port's words (`differencesAt`): every key the key index holds and every key the
   * states want, 1,000 at a time, or only the keys that hold the differences of `only`.
   */
  async differences(states: Iterable<Aggregate>, only?: Difference[]): Promise<Difference[]> {
    if (only) {
      const keys = [...new Set(only.flatMap((d) => keysOfDifference(this.keys, d)))];
      const asked = new Set(only.map(differenceName));
      const found = differencesAt(this.keys, projectionOf(this.keys, states), await this.dumpProjection(keys), keys);
      return found.filter((d) => asked.has(differenceName(d)));
    }
    // Redis lists its keys, then reads the next 1,000 while this process compares the last.
    const listing = this.projectionKeys();
    listing.catch(() => {});
    const want = projectionOf(this.keys, states);
    const keys = await listing;
    const differ: Difference[] = [];
    const read = (i: number) => (i < keys.length ? this.dumpProjection(keys.slice(i, i + 1000)) : undefined);
    let next = read(0);
    for (let i = 0; i < keys.length; i += 1000) {
      const have = (await next) as Map<string, Stored>;
      next = read(i + 1000);
      differ.push(...differencesAt(this.keys, want, have, keys.slice(i, i + 1000)));
    }
    const inRedis = new Set(keys);
    differ.push(
      ...differencesAt(
        this.keys,
        want,
        new Map(),
        [...want.keys()].filter((k) => !inRedis.has(k)),
      ),
    );
    return sortedDifferences(differ);
  }

  /** States read in the same round trip as the projection's `complete` mark: undefined when it is not complete. */
  async completeStates(addresses: Address[]): Promise<StateMap | undefined> {
    const [complete, states] = await this.#states(addresses, true);
    return complete ? states : undefined;
  }

  /** The state of each aggregate as the projection holds it (one round trip), by `addressKey`. */
  async readStates(addresses: Address[]): Promise<StateMap> {
    return (await this.#states(addresses, false))[1];
  }

  async #states(addresses: Address[], withComplete: boolean): Promise<[boolean, StateMap]> {
    const out: StateMap = new Map();
    if (addresses.length === 0 && !withComplete) return [true, out];
    const k = this.keys;
    const p = this.#r.pipeline();
    if (withComplete) p.hget(k.projection, "complete");
    for (const a of addresses) {
      if (a.kind === "name") p.hget(k.dir(a.of), k.dirField(a.of, a.name)).hget(k.dirSeq(a.of), a.name);
      else p.hgetall(k.record(a.kind, a.uuid));
    }
    const res = (await this.#call(() => p.exec())) ?? [];
    let i = 0;
    const next = () => {
      const [err, v] = res[i++] ?? [null, undefined];
      if (err) throw new DriverError("Unavailable", "redis unavailable", { cause: err });
      return v;
    };
    const complete = withComplete ? next() === "1" : true;
    for (const a of addresses) {
      if (a.kind === "name") {
        const uuid = next() as string | null;
        const seq = Number((next() as string | null) ?? 0);
        out.set(addressKey(a), nameFromRedis(a.of, a.name, uuid ?? undefined, seq));
      } else out.set(addressKey(a), stateFromHash(a.kind, a.uuid, toHash(next())));
    }
    return [complete, out];
  }

  /**
   * Up to `count` members of a lexicographic index after `after` (exclusive; all when 0), read with
   * the projection's `complete` mark in the same round trip: undefined when it is not complete.
   */
  async completeIndexPage(index: IndexOf, after: string | undefined, count: number): Promise<string[] | undefined> {
    const key = "kind" in index ? this.keys.index(index.kind) : this.keys.snapsOf(index.snapshotsOf);
    const min = after ? `(${after}` : "-";
    const p = this.#r.pipeline().hget(this.keys.projection, "complete");
    if (count > 0) p.zrangebylex(key, min, "+", "LIMIT", 0, count);
    else p.zrangebylex(key, min, "+");
    const [[, complete] = [], [err, members] = []] = (await this.#call(() => p.exec())) ?? [];
    if (err) throw new DriverError("Unavailable", "redis unavailable", { cause: err });
    return complete === "1" ? (members as string[]) : undefined;
  }

  /**
   * FCALL of one of the library's functions. A server without the library (a new empty Redis, a
   * FUNCTION FLUSH) gets it loaded if this user may, and the call is made again; else the error
   * names the admin's step.
   */
  async #fcall<T>(name: string, keys: string[], args: (string | number)[]): Promise<T> {
    return this.#call(async () => {
      try {
        return (await this.#r.fcall(name, keys.length, ...keys, ...args)) as T;
      } catch (err) {
        if (!isMissingFunction(err)) throw err;
        await this.ensureFunctions();
        return (await this.#r.fcall(name, keys.length, ...keys, ...args)) as T;
      }
    });
  }

  async #call<T>(f: () => Promise<T>): Promise<T> {
    const down = this.#down();
    if (down) throw new DriverError("Unavailable", `redis unavailable: ${down}`);
    try {
      return await f();
    } catch (err) {
      if (err instanceof DriverError) throw err;
      throw new DriverError("Unavailable", "redis unavailable", { cause: err });
    }
  }
}

/** An HGETALL reply as a hash; an empty one (no such key) or a failed one is undefined. */
function toHash(h: unknown): Hash | undefined {
  return !h || Object.keys(h).length === 0 ? undefined : (h as Hash);
}
