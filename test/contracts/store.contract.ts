/**
 * What every JournalStore (services/journal/src/projection/port.ts) does, as one suite run against
 * each implementation (test/store.test.ts: RedisStore on a real redis-server, MemoryStore):
 * locks (all or none, busy, released and renewed with their token only, expiring by their TTL),
 * lockAndRead of states, the record a name points at and node claims, applyAndUnlock of trails
 * folded from events (domain Fold) and what the reads and indexes then show, the sequence guard,
 * refusals on an incomplete projection, replay batches and the watermark, a rebuild's life
 * (epochs, chunks in order, complete, wipe), the rebuild lock, and the start-up comparison
 * (differences, in addresses and indexes; recordCount).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { afterEach, beforeEach, describe, test } from "node:test";
import { type Address, type Aggregate, addressKey, addressOfState, Fold, foldInto, type States, type Trail } from "@csi/journal/fold";
import type { LogRecord } from "@csi/journal/log";
import { differenceName, type IndexOf, type JournalStore, type LockOn, type LockResult, type StateMap } from "@csi/journal/projection";
import { events, GRP, SNAP, VOL } from "@csi/journal/test-support";

/** One fresh, empty store (no projection, no locks). */
export interface StoreUnderTest {
  store: JournalStore;
  close(): Promise<void>;
}

const LOG = "log-1";
const TTL = 10_000;
/** A TTL the tests wait out (by polling the store). */
const SHORT = 100;

const newEpoch = () => randomBytes(16).toString("hex");
const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;

const vol = { kind: "volume", uuid: VOL } as const;
const snap = { kind: "snapshot", uuid: SNAP } as const;
const grp = { kind: "groupsnapshot", uuid: GRP } as const;
const volName = { kind: "name", of: "volume", name: "pvc" } as const;
const snapName = { kind: "name", of: "snapshot", name: "snap" } as const;

const nameLock: LockOn = { kind: "name", of: "volume", name: "pvc" };
const volLock: LockOn = { kind: "volume", uuid: VOL };
const imageLock: LockOn = { kind: "image", pool: "default", imageName: `csi-vol-${VOL}` };
const snapLock: LockOn = { kind: "snapshot", uuid: SNAP };

/** A volume's life so far (seq 1–8): its name, reserved, made, claimed on n1 and n2; a snapshot of it (its name, reserved, cut). */
export function volumeLife(e: ReturnType<typeof events> = events()): LogRecord[] {
  return [
    e.nameReserved("volume", "pvc", VOL),
    e.volReserved({
      parameters: { fs: "ext4" },
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER", mountFlags: ["noatime"] }],
      mutableParameters: { readIOPS: "5" },
    }),
    e.volCreated(),
    e.claimed("n1"),
    e.claimed("n2"),
    e.nameReserved("snapshot", "snap", SNAP),
    e.snapReserved(),
    e.snapCreated(),
  ];
}

/** The trails of `records` folded (once) from the states before them. */
export function trailsOf(records: LogRecord[], before: StateMap = new Map()): Trail[] {
  const fold = new Fold();
  for (const [key, s] of before) fold.know(key, s);
  fold.apply(records);
  return fold.trails();
}

/** Every aggregate's state after `records`. */
export const folded = (records: LogRecord[]): States => foldInto(new Map(), records);

/** `states` as a read of their addresses returns them. */
const asRead = (states: Iterable<Aggregate>): StateMap => new Map([...states].map((s) => [addressKey(addressOfState(s)), s]));

/** What a read of `addresses` returns when the projection holds none of them. */
const none = (...addresses: Address[]): StateMap => new Map(addresses.map((a) => [addressKey(a), undefined]));

/** Poll `check` until it holds (bounded: fails after `ms`). */
async function eventually(check: () => Promise<boolean>, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function busy(res: LockResult, lock: LockOn, why: string): void {
  assert.deepEqual(res, { ok: false, busy: lock }, why);
}

function read(res: LockResult, why = "the locks were taken") {
  assert.ok(res.ok, `${why}: busy ${JSON.stringify(!res.ok && res.busy)}`);
  return res.read;
}

export function storeContract(name: string, make: () => Promise<StoreUnderTest>): void {
  describe(`JournalStore contract: ${name}`, () => {
    let t: StoreUnderTest;
    let store: JournalStore;
    beforeEach(async () => {
      t = await make();
      store = t.store;
    });
    afterEach(() => t.close());

    const lock = (token: string, locks: LockOn[], ttlMs = TTL) => store.lockAndRead(token, ttlMs, { locks });
    const states = (addresses: Address[]) => store.readStates(addresses);
    /** The nodes' claim counts, as lockAndRead reads them. */
    const claims = async (...nodes: string[]) => Object.fromEntries(read(await store.lockAndRead("t-claims", TTL, { nodeClaims: nodes })).nodeClaims);

    /** A rebuild from `from` (every state, up to `last`), complete. */
    async function rebuild(from: Iterable<Aggregate> = [], last = 0, epoch = newEpoch()): Promise<string> {
      assert.equal(await store.beginRebuild(epoch, LOG, "force"), true);
      await store.wipeProjection();
      assert.equal(await store.writeFresh(epoch, 0, [...from], last), true);
      assert.equal(await store.markComplete(epoch, last), true);
      return epoch;
    }

    test("an empty store: no projection, nothing complete, every apply refused (-1), nothing read", async () => {
      assert.equal(await store.projectionMeta(), undefined);
      assert.equal(await store.projectionComplete(), false);
      assert.equal(await store.recordCount(), 0);
      const trails = trailsOf(volumeLife());
      assert.equal(await store.applyAndUnlock(trails, [], "t"), -1, "an operation's writes");
      assert.equal(await store.applyBatch(trails, { prev: 0, to: 8 }), -1, "a replay batch");
      assert.deepEqual(await states([vol, volName]), none(vol, volName));
      assert.equal(await store.completeStates([vol]), undefined);
      assert.equal(await store.completeIndexPage({ kind: "volume" }, undefined, 0), undefined);
      const got = read(await store.lockAndRead("t", TTL, { states: [vol], nodeClaims: ["n1"] }));
      assert.deepEqual(got, { complete: false, states: none(vol), nodeClaims: new Map([["n1", 0]]) });
    });

    test("locks are taken all or none; a lock held is busy, to its own token too; busy names it", async () => {
      read(await lock("t1", [nameLock, volLock]));
      busy(await lock("t2", [imageLock, volLock]), volLock, "the second is held");
      read(await lock("t3", [imageLock]), "the first was given back when the second was busy");
      busy(await lock("t1", [nameLock]), nameLock, "held, even by the same token");
      busy(await lock("t4", [snapLock, imageLock]), imageLock, "an image's lock");
      read(await lock("t4", [snapLock]));
      // Another kind's name or uuid is another lock.
      read(
        await lock("t5", [
          { kind: "name", of: "snapshot", name: "pvc" },
          { kind: "snapshot", uuid: VOL },
          { kind: "image", pool: "other", imageName: `csi-vol-${VOL}` },
        ]),
      );
    });

    test("applyAndUnlock releases the locks held with its token only, also when it refuses the writes", async () => {
      await rebuild();
      read(await lock("t1", [nameLock, volLock]));
      assert.equal(await store.applyAndUnlock([], [nameLock, volLock], "t2"), 0, "nothing to write");
      busy(await lock("t3", [nameLock]), nameLock, "another token released nothing");
      busy(await lock("t3", [volLock]), volLock, "nor that one");
      assert.equal(await store.applyAndUnlock([], [nameLock], "t1"), 0);
      read(await lock("t3", [nameLock]), "released with its token");
      busy(await lock("t3", [volLock]), volLock, "the lock not named stays held");
      assert.equal(await store.beginRebuild(newEpoch(), LOG, "force"), true, "the projection is incomplete now");
      assert.equal(await store.applyAndUnlock(trailsOf(volumeLife()), [volLock], "t1"), -1, "refused");
      read(await lock("t4", [volLock]), "released all the same");
    });

    test("applyAndUnlock's marks are set in the same step, also when it refuses the writes; each lasts its own TTL; marksOf reads them", async () => {
      await rebuild();
      const served: LockOn = { kind: "served", requestId: "r-mark" };
      const answer: LockOn = { kind: "answer", requestId: "r-mark" };
      read(await lock("t1", [nameLock]));
      assert.deepEqual(await store.marksOf([served, answer]), [undefined, undefined], "no mark before");
      const kept = JSON.stringify({ reply: { uuid: VOL, note: "ünïcode" } });
      const marks = [
        { lock: served, token: "served", ttlMs: 60_000 },
        { lock: answer, token: kept, ttlMs: SHORT },
      ];
      assert.equal(await store.applyAndUnlock([], [nameLock], "t1", marks), 0);
      assert.deepEqual(await store.marksOf([served, answer]), ["served", kept], "marked, the answer kept as it was given");
      await eventually(async () => (await store.marksOf([answer]))[0] === undefined, "the answer goes after its own TTL");
      assert.deepEqual(await store.marksOf([served]), ["served"], "the mark stays");
      read(await lock("t2", [nameLock]), "the locks released");
      assert.equal(await store.beginRebuild(newEpoch(), LOG, "force"), true, "the projection is incomplete now");
      const other: LockOn = { kind: "served", requestId: "r-refused" };
      assert.equal(await store.applyAndUnlock(trailsOf(volumeLife()), [nameLock], "t2", [{ lock: other, token: "served", ttlMs: SHORT }]), -1, "refused");
      busy(await lock("t3", [other]), other, "marked all the same");
      await eventually(async () => (await lock("t3", [other])).ok, "the mark expires after its TTL");
    });

    test("renew: only with the lock's token, while it holds it; it sets the TTL", async () => {
      read(await lock("t1", [nameLock], 60_000));
      assert.equal(await store.renew(nameLock, "t2", 60_000), false, "another token");
      assert.equal(await store.renew(volLock, "t1", 60_000), false, "a lock nobody holds");
      assert.equal(await store.renew(nameLock, "t1", 60_000), true);
      assert.equal(await store.renew(nameLock, "t1", SHORT), true, "shortened");
      await eventually(async () => (await lock("t2", [nameLock], 60_000)).ok, "the lock expires after the TTL it was renewed with");
      assert.equal(await store.renew(nameLock, "t1", 60_000), false, "lost: another token holds it now");
      await store.applyAndUnlock([], [nameLock], "t1");
      busy(await lock("t3", [nameLock]), nameLock, "the old holder cannot release the new holder's lock");
    });

    test("a lock expires after its TTL: then it is nobody's, and another token takes it", async () => {
      read(await lock("t1", [nameLock, volLock], SHORT));
      read(await lock("t0", [snapLock]));
      busy(await lock("t2", [volLock]), volLock, "held until it expires");
      // Busy on snapLock (held) once volLock is free: all or none, so the poll leaves volLock free.
      await eventually(async () => {
        const res = await lock("t2", [volLock, snapLock]);
        return !res.ok && res.busy.kind === "snapshot";
      }, "the lock expires");
      // nameLock was taken first, with the same TTL: expired too, and nobody touched it since.
      assert.equal(await store.renew(nameLock, "t1", TTL), false, "expired: not renewed, not even for its last holder");
      await eventually(async () => (await lock("t2", [nameLock, volLock])).ok, "another token takes both");
    });

    test("lockAndRead reads the plan's states, the record its first name points at (follow), node claims", async () => {
      const life = folded(volumeLife());
      await rebuild(life.values(), 8);
      const other = { kind: "volume", uuid: uuid(1) } as const;
      const got = read(await store.lockAndRead("t", TTL, { locks: [nameLock], states: [volName, snap, other], follow: true, nodeClaims: ["n1", "n2", "n3"] }));
      assert.equal(got.complete, true);
      assert.deepEqual(
        got.states,
        new Map([
          [addressKey(volName), life.get(addressKey(volName))],
          [addressKey(vol), life.get(addressKey(vol))],
          [addressKey(snap), life.get(addressKey(snap))],
          [addressKey(other), undefined],
        ]),
      );
      assert.deepEqual(
        got.nodeClaims,
        new Map([
          ["n1", 1],
          ["n2", 1],
          ["n3", 0],
        ]),
      );
      const plain = read(await store.lockAndRead("t", TTL, { states: [volName] }));
      assert.deepEqual([...plain.states.keys()], [addressKey(volName)], "without follow: the name only");
      const first = read(await store.lockAndRead("t", TTL, { states: [snapName, volName], follow: true }));
      assert.deepEqual(first.states.get(addressKey(snap)), life.get(addressKey(snap)), "the first name's record");
      assert.equal(first.states.has(addressKey(vol)), false, "not the second's");
      const nowhere = read(await store.lockAndRead("t", TTL, { states: [{ kind: "name", of: "volume", name: "nope" }], follow: true }));
      assert.deepEqual([...nowhere.states], [[addressKey({ kind: "name", of: "volume", name: "nope" }), undefined]], "a name that points nowhere");
      assert.equal(await store.beginRebuild(newEpoch(), LOG, "force"), true);
      const incomplete = read(await store.lockAndRead("t2", TTL, { states: [vol], nodeClaims: ["n1"] }));
      assert.equal(incomplete.complete, false, "read with the complete mark");
      assert.deepEqual(incomplete.states.get(addressKey(vol)), life.get(addressKey(vol)), "what is there is read all the same");
    });

    test("lockAndRead with ownName also locks and reads the first record's request name; its lock is in the reading, and busy names it", async () => {
      const life = folded(volumeLife());
      await rebuild(life.values(), 8);
      const got = read(await store.lockAndRead("t", TTL, { locks: [volLock], states: [vol], ownName: true }));
      assert.deepEqual(
        got.states,
        new Map([
          [addressKey(vol), life.get(addressKey(vol))],
          [addressKey(volName), life.get(addressKey(volName))],
        ]),
      );
      assert.deepEqual(got.locked, [nameLock], "the name's lock was taken");
      busy(await lock("t2", [nameLock]), nameLock, "the name is locked by the first read");
      busy(await store.lockAndRead("t3", TTL, { states: [vol], ownName: true }), nameLock, "another ownName read finds the name busy");
      await store.applyAndUnlock([], [volLock, nameLock], "t");
      read(await lock("t2", [nameLock]), "released with the others");
      const none = read(await store.lockAndRead("t4", TTL, { states: [{ kind: "volume", uuid: uuid(7) }], ownName: true }));
      assert.equal(none.locked, undefined, "no record, no name: nothing more locked");
    });

    test("applyAndUnlock writes each trail's last state: reads and indexes show it, ended aggregates as tombstones", async () => {
      await rebuild();
      const e = events();
      const first = volumeLife(e);
      assert.equal(await store.applyAndUnlock(trailsOf(first), [], "t"), 4, "one write per aggregate (two names, a volume, a snapshot)");
      let want = folded(first);
      const grpName = { kind: "name", of: "groupsnapshot", name: "grp" } as const;
      const all = [vol, volName, snap, snapName, grp, grpName];
      assert.deepEqual(await states(all), new Map([...asRead(want.values()), ...none(grp, grpName)]));
      assert.deepEqual(await store.completeStates([vol, snap]), asRead([want.get(addressKey(vol)), want.get(addressKey(snap))] as Aggregate[]));
      const page = (index: IndexOf) => store.completeIndexPage(index, undefined, 0);
      assert.deepEqual(await page({ kind: "volume" }), [VOL]);
      assert.deepEqual(await page({ kind: "snapshot" }), [SNAP]);
      assert.deepEqual(await page({ snapshotsOf: VOL }), [SNAP]);
      assert.deepEqual(await page({ snapshotsOf: uuid(9) }), []);
      assert.deepEqual(await page({ kind: "groupsnapshot" }), []);

      const second = [e.unclaimed("n1"), e.nameReserved("groupsnapshot", "grp", GRP), e.groupReserved(), e.at({ type: "GroupSnapshotCreated", uuid: GRP })];
      assert.equal(await store.applyAndUnlock(trailsOf(second, await states(all)), [], "t"), 3);
      want = folded([...first, ...second]);
      assert.deepEqual(await states(all), asRead(want.values()));
      assert.deepEqual(await page({ kind: "groupsnapshot" }), [GRP]);
      assert.deepEqual(await claims("n1", "n2"), { n1: 0, n2: 1 });

      const third = [
        e.at({ type: "GroupSnapshotDeleted", uuid: GRP }),
        e.at({ type: "SnapshotDeleted", uuid: SNAP }),
        e.nameReleased("snapshot", "snap", SNAP),
        e.unclaimed("n2"),
        e.at({ type: "VolumeDeleted", uuid: VOL }),
      ];
      assert.equal(await store.applyAndUnlock(trailsOf(third, await states(all)), [], "t"), 4);
      const got = await states(all);
      assert.deepEqual(got.get(addressKey(vol)), { kind: "volume", uuid: VOL, seq: 17 }, "a tombstone: its last seq");
      assert.deepEqual(got.get(addressKey(snap)), { kind: "snapshot", uuid: SNAP, seq: 14 });
      assert.deepEqual(got.get(addressKey(grp)), { kind: "groupsnapshot", uuid: GRP, seq: 13 });
      assert.deepEqual(got.get(addressKey(snapName)), { kind: "name", of: "snapshot", name: "snap", seq: 15 }, "a released name keeps its seq");
      assert.deepEqual(got, asRead(folded([...first, ...second, ...third]).values()));
      for (const index of [{ kind: "volume" }, { kind: "snapshot" }, { kind: "groupsnapshot" }, { snapshotsOf: VOL }] as const) {
        assert.deepEqual(await page(index), [], `ended records leave ${JSON.stringify(index)}`);
      }
      assert.deepEqual(await claims("n1", "n2"), { n1: 0, n2: 0 });
    });

    test("completeIndexPage: uuids in order, after a uuid (exclusive), at most `count` (0: all)", async () => {
      await rebuild();
      const e = events();
      const order = [4, 2, 5, 1, 3];
      const reserved = order.map((i) => e.volReserved({ uuid: uuid(i), name: `pvc-${i}` }));
      assert.equal(await store.applyAndUnlock(trailsOf(reserved), [], "t"), 5);
      const sorted = [1, 2, 3, 4, 5].map(uuid);
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, undefined, 0), sorted);
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, undefined, 2), sorted.slice(0, 2));
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, uuid(2), 2), sorted.slice(2, 4));
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, uuid(4), 2), sorted.slice(4));
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, uuid(5), 2), []);
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, uuid(3), 0), sorted.slice(3));
      assert.deepEqual(await store.completeIndexPage({ kind: "snapshot" }, undefined, 0), [], "another kind's index");
    });

    test("the sequence guard: a write older than what is held (or as old) does nothing, a tombstone is not brought back", async () => {
      await rebuild();
      const life = volumeLife();
      const trails = trailsOf(life);
      assert.equal(await store.applyAndUnlock(trails, [], "t"), 4);
      const older = trailsOf(life.slice(0, 4)); // the name (seq 1, as held) and the volume claimed on n1 only (seq 4 < 5)
      assert.equal(await store.applyAndUnlock(older, [], "t"), 0, "older: nothing written");
      assert.equal(await store.applyAndUnlock(trails, [], "t"), 0, "the same again: nothing written");
      const want = folded(life);
      assert.deepEqual(await states([vol, volName]), asRead([want.get(addressKey(vol)), want.get(addressKey(volName))] as Aggregate[]));
      assert.deepEqual(await claims("n1", "n2"), { n1: 1, n2: 1 }, "the indexes are the newer state's");
      const deleted = events(100).at({ type: "VolumeDeleted", uuid: VOL });
      assert.equal(await store.applyAndUnlock(trailsOf([deleted], await states([vol])), [], "t"), 1);
      assert.equal(await store.applyAndUnlock(trails, [], "t"), 0, "an older life does not resurrect it");
      assert.deepEqual((await states([vol])).get(addressKey(vol)), { kind: "volume", uuid: VOL, seq: 101 });
      assert.deepEqual(await store.completeIndexPage({ kind: "volume" }, undefined, 0), []);
      assert.deepEqual(await claims("n1", "n2"), { n1: 0, n2: 0 });
    });

    test("an incomplete projection refuses every apply (-1): nothing written, the watermark stays", async () => {
      const life = volumeLife();
      await rebuild(folded(life).values(), 8);
      assert.equal(await store.beginRebuild(newEpoch(), LOG, "force"), true);
      const claimed = events(8).claimed("n3");
      const before = await states([vol]);
      assert.equal(await store.applyAndUnlock(trailsOf([claimed], before), [], "t"), -1);
      assert.equal(await store.applyBatch(trailsOf([claimed], before), { prev: 8, to: 9 }), -1, "a replay batch too");
      assert.deepEqual(await states([vol]), before, "nothing written");
      assert.deepEqual(await claims("n3"), { n3: 0 });
      assert.equal((await store.projectionMeta())?.applied, 0);
      assert.equal(await store.completeStates([vol]), undefined);
    });

    test("replay batches: refused past the watermark (a gap); from it or behind it applied; the watermark moves to the batch's end", async () => {
      await rebuild([], 10);
      const applied = async () => (await store.projectionMeta())?.applied;
      assert.equal(await applied(), 10);
      const e = events(10);
      const batch = [e.nameReserved("volume", "pvc", VOL), e.volReserved(), e.volCreated()]; // 11–13
      assert.equal(await store.applyBatch(trailsOf(batch), { prev: 11, to: 13 }), -1, "11 is not applied yet");
      assert.deepEqual(await states([vol]), none(vol), "nothing written");
      assert.equal(await applied(), 10);
      assert.equal(await store.applyBatch(trailsOf(batch), { prev: 10, to: 13 }), 2);
      assert.equal(await applied(), 13);
      assert.deepEqual(await states([vol]), asRead([folded(batch).get(addressKey(vol)) as Aggregate]));
      assert.equal(await store.applyBatch(trailsOf(batch.slice(0, 2)), { prev: 10, to: 12 }), 0, "behind the watermark: the guard skips it");
      assert.equal(await applied(), 13, "the watermark does not go back");
      assert.equal(await store.applyBatch([], { prev: 13, to: 20 }), 0, "events that change no aggregate");
      assert.equal(await applied(), 20);
      assert.equal(await store.applyAndUnlock(trailsOf([e.claimed("n1")], await states([vol])), [], "t"), 1, "an operation's own writes");
      assert.equal(await applied(), 20, "move no watermark");
    });

    test("a rebuild: begun over the projection judged (or forced), refused once it changed; wiped; chunks in order on its epoch; complete at the log's end", async () => {
      assert.equal(await store.beginRebuild(newEpoch(), LOG, undefined), true, "no projection, as judged: begun");
      const life = folded(volumeLife());
      const e1 = await rebuild(life.values(), 8);
      const judged = await store.projectionMeta();
      assert.ok(judged);
      assert.deepEqual(judged, { epoch: e1, log: LOG, applied: 8, complete: true });
      assert.equal(await store.beginRebuild(newEpoch(), "log-2", undefined), false, "judged missing, but a rebuild made one since: refused");
      assert.equal(await store.beginRebuild(newEpoch(), "log-2", { ...judged, complete: false }), false, "judged incomplete, complete since");
      assert.equal(await store.beginRebuild(newEpoch(), "log-2", { ...judged, epoch: newEpoch() }), false, "another epoch");
      assert.deepEqual(await store.projectionMeta(), judged, "unchanged");

      // A complete projection of another log (the stream was restored): begun over it as judged.
      const e2 = newEpoch();
      assert.equal(await store.beginRebuild(e2, "log-2", judged), true, "begun over the complete projection judged");
      assert.deepEqual(await store.projectionMeta(), { epoch: e2, log: "log-2", applied: 0, complete: false });
      assert.equal(await store.beginRebuild(newEpoch(), "log-2", judged), false, "the same judgement a second time: refused (e2 began since)");
      const e3 = newEpoch();
      assert.equal(await store.beginRebuild(e3, "log-2", "force"), true, "forced over anything");
      assert.deepEqual(await store.projectionMeta(), { epoch: e3, log: "log-2", applied: 0, complete: false });
      assert.equal(await store.projectionComplete(), false);
      assert.equal(await store.completeStates([vol]), undefined);
      assert.equal(await store.completeIndexPage({ kind: "volume" }, undefined, 0), undefined);
      assert.deepEqual(await states([vol]), asRead([life.get(addressKey(vol)) as Aggregate]), "not wiped yet");
      const size = await store.recordCount();
      assert.ok(size > 0, `the projection holds records (${size})`);
      assert.equal(await store.wipeProjection(), size, "every record removed");
      assert.equal(await store.recordCount(), 0);
      assert.deepEqual(await states([vol, volName]), none(vol, volName));
      assert.equal(
        await store.beginRebuild(newEpoch(), LOG, await store.projectionMeta()),
        true,
        "an incomplete projection, as judged: another rebuild may begin",
      );
    });

    test("a rebuild's chunks: only on its epoch, each after every one before it, none once complete; the last sets the watermark", async () => {
      const life = [...folded(volumeLife()).values()];
      const e2 = newEpoch();
      assert.equal(await store.beginRebuild(e2, LOG, "force"), true);
      await store.wipeProjection();
      assert.equal(await store.writeFresh(e2, 1, life.slice(2), 8), false, "chunk 0 is missing");
      assert.equal(await store.writeFresh(newEpoch(), 0, life.slice(0, 2)), false, "another epoch");
      assert.deepEqual(await states([vol, volName]), none(vol, volName), "refused: nothing written");
      assert.equal(await store.writeFresh(e2, 0, life.slice(0, 2)), true);
      assert.equal(await store.writeFresh(e2, 0, life.slice(0, 2)), false, "chunk 0 again");
      assert.equal(await store.markComplete(e2, 8), false, "the watermark is not at the log's end yet");
      assert.equal(await store.writeFresh(e2, 1, life.slice(2), 8), true);
      assert.deepEqual(await store.projectionMeta(), { epoch: e2, log: LOG, applied: 8, complete: false });
      assert.equal(await store.markComplete(newEpoch(), 8), false, "another epoch");
      assert.equal(await store.markComplete(e2, 9), false, "past the watermark");
      assert.equal(await store.markComplete(e2, 8), true);
      assert.equal(await store.writeFresh(e2, 2, life), false, "complete: no more chunks");
      assert.deepEqual(await store.projectionMeta(), { epoch: e2, log: LOG, applied: 8, complete: true });
      assert.deepEqual(await store.completeStates([vol, volName, snap, snapName]), asRead(life));
      assert.deepEqual(await store.completeIndexPage({ snapshotsOf: VOL }, undefined, 0), [SNAP]);
      assert.deepEqual(await claims("n1", "n2"), { n1: 1, n2: 1 });
    });

    test("the rebuild lock: one holder; renewed and released with its token only; it expires", async () => {
      assert.equal(await store.tryRebuildLock("t1", 60_000), true);
      assert.equal(await store.tryRebuildLock("t2", 60_000), false, "held");
      assert.equal(await store.tryRebuildLock("t1", 60_000), false, "held, by the same token too");
      assert.equal(await store.renewRebuildLock("t2", 60_000), false);
      await store.releaseRebuildLock("t2");
      assert.equal(await store.tryRebuildLock("t3", 60_000), false, "another token released nothing");
      read(await lock("t3", [nameLock, volLock, imageLock]), "not one of the operations' locks");
      assert.equal(await store.renewRebuildLock("t1", SHORT), true);
      await eventually(() => store.tryRebuildLock("t2", 60_000), "the rebuild lock expires after its renewed TTL");
      assert.equal(await store.renewRebuildLock("t1", 60_000), false, "lost");
      await store.releaseRebuildLock("t1");
      assert.equal(await store.tryRebuildLock("t3", 60_000), false, "the old holder released nothing");
      await store.releaseRebuildLock("t2");
      assert.equal(await store.tryRebuildLock("t3", 60_000), true);
    });

    test("differences: none after a rebuild from the same states; after a change the aggregates and index entries that differ, again with `only`; tombstones are none", async () => {
      assert.deepEqual(await store.differences([]), [], "nothing, and nothing wanted");
      assert.equal(await store.recordCount(), 0);
      const e = events();
      const life = volumeLife(e);
      const s = folded(life);
      await rebuild(s.values(), 8);
      const size = await store.recordCount();
      assert.ok(size > 0, `the projection holds records (${size})`);
      assert.deepEqual(await store.differences(s.values()), []);
      assert.equal(await store.recordCount(), size, "the volume and the snapshot");

      const claimed = [e.claimed("n3")];
      assert.equal(await store.applyAndUnlock(trailsOf(claimed, await states([vol])), [], "t"), 1);
      const differ = await store.differences(s.values());
      assert.ok(differ.length > 0, "the volume claimed on n3 is not what the states say");
      assert.deepEqual(differ, [{ address: vol }, { address: vol, index: { claimsOf: "n3" } }], "the volume's record, and n3's claims listing it");
      assert.equal(await store.recordCount(), size);
      assert.deepEqual(await store.differences(s.values(), differ), differ, "only those: the same");
      assert.deepEqual(await store.differences(s.values(), differ.slice(0, 1)), differ.slice(0, 1), "only one of them");
      assert.deepEqual(await store.differences(s.values(), [{ address: snap }, { address: vol, index: { claimsOf: "n1" } }]), [], "only others: none");
      const s2 = folded([...life, ...claimed]);
      assert.deepEqual(await store.differences(s2.values()), [], "the states with the change");
      assert.deepEqual(await store.differences(s2.values(), differ), [], "nor those");

      const more = folded([...life, ...claimed, events(50).volReserved({ uuid: uuid(7), name: "pvc-7" })]);
      const lacking = { kind: "volume", uuid: uuid(7) } as const;
      const lacks = await store.differences(more.values());
      assert.deepEqual(
        lacks,
        [{ address: lacking }, { address: lacking, index: { kind: "volume" } }],
        "a state the store lacks: its record, and its kind's index listing it",
      );
      assert.deepEqual(lacks.map(differenceName), [`volume:${uuid(7)}`, `volume:${uuid(7)} in the volume index`], "as reports name them");

      const ended = [e.at({ type: "SnapshotDeleted", uuid: SNAP }), e.nameReleased("snapshot", "snap", SNAP)];
      assert.equal(await store.applyAndUnlock(trailsOf(ended, await states([snap, snapName])), [], "t"), 2);
      const s3 = folded([...life, ...claimed, ...ended]);
      assert.deepEqual(await store.differences(s3.values()), [], "a tombstone held is no difference");
      assert.deepEqual(
        await store.differences(s2.values(), [{ address: snap }, { address: snapName }]),
        [{ address: snapName }, { address: snap }],
        "the snapshot ended, its name released (in name order)",
      );
      await rebuild(s3.values(), 11);
      assert.deepEqual(await store.differences(s3.values()), [], "after a rebuild from them, tombstones included");
      const s4 = new Map([...s3].filter(([, a]) => !(a.kind === "snapshot" && !a.record)));
      assert.deepEqual(await store.differences(s4.values()), [], "nor one the states lack");

      const n = await store.recordCount();
      assert.equal(n, 2, "the volume, the snapshot's tombstone");
      assert.equal(await store.wipeProjection(), n);
      assert.equal(await store.recordCount(), 0);
      const wiped = await store.differences(s3.values());
      assert.ok(wiped.length > 0, "everything the states want is missing");
      assert.deepEqual(
        wiped.filter((d) => !d.index).map((d) => addressKey(d.address)),
        [...s3.values()]
          .filter((a) => a.kind === "name" || a.record)
          .map((a) => addressKey(addressOfState(a)))
          .sort(),
        "every aggregate but the tombstone",
      );
    });
  });
}
