/**
 * The journal's Redis function library (Redis 7 functions, docs/security.md "Redis ACL of the
 * journal"): every multi-step change of the projection and the locks is one function, loaded once
 * by an admin identity (`FUNCTION LOAD REPLACE`) and called by the journal with FCALL. The
 * journal's Redis user may call these functions and nothing else that runs code (no EVAL,
 * EVALSHA, SCRIPT or FUNCTION): it cannot run an arbitrary script, and a runaway one cannot be
 * started by it.
 *
 * Versioned: the library is `csi_journal_v<N>` and its functions `csi_journal_v<N>_<name>`, so a
 * newer journal's library is loaded next to an older one's (a rolling upgrade: old replicas keep
 * calling theirs) and never replaces it with different code. `redis-functions.test.ts` pins the
 * code's SHA-256 per version: changing the Lua means a new version.
 *
 * Every key a function touches is declared in KEYS (the ACL checks them before the function runs,
 * so a call naming another cluster's key is refused before it writes anything; Redis Cluster routes
 * by them), except one derived key in lock_and_read (a record read through a name), which must
 * share the projection key's hash tag and is checked by the ACL at its redis.call. Write commands
 * given by the caller (the projection's planned writes) are limited to the eight the planner uses,
 * checked before the first write. Each function also keeps the cluster's key index
 * (`{c}:projection.keys`, Keys.keyIndex) up to date: a sorted set of every projection key the
 * functions wrote, score 0 for a live key and its expiry (ms) for a tombstone, so the journal
 * lists and wipes its projection without SCAN (which would list every key of the server).
 */
import { createHash } from "node:crypto";
import { DriverError } from "@csi/contracts";
import type { Redis } from "ioredis";

/** Bump with any change of the Lua below (and pin the new SHA-256 in redis-functions.test.ts). */
export const JOURNAL_FUNCTIONS_VERSION = 5;
export const JOURNAL_LIBRARY = `csi_journal_v${JOURNAL_FUNCTIONS_VERSION}`;
const fn = (name: string) => `${JOURNAL_LIBRARY}_${name}`;

/** The functions' names (global in Redis: each carries the library's name and version). */
export const JOURNAL_FUNCTIONS = {
  version: fn("version"),
  lockAndRead: fn("lock_and_read"),
  applyAndUnlock: fn("apply_and_unlock"),
  renew: fn("renew"),
  beginRebuild: fn("begin_rebuild"),
  writeFresh: fn("write_fresh"),
  markComplete: fn("mark_complete"),
  dump: fn("dump"),
} as const;

const LUA = `#!lua name=${JOURNAL_LIBRARY}
-- The csi-event-driver journal's functions (services/journal/src/adapters/redis-functions.ts).

-- The writes a caller may pass in (the projection planner's), and those that create a key.
local WRITES = {HSET = true, HDEL = true, DEL = true, ZADD = true, ZREM = true, SADD = true, SREM = true, PEXPIRE = true}
local CREATES = {HSET = true, ZADD = true, SADD = true}

local function fail(msg) error('csi: ' .. msg, 0) end

-- A write given as (command, index into KEYS): checked before anything is written.
local function check_op(keys, cmd, ki)
  if not WRITES[cmd] then fail('command ' .. tostring(cmd) .. ' is not a projection write') end
  if type(ki) ~= 'number' or keys[ki] == nil or ki < 3 then fail('key index ' .. tostring(ki) .. ' is not a declared key') end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ZADD of many (score, member) pairs, a thousand at a time (unpack's limit).
local function zadd_all(idx, pairs_)
  for i = 1, #pairs_, 2000 do
    redis.call('ZADD', idx, unpack(pairs_, i, math.min(i + 1999, #pairs_)))
  end
end

-- The key index after writes: marks[key] = true (written, live), a number (its tombstone TTL in ms)
-- or false (only removals: unindexed if the key is gone). Expired tombstones leave the index.
local function index(idx, marks)
  local live, now = {}, nil
  for k, v in pairs(marks) do
    if v == true then
      live[#live + 1] = 0
      live[#live + 1] = k
    elseif v == false then
      if redis.call('EXISTS', k) == 0 then redis.call('ZREM', idx, k) end
    else
      now = now or now_ms()
      redis.call('ZADD', idx, now + v, k)
    end
  end
  zadd_all(idx, live)
  if now then redis.call('ZREMRANGEBYSCORE', idx, '(0', now) end
end

local function mark(marks, cmd, k, arg)
  if cmd == 'PEXPIRE' then marks[k] = tonumber(arg)
  elseif CREATES[cmd] then
    if type(marks[k]) ~= 'number' then marks[k] = true end
  elseif marks[k] == nil then marks[k] = false end
end

-- KEYS: the projection key, the locks, the hashes to read whole, the hashes to read a field of, the
-- sets to count, then (with an own-name lock prefix) the name directory and its fence hash.
-- ARGV: token, ttl ms, the four counts, a record key prefix ('' for none: else also read the hash
-- <prefix><value of the first field>), an own-name lock prefix and directory field prefix ('' for
-- none: else also lock <lock prefix><name of the first hash read whole> and read that name's
-- directory entry and fence), then one field name per field key.
-- Takes every lock (all or none) and reads. Returns {0, busy lock} or {1, complete, json...}.
local function lock_and_read(keys, args)
  local nl, na, nf, nc = tonumber(args[3]), tonumber(args[4]), tonumber(args[5]), tonumber(args[6])
  local r, ol, of = args[7], args[8], args[9]
  local no = ol ~= '' and 2 or 0
  if #keys ~= 1 + nl + na + nf + nc + no or #args ~= 9 + nf then fail('lock_and_read: keys and arguments do not match their counts') end
  local tag = string.match(keys[1], '^{[^}]*}:')
  if r ~= '' and (not tag or string.sub(r, 1, #tag) ~= tag) then fail('lock_and_read: the record prefix is not in the projection key\\'s hash tag') end
  if ol ~= '' and (not tag or string.sub(ol, 1, #tag) ~= tag) then fail('lock_and_read: the name lock prefix is not in the projection key\\'s hash tag') end
  local taken = {}
  local function take(k)
    if redis.call('SET', k, args[1], 'NX', 'PX', args[2]) then
      taken[#taken + 1] = k
      return true
    end
    for _, t in ipairs(taken) do redis.call('DEL', t) end
    return false
  end
  for i = 2, 1 + nl do
    if not take(keys[i]) then return {0, keys[i]} end
  end
  local o = 1 + nl
  local all = {}
  for i = 1, na do all[i] = redis.call('HGETALL', keys[o + i]) end
  o = o + na
  local own = {}
  if ol ~= '' and all[1] then
    local name
    for i = 1, #all[1], 2 do
      if all[1][i] == 'csi.volname' then name = all[1][i + 1] end
    end
    if name and name ~= '' then
      if not take(ol .. name) then return {0, ol .. name} end
      own = {name, redis.call('HGET', keys[#keys - 1], of .. name) or '', redis.call('HGET', keys[#keys], name) or ''}
    end
  end
  local fields = {}
  for i = 1, nf do fields[i] = redis.call('HGET', keys[o + i], args[9 + i]) or '' end
  o = o + nf
  local counts = {}
  for i = 1, nc do counts[i] = redis.call('SCARD', keys[o + i]) end
  local rec = {}
  if r ~= '' and fields[1] and fields[1] ~= '' then rec = redis.call('HGETALL', r .. fields[1]) end
  return {1, redis.call('HGET', keys[1], 'complete') == '1' and 1 or 0, cjson.encode(all), cjson.encode(fields), cjson.encode(counts), cjson.encode(rec), cjson.encode(own)}
end

-- KEYS: the projection key, the key index, then every key below (by index into KEYS).
-- ARGV[1] json [{g=[key, field], s=seq, o=[[cmd, key, args...]]}], ARGV[2] json [[lock key, token]],
-- ARGV[3] json condition: {} = an operation's events (the projection must be complete);
-- {p=watermark the batch starts from, w=its last seq} (a catch-up: also on a complete projection only);
-- ARGV[4] json [] or [[key index, token, ttl ms]]: a mark set as the locks go (a request served),
-- whatever the projection's answer.
-- Returns the number of mutations applied, or -1 when refused (nothing written; the locks are released either way).
local function apply_and_unlock(keys, args)
  local muts = cjson.decode(args[1])
  local locks = cjson.decode(args[2])
  local c = cjson.decode(args[3])
  local sets = cjson.decode(args[4] or '[]')
  for _, m in ipairs(muts) do
    check_op(keys, 'HSET', m.g[1])
    for _, op in ipairs(m.o) do check_op(keys, op[1], op[2]) end
  end
  for _, lt in ipairs(locks) do
    if type(lt[1]) ~= 'number' or lt[1] < 3 or keys[lt[1]] == nil then fail('apply_and_unlock: a lock is not a declared key') end
  end
  for _, mk in ipairs(sets) do
    if type(mk[1]) ~= 'number' or mk[1] < 3 or keys[mk[1]] == nil then fail('apply_and_unlock: a mark is not a declared key') end
  end
  local p, idx = keys[1], keys[2]
  local ok = redis.call('HGET', p, 'complete') == '1'
  local cur = tonumber(redis.call('HGET', p, 'applied') or '0')
  if ok and c.w and cur < c.p then ok = false end
  local applied = 0
  if ok then
    local marks = {}
    for _, m in ipairs(muts) do
      local g = keys[m.g[1]]
      local seq = tonumber(redis.call('HGET', g, m.g[2]) or '0')
      if m.s > seq then
        for _, op in ipairs(m.o) do
          local k = keys[op[2]]
          redis.call(op[1], k, unpack(op, 3))
          mark(marks, op[1], k, op[3])
        end
        redis.call('HSET', g, m.g[2], m.s)
        mark(marks, 'HSET', g)
        applied = applied + 1
      end
    end
    index(idx, marks)
    if c.w and c.w > cur then redis.call('HSET', p, 'applied', c.w) end
  end
  for _, mk in ipairs(sets) do redis.call('SET', keys[mk[1]], mk[2], 'PX', mk[3]) end
  for _, lt in ipairs(locks) do
    local k = keys[lt[1]]
    if redis.call('GET', k) == lt[2] then redis.call('DEL', k) end
  end
  if ok then return applied end
  return -1
end

-- KEYS[1] a lock; ARGV[1] its token, ARGV[2] ttl ms. 1 if still ours (and renewed), else 0.
local function renew(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('PEXPIRE', keys[1], args[2]) end
  return 0
end

-- KEYS[1] projection key; ARGV[1] epoch, ARGV[2] log id, ARGV[3] '1' = whatever the projection is;
-- else ARGV[4] the epoch ('' none) and ARGV[5] the complete mark ('1' or '0') of the projection the
-- caller judged: begun only if the meta still has both (no other rebuild began or finished since).
local function begin_rebuild(keys, args)
  if args[3] ~= '1' then
    local epoch = redis.call('HGET', keys[1], 'epoch') or ''
    local complete = redis.call('HGET', keys[1], 'complete') == '1' and '1' or '0'
    if epoch ~= args[4] or complete ~= args[5] then return 0 end
  end
  redis.call('DEL', keys[1])
  redis.call('HSET', keys[1], 'epoch', args[1], 'log', args[2], 'applied', 0)
  return 1
end

-- A rebuild's chunk of writes into its wiped projection. KEYS: the projection key, the key index,
-- then every key the writes touch. ARGV[1] epoch, ARGV[2] index of this chunk (the meta's 'written'
-- must equal it), ARGV[3] '' or the log's last seq (the last chunk: sets 'applied'), ARGV[4] json:
-- the writes as one flat array, each as <count> <cmd> <key index> <args…> (count = 2 + #args).
-- The first write of the rebuild into a key (not in the index yet: the wipe emptied it) deletes the
-- key first, so nothing an older projection left there survives. A later chunk may write a key again
-- (an aggregate that changed after the rebuild wrote it is written again: its hash whole, the index
-- entries it lost removed), so the key index is kept as apply_and_unlock keeps it (index()): a live
-- key at 0, a tombstone at its expiry, a key that only lost members and is gone unindexed.
-- Returns 1, or 0 when refused (nothing written): not this epoch, complete, or a chunk missing.
local function write_fresh(keys, args)
  local p, idx = keys[1], keys[2]
  local a = cjson.decode(args[4])
  local i = 1
  while i <= #a do
    check_op(keys, a[i + 1], tonumber(a[i + 2]))
    i = i + tonumber(a[i]) + 1
  end
  if redis.call('HGET', p, 'epoch') ~= args[1] or redis.call('HEXISTS', p, 'complete') == 1 then return 0 end
  local n = tonumber(args[2])
  if tonumber(redis.call('HGET', p, 'written') or '0') ~= n then return 0 end
  -- new[k]: indexed just now (at 0, as a live key), so only a TTL or a removal changes its entry.
  local new, first = {}, {}
  i = 1
  while i <= #a do
    local k = keys[tonumber(a[i + 2])]
    if new[k] == nil then
      new[k] = redis.call('ZADD', idx, 'NX', 0, k) == 1
      if new[k] then first[#first + 1] = k end
    end
    i = i + tonumber(a[i]) + 1
  end
  for j = 1, #first, 1000 do redis.call('DEL', unpack(first, j, math.min(j + 999, #first))) end
  local marks = {}
  i = 1
  while i <= #a do
    local c = tonumber(a[i])
    local cmd, k = a[i + 1], keys[tonumber(a[i + 2])]
    redis.call(cmd, k, unpack(a, i + 3, i + c))
    if not (new[k] and CREATES[cmd]) then mark(marks, cmd, k, a[i + 3]) end
    i = i + c + 1
  end
  index(idx, marks)
  redis.call('HSET', p, 'written', n + 1)
  if args[3] ~= '' then redis.call('HSET', p, 'applied', args[3]) end
  return 1
end

-- KEYS[1] projection key; ARGV[1] epoch, ARGV[2] the log's last seq the rebuild replayed to.
local function mark_complete(keys, args)
  if redis.call('HGET', keys[1], 'epoch') ~= args[1] then return 0 end
  if tonumber(redis.call('HGET', keys[1], 'applied') or '0') < tonumber(args[2]) then return 0 end
  redis.call('HSET', keys[1], 'complete', 1)
  return 1
end

-- KEYS: projection keys; nothing written. Each as it is, all in one JSON array of [type, values]:
-- a hash's fields and values (flat), a set's or a sorted set's members, and 'none' with no values
-- for a key that is not there. One string to decode instead of a reply per field (the start-up
-- check reads every key of the projection).
local function dump(keys)
  local out = {}
  for i, k in ipairs(keys) do
    local t = redis.call('TYPE', k).ok
    local v = {}
    if t == 'hash' then v = redis.call('HGETALL', k)
    elseif t == 'set' then v = redis.call('SMEMBERS', k)
    elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1)
    else t = 'none' end
    out[i] = {t, v}
  end
  return cjson.encode(out)
end

redis.register_function{function_name = '${JOURNAL_FUNCTIONS.dump}', callback = dump, flags = {'no-writes'}}
redis.register_function{function_name = '${JOURNAL_FUNCTIONS.version}', callback = function() return ${JOURNAL_FUNCTIONS_VERSION} end, flags = {'no-writes'}}
redis.register_function('${JOURNAL_FUNCTIONS.lockAndRead}', lock_and_read)
redis.register_function('${JOURNAL_FUNCTIONS.applyAndUnlock}', apply_and_unlock)
redis.register_function('${JOURNAL_FUNCTIONS.renew}', renew)
redis.register_function('${JOURNAL_FUNCTIONS.beginRebuild}', begin_rebuild)
redis.register_function('${JOURNAL_FUNCTIONS.writeFresh}', write_fresh)
redis.register_function('${JOURNAL_FUNCTIONS.markComplete}', mark_complete)
`;

/** The library's source, as `FUNCTION LOAD` takes it. */
export const JOURNAL_LIBRARY_CODE: string = LUA;

/** SHA-256 (hex) of the library's source: what the version pins. */
export const journalLibrarySha256 = (): string => createHash("sha256").update(JOURNAL_LIBRARY_CODE).digest("hex");

/** Redis's answer to an FCALL of a function no library defines. */
export const isMissingFunction = (err: unknown): boolean => /Function not found/i.test((err as Error)?.message ?? "");

/** Whether this server has the library of this version (FCALL_RO of its version function: no FUNCTION rights needed). */
export async function journalFunctionsLoaded(redis: Redis): Promise<boolean> {
  try {
    return Number(await redis.fcall_ro(JOURNAL_FUNCTIONS.version, 0)) === JOURNAL_FUNCTIONS_VERSION;
  } catch (err) {
    if (isMissingFunction(err)) return false;
    throw err;
  }
}

/**
 * Load (or replace with the same code) this version's library: needs the FUNCTION command, which
 * only an admin identity has once the ACL is on (the default user of an open Redis has it). Other
 * versions' libraries are left alone: a journal of another version may still call them.
 */
export async function loadJournalFunctions(redis: Redis): Promise<{ library: string; version: number; sha256: string }> {
  await redis.call("FUNCTION", "LOAD", "REPLACE", JOURNAL_LIBRARY_CODE);
  return { library: JOURNAL_LIBRARY, version: JOURNAL_FUNCTIONS_VERSION, sha256: journalLibrarySha256() };
}

/** The csi_journal_v* libraries on the server (FUNCTION LIST: admin only). */
export async function journalLibraries(redis: Redis): Promise<string[]> {
  const list = (await redis.call("FUNCTION", "LIST", "LIBRARYNAME", "csi_journal_v*")) as unknown[];
  const names: string[] = [];
  for (const lib of list) {
    const flat = Array.isArray(lib) ? (lib as unknown[]) : [];
    const i = flat.indexOf("library_name");
    const name = i >= 0 ? flat[i + 1] : undefined;
    if (typeof name === "string" && /^csi_journal_v\d+$/.test(name)) names.push(name);
  }
  return names.sort();
}

/**
 * Make sure the library is there (the journal at start, and a store whose FCALL found it
 * missing): loaded if this identity may (an open Redis), else a clear Unavailable naming the
 * admin's step. Returns whether it loaded the library itself.
 */
export async function ensureJournalFunctions(redis: Redis): Promise<boolean> {
  if (await journalFunctionsLoaded(redis)) return false;
  try {
    await loadJournalFunctions(redis);
    return true;
  } catch (err) {
    if (!/NOPERM/.test((err as Error)?.message ?? "")) throw err;
    throw new DriverError(
      "Unavailable",
      `Redis has no function library ${JOURNAL_LIBRARY} and this user may not load it: an admin loads it with \`csictl redis load-functions\` (docs/operations.md)`,
      { cause: err },
    );
  }
}
