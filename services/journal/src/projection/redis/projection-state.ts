/**
 * Whether a Redis projection can be trusted, and what it should hold. Pure.
 *
 * The projection's meta hash (`{c}:projection`) says which rebuild made it and how far it got:
 *   epoch     random id of the rebuild that wrote it (set when the rebuild starts)
 *   log       identity of the log it was replayed from (the stream's creation time)
 *   applied   stream sequence up to which every event is applied (the watermark)
 *   complete  "1" once the rebuild replayed the whole log under this epoch; written last
 * A flush removes the meta hash with everything else, so a rebuild that is cut in half never
 * finds its epoch again and starts over; nothing but a finished rebuild sets `complete`.
 *
 * `judgeProjection` (../meta.ts) decides from the meta alone (cheap, at every sync); the start-up check and
 * `verify` compare what Redis holds with what the log says (`projectionOf` of the fold), key by
 * key (`diffProjection`), and name what differs in the port's words (`differencesAt`: addresses,
 * and the indexes that list them). `ProjectionModel` runs planned writes in memory exactly as the Lua
 * applier does (the tests prove the plans against the fold with it).
 */
import type { ProjectionMeta } from "../meta.js";
import { type Difference, indexedKind, sortedDifferences } from "../port.js";
import type { Hash } from "./hash.js";
import { entryOfKey, type Keys, nameOfField } from "./layout.js";
import type { Mutation, RedisOp, Stored } from "./writes.js";

export { judgeProjection } from "../meta.js";
export type { Stored } from "./writes.js";

export function metaFromHash(h: Hash | undefined): ProjectionMeta | undefined {
  if (!h || Object.keys(h).length === 0) return undefined;
  return {
    ...(h.epoch !== undefined ? { epoch: h.epoch } : {}),
    ...(h.log !== undefined ? { log: h.log } : {}),
    applied: Number(h.applied ?? 0),
    complete: h.complete === "1",
  };
}

/** The projection's keys as the Lua applier would leave them after these mutations (TTLs aside). */
export class ProjectionModel {
  readonly #hashes = new Map<string, Map<string, string>>();
  readonly #sets = new Map<string, Set<string>>();

  apply(muts: Mutation[]): void {
    for (const m of muts) {
      const [key, field] = m.guard;
      if (m.seq <= Number(this.#hget(key, field) ?? 0)) continue;
      for (const op of m.ops) this.#op(op);
      this.#hset(key, field, m.seq);
    }
  }

  /** Plain commands, unguarded (a rebuild's `freshWrites`). */
  run(ops: RedisOp[]): void {
    for (const op of ops) this.#op(op);
  }

  /** Every key with its value. */
  dump(): Map<string, Stored> {
    const out = new Map<string, Stored>();
    for (const [k, h] of this.#hashes) out.set(k, { hash: Object.fromEntries(h) });
    for (const [k, s] of this.#sets) out.set(k, { members: [...s] });
    return out;
  }

  #op(op: RedisOp): void {
    const [cmd, ...a] = op;
    const [key = "", x = ""] = a.map(String);
    switch (cmd) {
      case "HSET":
        for (let i = 1; i + 1 < a.length; i += 2) this.#hset(key, String(a[i]), String(a[i + 1]));
        break;
      case "HDEL":
        for (const f of a.slice(1)) this.#hashes.get(key)?.delete(String(f));
        break;
      case "DEL":
        this.#hashes.delete(key);
        this.#sets.delete(key);
        break;
      case "ZADD": // ZADD key score member [score member …]
        for (let i = 2; i < a.length; i += 2) this.#sadd(key, String(a[i]));
        break;
      case "SADD":
        for (const m of a.slice(1)) this.#sadd(key, String(m));
        break;
      case "ZREM":
      case "SREM":
        this.#sets.get(key)?.delete(x);
        break;
      case "PEXPIRE":
        break; // TTLs only matter to tombstones, which diffProjection leaves out
      default:
        throw new Error(`the projection model has no ${cmd}`);
    }
    // Redis drops a hash or set that became empty.
    if (this.#hashes.get(key)?.size === 0) this.#hashes.delete(key);
    if (this.#sets.get(key)?.size === 0) this.#sets.delete(key);
  }

  #hget(key: string, field: string): string | undefined {
    return this.#hashes.get(key)?.get(field);
  }

  #hset(key: string, field: string, value: string | number): void {
    const h = this.#hashes.get(key) ?? new Map<string, string>();
    this.#hashes.set(key, h);
    h.set(field, String(value));
  }

  #sadd(key: string, member: string): void {
    const set = this.#sets.get(key) ?? new Set<string>();
    this.#sets.set(key, set);
    set.add(member);
  }
}

/** A value as compared: a tombstone (what a deleted aggregate leaves for 24 h) may have expired in Redis, and an empty set is no set. */
function compared(v: Stored | undefined): Stored | undefined {
  if (!v) return undefined;
  if ("hash" in v) return v.hash._gone === "1" ? undefined : v;
  return v.members.length ? v : undefined;
}

/** Whether two stored values are equal: hashes field by field, sets by members (in any order). */
function sameValue(a: Stored | undefined, b: Stored | undefined): boolean {
  const x = compared(a);
  const y = compared(b);
  if (!x || !y) return x === y;
  if ("hash" in x) {
    if (!("hash" in y)) return false;
    let n = 0;
    for (const f in x.hash) {
      if (x.hash[f] !== y.hash[f]) return false;
      n++;
    }
    for (const _ in y.hash) n--;
    return n === 0;
  }
  if (!("members" in y) || x.members.length !== y.members.length) return false;
  const set = new Set(x.members);
  return set.size === x.members.length && y.members.every((m) => set.has(m));
}

/** Keys whose value differs between what the log says (`want`) and what Redis holds (`have`); only `only` if given. */
export function diffProjection(want: Map<string, Stored>, have: Map<string, Stored>, only?: string[]): string[] {
  const differ: string[] = [];
  const check = (k: string) => {
    if (!sameValue(want.get(k), have.get(k))) differ.push(k);
  };
  if (only) for (const k of new Set(only)) check(k);
  else {
    for (const k of want.keys()) check(k);
    for (const k of have.keys()) if (!want.has(k)) check(k);
  }
  return differ.sort();
}

/** The fields of a hash (none: no hash) whose values differ between `a` and `b`. */
function differingFields(a: Stored | undefined, b: Stored | undefined): string[] {
  const x = a && "hash" in a ? a.hash : {};
  const y = b && "hash" in b ? b.hash : {};
  return [...new Set([...Object.keys(x), ...Object.keys(y)])].filter((f) => x[f] !== y[f]);
}

/** The members (none: no set) in one of `a` and `b` only. */
function differingMembers(a: Stored | undefined, b: Stored | undefined): string[] {
  const x = new Set(a && "members" in a ? a.members : []);
  const y = new Set(b && "members" in b ? b.members : []);
  return [...x, ...y].filter((m) => !(x.has(m) && y.has(m)));
}

/**
 * What differs at `keys` between what the log says (`want`) and what Redis holds (`have`), in the
 * port's words: a record's key names its aggregate; a field of a kind's name directory (or of its
 * sequences) a request name; a member of an index the aggregate it lists, with the index. A key
 * of no shape the layout makes holds nothing the journal reads: no difference.
 */
export function differencesAt(k: Keys, want: Map<string, Stored>, have: Map<string, Stored>, keys: Iterable<string>): Difference[] {
  const out: Difference[] = [];
  for (const key of keys) {
    const e = entryOfKey(k, key);
    const [w, h] = [want.get(key), have.get(key)];
    if (!e) continue;
    if ("record" in e) {
      if (!sameValue(w, h)) out.push({ address: e.record });
    } else if ("index" in e) {
      for (const uuid of differingMembers(compared(w), compared(h))) out.push({ address: { kind: indexedKind(e.index), uuid }, index: e.index });
    } else {
      const of = "names" in e ? e.names : e.nameSeqs;
      for (const f of differingFields(w, h)) {
        const name = "names" in e ? nameOfField(k, of, f) : f;
        if (name !== undefined) out.push({ address: { kind: "name", of, name } });
      }
    }
  }
  return sortedDifferences(out);
}
