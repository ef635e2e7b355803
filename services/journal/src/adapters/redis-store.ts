/**
 * The Redis side of the journal: per-name/per-uuid locks and the omap projection.
 *
 * Round trips are what a CreateVolume costs, so each step is one Lua script:
 *   lockAndRead    take every lock of an operation (all or none) and read what it decides on
 *   applyAndUnlock apply the events the operation appended, advance the replay watermark and
 *                  release the locks (compare-and-delete)
 * Every key of one cluster shares the `{cluster}` hash tag, so the scripts stay in one slot
 * under Redis Cluster too.
 */
import { randomBytes } from "node:crypto";
import { DriverError } from "@csi/contracts";
import type { Redis } from "ioredis";
import type { Keys } from "../domain/kinds.js";
import type { Mutation } from "../domain/projection.js";
import type { Hash } from "../domain/records.js";

const LOCK_AND_READ = `
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
return {1, redis.call('EXISTS', q.p), cjson.encode(all), cjson.encode(fields), cjson.encode(counts), cjson.encode(rec)}
`;

const APPLY_AND_UNLOCK = `
-- ARGV[1] json [{g=[key, field], s=seq, o=[[cmd, args...]]}], ARGV[2] json [[lock key, token]],
-- ARGV[3] projection key, ARGV[4] watermark (or 0)
local muts = cjson.decode(ARGV[1])
local applied = 0
for _, m in ipairs(muts) do
  local cur = tonumber(redis.call('HGET', m.g[1], m.g[2]) or '0')
  if m.s > cur then
    for _, op in ipairs(m.o) do
      local cmd = op[1]
      if cmd == 'HDELIFEQ' then
        if redis.call('HGET', op[2], op[3]) == op[4] then redis.call('HDEL', op[2], op[3]) end
      elseif cmd == 'SNAPINDEXREM' then
        local src = redis.call('HGET', op[3], 'csi.source')
        if src then redis.call('ZREM', op[2] .. 'csi.index.snap.src.' .. src, op[4]) end
      else
        redis.call(unpack(op))
      end
    end
    redis.call('HSET', m.g[1], m.g[2], m.s)
    applied = applied + 1
  end
end
local w = tonumber(ARGV[4])
if w > 0 then
  local cur = tonumber(redis.call('HGET', ARGV[3], 'applied') or '0')
  if w > cur then redis.call('HSET', ARGV[3], 'applied', w) end
end
for _, lt in ipairs(cjson.decode(ARGV[2])) do
  if redis.call('GET', lt[1]) == lt[2] then redis.call('DEL', lt[1]) end
end
return applied
`;

const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;

type ScriptRedis = Redis & {
  csiLockAndRead(token: string, ttl: number, q: string): Promise<[0, string] | [1, number, string, string, string, string]>;
  csiApplyAndUnlock(muts: string, locks: string, proj: string, watermark: number): Promise<number>;
  csiRenew(key: string, token: string, ttl: number): Promise<number>;
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
  projectionPresent: boolean;
  hashes: (Hash | undefined)[];
  fields: (string | undefined)[];
  counts: number[];
  /** The hash read through `recordPrefix`, if any. */
  record?: Hash;
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
    const [, present, hashesJson, fieldsJson, countsJson, recordJson] = res;
    const record = pairsToHash(luaArray<string>(recordJson));
    const hashes = luaArray<string[] | Record<string, never>>(hashesJson).map(pairsToHash);
    const fields = luaArray<string>(fieldsJson);
    return {
      ok: true,
      read: {
        projectionPresent: present === 1,
        hashes: spec.hashes.map((_, i) => hashes[i]),
        fields: spec.fields.map((_, i) => fields[i] || undefined),
        counts: luaArray<number>(countsJson),
        ...(record ? { record } : {}),
      },
    };
  }

  /** Apply mutations (idempotently), optionally advance the watermark, release locks: one round trip. */
  async applyAndUnlock(muts: Mutation[], locks: [string, string][], watermark = 0): Promise<number> {
    const wire = muts.map((m) => ({ g: m.guard, s: m.seq, o: m.ops }));
    return this.#call(() => this.#r.csiApplyAndUnlock(JSON.stringify(wire), JSON.stringify(locks), this.keys.projection, watermark));
  }

  async renew(key: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.#call(() => this.#r.csiRenew(key, token, ttlMs))) === 1;
  }

  async watermark(): Promise<number | undefined> {
    const v = await this.#call(() => this.#r.hget(this.keys.projection, "applied"));
    return v === null ? undefined : Number(v);
  }

  async markPresent(): Promise<void> {
    await this.#call(() => this.#r.hsetnx(this.keys.projection, "applied", 0));
  }

  async hashes(keys: string[]): Promise<(Hash | undefined)[]> {
    if (keys.length === 0) return [];
    const p = this.#r.pipeline();
    for (const k of keys) p.hgetall(k);
    const res = (await this.#call(() => p.exec())) ?? [];
    return res.map(([err, h]) => (err || !h || Object.keys(h as object).length === 0 ? undefined : (h as Hash)));
  }

  /** Up to `count` members of a lexicographic index after `after` (exclusive). */
  async indexPage(key: string, after: string | undefined, count: number): Promise<string[]> {
    const min = after ? `(${after}` : "-";
    return count > 0 ? this.#call(() => this.#r.zrangebylex(key, min, "+", "LIMIT", 0, count)) : this.#call(() => this.#r.zrangebylex(key, min, "+"));
  }

  async #call<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (err) {
      throw new DriverError("Unavailable", "redis unavailable", { cause: err });
    }
  }
}
