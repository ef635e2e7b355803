/**
 * The Redis projection as a function of the fold (evolve.ts). Pure.
 *
 * What Redis holds for an aggregate is a function of its state alone: the record's hash
 * (`toHash` of the kind, plus `_seq` and `_gone`), or a tombstone (`_seq`, `_gone=1`, 24 h TTL)
 * once it ended; the index entries it belongs to (`memberships`); a request name's directory
 * entry. `projectionOf(states)` is the whole projection of a fold — what a rebuild must leave —
 * and `writesOf` turns each aggregate's trail through a fold (its state before some events,
 * then after each) into guarded Redis writes, one per aggregate:
 *
 *   - the record hash is written whole (DEL + HSET; a tombstone also gets its TTL), so the
 *     write is right whatever state between `before` and `after` Redis holds;
 *   - index entries of `after` are added; entries of `before` and of every state in between
 *     that `after` lacks are removed;
 *   - the guard: the Lua applier runs a write only if its sequence is newer than the one the
 *     aggregate last applied (`_seq` of the hash, or the name's field in `.seq`), so the writer's
 *     own apply, a catch-up and a rebuild can run at once, in any interleaving, and agree.
 *
 * The caller must know each aggregate's state before the events (what it read from Redis, or
 * folded earlier), unless its first event starts it afresh (`startsAfresh`).
 */
import { type Aggregate, addressKey, addressOfState, foldFrom, type Trail } from "../../fold/evolve.js";
import type { LogRecord } from "../../fold/log-record.js";
import { indexesOf, TOMBSTONE_TTL_MS } from "../port.js";
import { type Hash, recordHash } from "./hash.js";
import { indexKey, type Keys } from "./layout.js";

export { TOMBSTONE_TTL_MS } from "../port.js";

/** One key's value as stored: a hash, or the members of a set / sorted set (scores are all 0). */
export type Stored = { hash: Hash } | { members: string[] };

export type RedisOp = [string, ...(string | number)[]];

export interface Mutation {
  /** Hash and field that hold the aggregate's applied sequence. */
  guard: [string, string];
  seq: number;
  ops: RedisOp[];
}

/** An index entry: a sorted set (`z`, score 0, paged lexicographically) or a set (`s`). */
type Member = { key: string; member: string; type: "z" | "s" };

/** The index entries of a state (port.ts `indexesOf`): the paged indexes are sorted sets, a node's claims a set. */
export function memberships(k: Keys, s: Aggregate | undefined): Member[] {
  if (!s || s.kind === "name") return [];
  return indexesOf(s).map((i) => ({ key: indexKey(k, i), member: s.uuid, type: "claimsOf" in i ? "s" : "z" }));
}

const memberId = (m: Member) => `${m.type}\u0000${m.key}\u0000${m.member}`;

/** The Redis write that takes an aggregate to `after`; `seen`: index entries of the states before it. */
function writeOf(k: Keys, after: Aggregate, seen: Map<string, Member>): Mutation {
  if (after.kind === "name") {
    const dir = k.dir(after.of);
    const field = k.dirField(after.of, after.name);
    return { guard: [k.dirSeq(after.of), after.name], seq: after.seq, ops: [after.uuid ? ["HSET", dir, field, after.uuid] : ["HDEL", dir, field]] };
  }
  const key = k.record(after.kind, after.uuid);
  const ops: RedisOp[] = [["DEL", key]];
  const hash = recordHash(after);
  if (hash) ops.push(["HSET", key, ...Object.entries(hash).flat()]);
  else ops.push(["HSET", key, "_gone", "1"], ["PEXPIRE", key, TOMBSTONE_TTL_MS]);
  const keep = memberships(k, after);
  const kept = new Set(keep.map(memberId));
  const drop = [...seen.values()].filter((m) => !kept.has(memberId(m)));
  // An ended record leaves its kind's index even if no state before it was known to be in it.
  if (!hash && !seen.has(memberId({ key: k.index(after.kind), member: after.uuid, type: "z" }))) {
    drop.push({ key: k.index(after.kind), member: after.uuid, type: "z" });
  }
  for (const m of drop) ops.push([m.type === "z" ? "ZREM" : "SREM", m.key, m.member]);
  for (const m of keep) ops.push(m.type === "z" ? ["ZADD", m.key, 0, m.member] : ["SADD", m.key, m.member]);
  return { guard: [key, "_seq"], seq: after.seq, ops };
}

export interface Plan {
  mutations: Mutation[];
  /** The state after the events of every aggregate they changed, by `addressKey`. */
  after: Map<string, Aggregate | undefined>;
}

/**
 * A replay batch's writes: `events` folded (once) from the states before them (`before`, by
 * `addressKey`; undefined = none), and the writes of every aggregate that changed.
 */
export function planWrites(k: Keys, before: (key: string) => Aggregate | undefined, events: LogRecord[]): Plan {
  const trails = foldFrom(events, before).trails();
  return { mutations: writesOf(k, trails), after: new Map(trails.map((t) => [addressKey(t.address), t.states.at(-1)])) };
}

/**
 * The writes that take the projection through each aggregate's trail (fold/evolve.ts Fold):
 * one per aggregate that changed, written as its last state, dropping the index entries of every
 * state before it that the last one lacks. Nothing is evolved here: the fold ran once, upstream.
 */
export function writesOf(k: Keys, trails: Trail[]): Mutation[] {
  const out: Mutation[] = [];
  for (const t of trails) {
    const after = t.states.at(-1);
    if (!after) continue;
    const seen = new Map<string, Member>();
    for (const s of t.states) for (const m of memberships(k, s)) seen.set(memberId(m), m);
    out.push(writeOf(k, after, seen));
  }
  return out;
}

/** The whole projection of a fold: every key a rebuild from the log leaves (tombstones, which expire, left out). */
export function projectionOf(k: Keys, states: Iterable<Aggregate>): Map<string, Stored> {
  const hashes = new Map<string, Hash>();
  const sets = new Map<string, Set<string>>();
  const hset = (key: string, field: string, value: string) => {
    const h = hashes.get(key) ?? {};
    hashes.set(key, h);
    h[field] = value;
  };
  for (const s of states) {
    if (s.kind === "name") {
      hset(k.dirSeq(s.of), s.name, String(s.seq));
      if (s.uuid) hset(k.dir(s.of), k.dirField(s.of, s.name), s.uuid);
      continue;
    }
    const hash = recordHash(s);
    if (!hash) continue;
    hash._seq = String(s.seq); // recordHash's own new object
    hashes.set(k.record(s.kind, s.uuid), hash);
    for (const m of memberships(k, s)) {
      const set = sets.get(m.key) ?? new Set<string>();
      sets.set(m.key, set);
      set.add(m.member);
    }
  }
  const out = new Map<string, Stored>();
  for (const [key, hash] of hashes) out.set(key, { hash });
  for (const [key, set] of sets) out.set(key, { members: [...set] });
  return out;
}

/**
 * A rebuild's writes of `states` into its wiped projection: each record hash whole with its guard
 * (`_seq`), a tombstone with its TTL, and the keys many states share (a kind's request names and
 * their sequences, the indexes, a node's claims) one command per key for all of `states`. What
 * they leave is `projectionOf` the states (plus the tombstones); the aggregates' guards are set as
 * the Lua applier sets them.
 *
 * A rebuild writes aggregates while it reads the log (projection/projector.ts), so one may change after
 * it was written: `written` (by `addressKey`) holds what the rebuild wrote of it before. Its
 * record hash is then deleted before it is written whole again, and the index entries and the
 * name's directory entry that the earlier state had and this one lacks are removed.
 */
export function freshWrites(k: Keys, states: Iterable<Aggregate>, written?: ReadonlyMap<string, Aggregate>): RedisOp[] {
  const ops: RedisOp[] = [];
  const shared = new Map<string, RedisOp>();
  const add = (cmd: string, key: string, ...args: (string | number)[]) => {
    const id = `${cmd}\u0000${key}`;
    const op = shared.get(id);
    if (op) op.push(...args);
    else shared.set(id, [cmd, key, ...args]);
  };
  for (const s of states) {
    const was = written?.size ? written.get(addressKey(addressOfState(s))) : undefined;
    if (s.kind === "name") {
      add("HSET", k.dirSeq(s.of), s.name, s.seq);
      if (s.uuid) add("HSET", k.dir(s.of), k.dirField(s.of, s.name), s.uuid);
      else if (was?.kind === "name" && was.uuid) ops.push(["HDEL", k.dir(s.of), k.dirField(s.of, s.name)]);
      continue;
    }
    const key = k.record(s.kind, s.uuid);
    if (was) ops.push(["DEL", key]);
    const hash = recordHash(s);
    if (!hash) ops.push(["HSET", key, "_seq", s.seq, "_gone", "1"], ["PEXPIRE", key, TOMBSTONE_TTL_MS]);
    else {
      const hset: RedisOp = ["HSET", key];
      for (const f in hash) hset.push(f, hash[f] as string);
      hset.push("_seq", s.seq);
      ops.push(hset);
    }
    const keep = memberships(k, s);
    if (was) {
      const kept = new Set(keep.map(memberId));
      for (const m of memberships(k, was)) if (!kept.has(memberId(m))) ops.push([m.type === "z" ? "ZREM" : "SREM", m.key, m.member]);
    }
    for (const m of keep) {
      if (m.type === "z") add("ZADD", m.key, 0, m.member);
      else add("SADD", m.key, m.member);
    }
  }
  return [...ops, ...shared.values()];
}
