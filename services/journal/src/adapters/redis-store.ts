/**
 * The Redis side of the journal: per-name/per-uuid locks and the omap projection.
 *
 * Round trips are what a CreateVolume costs, so each step is one Lua script:
 *   lockAndRead    take every lock of an operation (all or none) and read what it decides on
 *   applyAndUnlock apply the events the operation appended (or a replay batch, advancing the
 *                  watermark) and release the locks (compare-and-delete)
 * and the projection's own life (see domain/projection-state.ts for the meta hash):
 *   beginRebuild   a new epoch over an empty meta; writeFresh a chunk of the rebuild's writes;
 *                  markComplete the last write of a rebuild.
 * Every apply is conditional: the operation's and a catch-up batch on a complete projection (a
 * batch also only where its watermark starts), a rebuild's chunk on its epoch after every chunk
 * before it. A refused apply writes nothing (it still releases the locks).
 * Every key of one cluster shares the `{cluster}` hash tag, so the scripts stay in one slot
 * under Redis Cluster too.
 */
import { randomBytes } from "node:crypto";
import { DriverError } from "@csi/contracts";
import type { Redis } from "ioredis";
import { type Address, type Aggregate, addressKey } from "../domain/evolve.js";
import type { Keys } from "../domain/kinds.js";
import { type Mutation, nameFromRedis, type RedisOp, stateFromHash } from "../domain/projection.js";
import { metaFromHash, type ProjectionMeta, type Stored } from "../domain/projection-state.js";
import type { Hash } from "../domain/records.js";

export const LOCK_AND_READ = `
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] json {l=[lock keys], a=[hash keys], f=[[key, field]], c=[set keys],
--   p=projection key, r=record key prefix: also read the hash <r><value of the first field>}
local q = cjson.decode(ARGV[3])
local taken = {}
for i, k in ipairs(q.l) do
  if redis.call('SET', k, ARGV[1], 'NX', 'PX', ARGV[2]) then
    taken[#taken + 1] = k
  else
    for _, t in ipairs(taken) do redis.call('DEL', t) end
    return {0, k}
  end
end
local all = {}
for i, k in ipairs(q.a) do all[i] = redis.call('HGETALL', k) end
local fields = {}
for i, kf in ipairs(q.f) do fields[i] = redis.call('HGET', kf[1], kf[2]) or '' end
local counts = {}
for i, k in ipairs(q.c) do counts[i] = redis.call('SCARD', k) end
local rec = {}
if q.r and fields[1] and fields[1] ~= '' then rec = redis.call('HGETALL', q.r .. fields[1]) end
return {1, redis.call('HGET', q.p, 'complete') == '1' and 1 or 0, cjson.encode(all), cjson.encode(fields), cjson.encode(counts), cjson.encode(rec)}
`;

export const APPLY_AND_UNLOCK = `
-- ARGV[1] json [{g=[key, field], s=seq, o=[[cmd, args...]]}], ARGV[2] json [[lock key, token]],
-- ARGV[3] projection key, ARGV[4] json condition: {} = an operation's events (the projection must be
--   complete); {p=watermark the batch starts from, w=its last seq} (a catch-up: also on a complete projection only)
-- Returns the number of mutations applied, or -1 when refused (nothing written).
local muts = cjson.decode(ARGV[1])
local c = cjson.decode(ARGV[4])
local p = ARGV[3]
local ok = redis.call('HGET', p, 'complete') == '1'
local cur = tonumber(redis.call('HGET', p, 'applied') or '0')
if ok and c.w and cur < c.p then ok = false end
local applied = 0
if ok then
  for _, m in ipairs(muts) do
    local seq = tonumber(redis.call('HGET', m.g[1], m.g[2]) or '0')
    if m.s > seq then
      for _, op in ipairs(m.o) do redis.call(unpack(op)) end
      redis.call('HSET', m.g[1], m.g[2], m.s)
      applied = applied + 1
    end
  end
  if c.w and c.w > cur then redis.call('HSET', p, 'applied', c.w) end
end
for _, lt in ipairs(cjson.decode(ARGV[2])) do
  if redis.call('GET', lt[1]) == lt[2] then redis.call('DEL', lt[1]) end
end
if ok then return applied end
return -1
`;

const BEGIN_REBUILD = `
-- KEYS[1] projection key; ARGV[1] epoch, ARGV[2] log id, ARGV[3] '1' = even over a complete projection
if ARGV[3] ~= '1' and redis.call('HGET', KEYS[1], 'complete') == '1' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'log', ARGV[2], 'applied', 0)
return 1
`;

const MARK_COMPLETE = `
-- KEYS[1] projection key; ARGV[1] epoch, ARGV[2] the log's last seq the rebuild replayed to
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'applied') or '0') < tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'complete', 1)
return 1
`;

const WRITE_FRESH = `
-- A rebuild's chunk of writes into its wiped projection. KEYS[1] projection key; ARGV[1] epoch,
-- ARGV[2] index of this chunk (the meta's 'written' must equal it), ARGV[3] '' or the log's last
-- seq (the last chunk: sets 'applied'), ARGV[4] json: the commands as one flat array of strings,
-- each as <count> <cmd> <args…> (count = 1 + #args): one argument, so the client encodes one string.
-- Returns 1, or 0 when refused (nothing written): not this epoch, complete, or a chunk missing.
local p = KEYS[1]
if redis.call('HGET', p, 'epoch') ~= ARGV[1] or redis.call('HEXISTS', p, 'complete') == 1 then return 0 end
local n = tonumber(ARGV[2])
if tonumber(redis.call('HGET', p, 'written') or '0') ~= n then return 0 end
local a = cjson.decode(ARGV[4])
local i = 1
while i <= #a do
  local c = tonumber(a[i])
  redis.call(unpack(a, i + 1, i + c))
  i = i + c + 1
end
redis.call('HSET', p, 'written', n + 1)
if ARGV[3] ~= '' then redis.call('HSET', p, 'applied', ARGV[3]) end
return 1
`;

const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;

type ScriptRedis = Redis & {
  csiLockAndRead(token: string, ttl: number, q: string): Promise<[0, string] | [1, number, string, string, string, string]>;
  csiApplyAndUnlock(muts: string, locks: string, proj: string, cond: string): Promise<number>;
  csiBeginRebuild(proj: string, epoch: string, log: string, force: "0" | "1"): Promise<number>;
  csiMarkComplete(proj: string, epoch: string, last: number): Promise<number>;
  csiRenew(key: string, token: string, ttl: number): Promise<number>;
  csiWriteFresh(proj: string, epoch: string, chunk: number, last: string, ops: string): Promise<number>;
};

export interface ReadSpec {
  locks: string[];
  hashes: string[];
  fields: [string, string][];
  /** Sets whose cardinality to read. */
  counts?: string[];
  /** Also read the hash `<recordPrefix><value of fields[0]>` (the record a name points at). */
  recordPrefix?: string;
}

export interface ReadResult {
  /** The projection is complete (not flushed, not half rebuilt): what was read can be trusted. */
  projectionComplete: boolean;
  hashes: (Hash | undefined)[];
  fields: (string | undefined)[];
  counts: number[];
  /** The hash read through `recordPrefix`, if any. */
  record?: Hash;
}

/** A catch-up batch: the watermark it continues from, its last seq. */
export interface ReplayStep {
  prev: number;
  to: number;
}

export type LockResult = { ok: true; read: ReadResult } | { ok: false; busy: string };

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

export class RedisStore {
  readonly #r: ScriptRedis;

  constructor(
    redis: Redis,
    readonly keys: Keys,
  ) {
    redis.defineCommand("csiLockAndRead", { numberOfKeys: 0, lua: LOCK_AND_READ });
    redis.defineCommand("csiApplyAndUnlock", { numberOfKeys: 0, lua: APPLY_AND_UNLOCK });
    redis.defineCommand("csiRenew", { numberOfKeys: 1, lua: RENEW });
    redis.defineCommand("csiBeginRebuild", { numberOfKeys: 1, lua: BEGIN_REBUILD });
    redis.defineCommand("csiMarkComplete", { numberOfKeys: 1, lua: MARK_COMPLETE });
    redis.defineCommand("csiWriteFresh", { numberOfKeys: 1, lua: WRITE_FRESH });
    this.#r = redis as ScriptRedis;
  }

  static newToken(): string {
    return randomBytes(16).toString("hex");
  }

  async lockAndRead(token: string, ttlMs: number, spec: ReadSpec): Promise<LockResult> {
    const q = JSON.stringify({
      l: spec.locks,
      a: spec.hashes,
      f: spec.fields,
      c: spec.counts ?? [],
      p: this.keys.projection,
      ...(spec.recordPrefix ? { r: spec.recordPrefix } : {}),
    });
    const res = await this.#call(() => this.#r.csiLockAndRead(token, ttlMs, q));
    if (res[0] === 0) return { ok: false, busy: res[1] };
    const [, complete, hashesJson, fieldsJson, countsJson, recordJson] = res;
    const record = pairsToHash(luaArray<string>(recordJson));
    const hashes = luaArray<string[] | Record<string, never>>(hashesJson).map(pairsToHash);
    const fields = luaArray<string>(fieldsJson);
    return {
      ok: true,
      read: {
        projectionComplete: complete === 1,
        hashes: spec.hashes.map((_, i) => hashes[i]),
        fields: spec.fields.map((_, i) => fields[i] || undefined),
        counts: luaArray<number>(countsJson),
        ...(record ? { record } : {}),
      },
    };
  }

  /**
   * Apply mutations (idempotently) and release locks: one round trip. Without `replay` (an
   * operation's own events) only onto a complete projection; a catch-up batch also advances the
   * watermark from `prev` to `to` (also only onto a complete projection).
   * Returns how many mutations ran, or -1 if the projection refused them (nothing written).
   */
  async applyAndUnlock(muts: Mutation[], locks: [string, string][], replay?: ReplayStep): Promise<number> {
    const wire = muts.map((m) => ({ g: m.guard, s: m.seq, o: m.ops }));
    const cond = replay ? { p: replay.prev, w: replay.to } : {};
    return this.#call(() => this.#r.csiApplyAndUnlock(JSON.stringify(wire), JSON.stringify(locks), this.keys.projection, JSON.stringify(cond)));
  }

  async renew(key: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.#call(() => this.#r.csiRenew(key, token, ttlMs))) === 1;
  }

  /** The projection's meta hash (undefined: there is no projection at all). */
  async projectionMeta(): Promise<ProjectionMeta | undefined> {
    return metaFromHash(await this.#call(() => this.#r.hgetall(this.keys.projection)));
  }

  async projectionComplete(): Promise<boolean> {
    return (await this.#call(() => this.#r.hget(this.keys.projection, "complete"))) === "1";
  }

  /** Start a rebuild's epoch (the meta hash replaced); refused over a complete projection unless `force`. */
  async beginRebuild(epoch: string, logId: string, force: boolean): Promise<boolean> {
    return (await this.#call(() => this.#r.csiBeginRebuild(this.keys.projection, epoch, logId, force ? "1" : "0"))) === 1;
  }

  /**
   * One chunk of a rebuild's writes (`freshWrites`), applied only on its `epoch`, not complete,
   * after every chunk before it (the meta's `written` counts them: a Redis restarted from a
   * snapshot taken mid-rebuild has fewer, and refuses). The last chunk also sets `applied` to
   * the log's `last` sequence. False: refused, nothing written.
   */
  async writeFresh(epoch: string, chunk: number, ops: RedisOp[], last?: number): Promise<boolean> {
    const flat: string[] = [];
    for (const op of ops) {
      flat.push(String(op.length));
      for (const a of op) flat.push(String(a));
    }
    const json = JSON.stringify(flat);
    return (await this.#call(() => this.#r.csiWriteFresh(this.keys.projection, epoch, chunk, last === undefined ? "" : String(last), json))) === 1;
  }

  /** The rebuild's last write: complete, if its epoch is still there and replayed up to `last`. */
  async markComplete(epoch: string, last: number): Promise<boolean> {
    return (await this.#call(() => this.#r.csiMarkComplete(this.keys.projection, epoch, last))) === 1;
  }

  /** Every projection key (`{c}:csi.*`; not the locks, not the meta hash). */
  async projectionKeys(): Promise<string[]> {
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, found] = await this.#call(() => this.#r.scan(cursor, "MATCH", `${this.keys.prefix}csi.*`, "COUNT", 1000));
      cursor = next;
      keys.push(...found);
    } while (cursor !== "0");
    return keys;
  }

  /** Remove every projection key. */
  async wipeProjection(): Promise<number> {
    const keys = await this.projectionKeys();
    let removed = 0;
    for (let i = 0; i < keys.length; i += 1000) removed += await this.#call(() => this.#r.unlink(...keys.slice(i, i + 1000)));
    return removed;
  }

  /**
   * These keys with their values (absent keys are left out): the start-up check reads Redis with
   * it. Keys `isHash` says are hashes are read without asking their type first.
   */
  async dumpProjection(keys: string[], isHash: (key: string) => boolean = () => false): Promise<Map<string, Stored>> {
    const out = new Map<string, Stored>();
    for (let i = 0; i < keys.length; i += 1000) {
      const chunk = keys.slice(i, i + 1000);
      const asked = chunk.filter((k) => !isHash(k));
      const answers = asked.length ? await this.#pipeline(asked, (p, k) => p.type(k)) : [];
      const known = new Map(asked.map((k, j) => [k, answers[j]]));
      const types = chunk.map((k) => (known.has(k) ? known.get(k) : "hash"));
      const values = await this.#pipeline(chunk, (p, k, j) => {
        const t = types[j];
        if (t === "zset") p.zrange(k, "0", "-1");
        else if (t === "set") p.smembers(k);
        else p.hgetall(k); // a hash, or gone since (an empty hash)
      });
      chunk.forEach((k, j) => {
        const v = values[j];
        if (Array.isArray(v)) out.set(k, { members: v as string[] });
        else if (v && Object.keys(v).length) out.set(k, { hash: v as Hash });
      });
    }
    return out;
  }

  /** Take / release a plain lock (the rebuild's): SET NX PX, compare-and-delete. */
  async tryLock(key: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.#call(() => this.#r.set(key, token, "PX", ttlMs, "NX"))) === "OK";
  }

  async unlock(key: string, token: string): Promise<void> {
    await this.applyAndUnlock([], [[key, token]]);
  }

  async #pipeline(keys: string[], add: (p: ReturnType<Redis["pipeline"]>, key: string, i: number) => void): Promise<unknown[]> {
    const p = this.#r.pipeline();
    keys.forEach((k, i) => {
      add(p, k, i);
    });
    const res = (await this.#call(() => p.exec())) ?? [];
    return res.map(([err, v]) => (err ? undefined : v));
  }

  async hashes(keys: string[]): Promise<(Hash | undefined)[]> {
    if (keys.length === 0) return [];
    const res = await this.#pipeline(keys, (p, k) => p.hgetall(k));
    return res.map(toHash);
  }

  /**
   * The hashes, read in the same round trip as the projection's `complete` mark: undefined when
   * the projection is not complete (flushed, being rebuilt), so the caller waits and reads again.
   */
  async completeHashes(keys: string[]): Promise<(Hash | undefined)[] | undefined> {
    const [complete, ...res] = await this.#pipeline([this.keys.projection, ...keys], (p, k, i) => (i === 0 ? p.hget(k, "complete") : p.hgetall(k)));
    return complete === "1" ? res.map(toHash) : undefined;
  }

  /**
   * Up to `count` members of a lexicographic index after `after` (exclusive; all when 0), read with
   * the projection's `complete` mark in the same round trip: undefined when it is not complete.
   */
  async completeIndexPage(key: string, after: string | undefined, count: number): Promise<string[] | undefined> {
    const min = after ? `(${after}` : "-";
    const p = this.#r.pipeline().hget(this.keys.projection, "complete");
    if (count > 0) p.zrangebylex(key, min, "+", "LIMIT", 0, count);
    else p.zrangebylex(key, min, "+");
    const [[, complete] = [], [err, members] = []] = (await this.#call(() => p.exec())) ?? [];
    if (err) throw new DriverError("Unavailable", "redis unavailable", { cause: err });
    return complete === "1" ? (members as string[]) : undefined;
  }

  /**
   * The state of each aggregate as the projection holds it (one round trip), by `addressKey`:
   * what a write planned from it starts from (an absent aggregate maps to undefined).
   */
  async readStates(addresses: Address[]): Promise<Map<string, Aggregate | undefined>> {
    const out = new Map<string, Aggregate | undefined>();
    if (addresses.length === 0) return out;
    const k = this.keys;
    const p = this.#r.pipeline();
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
    for (const a of addresses) {
      if (a.kind === "name") {
        const uuid = next() as string | null;
        const seq = Number((next() as string | null) ?? 0);
        out.set(addressKey(a), nameFromRedis(a.of, a.name, uuid ?? undefined, seq));
      } else {
        const h = next() as Hash | null;
        out.set(addressKey(a), stateFromHash(a.kind, a.uuid, h && Object.keys(h).length > 0 ? h : undefined));
      }
    }
    return out;
  }

  async #call<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (err) {
      throw new DriverError("Unavailable", "redis unavailable", { cause: err });
    }
  }
}

/** An HGETALL reply as a hash; an empty one (no such key) or a failed one is undefined. */
function toHash(h: unknown): Hash | undefined {
  return !h || Object.keys(h).length === 0 ? undefined : (h as Hash);
}
