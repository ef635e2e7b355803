/**
 * Issue 24, "the extra snapshot": a create whose reservation landed in the log without its writer
 * hearing of it (the ack lost) must never leave a second live record for its name. In-process
 * journal replicas on real servers (nats-server, redis-server), each with its own projector, as
 * in test/journal-fence.test.ts; the fault is injected at the exact point: NameReserved acked,
 * then the *Reserved appended and stored, its ack lost (AppendUncertain).
 *
 * Two ways it went wrong (docs/operations.md, "The extra snapshot"):
 *   (1) the writer's own undo released the name and left the record it never heard of, live;
 *   (2) the writer's undo could not be appended (the log marked down after the lost ack), and the
 *       CO's retry, taken by another replica whose projection had the name but not the record,
 *       judged the record "missing" and released the name without ending the record.
 * Either way the retry then reserved the name afresh: two live records for one name, one of them
 * never told to the caller. The log itself (folded) is the judge, not a projection. Group
 * snapshots, both ways, with the ack lost of the group's GroupSnapshotReserved or of a member's
 * SnapshotReserved (the members carry the group's name): only the group told and its members live.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { DriverError, type EventBody, type Kind } from "@csi/contracts";
import type { Journal } from "@csi/journal";
import { foldInto, type States } from "@csi/journal/fold";
import { AppendUncertain, JetStreamLog as EventLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { fencedAsk, journalReplica, startTestServers, type TestServers } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";

let env: TestServers;
let nc: NatsConnection;
let redis: Redis;

before(async () => {
  env = await startTestServers();
  nc = await connect({ servers: env.nats.url });
  redis = new Redis(env.redis.url);
});

after(async () => {
  await nc?.close();
  redis?.disconnect();
  await env?.dispose();
});

/**
 * An event log that loses the ack of the next event of one type: the event lands, the writer hears
 * nothing (AppendUncertain). With `downAfter`, every append after it fails Unavailable until `up()`,
 * as the journal's guarded log fails fast once an append got no answer (adapters/guarded-log.ts).
 */
class LosingAcks extends EventLog {
  #lose?: EventBody["type"];
  #downAfter = false;
  #down = false;
  loseNext(type: EventBody["type"], downAfter = false): void {
    this.#lose = type;
    this.#downAfter = downAfter;
  }
  up(): void {
    this.#down = false;
  }
  override async append(...args: Parameters<EventLog["append"]>): ReturnType<EventLog["append"]> {
    if (this.#down) throw new DriverError("Unavailable", "event log unavailable: marked down after an append got no answer (test)");
    const stored = await super.append(...args);
    if (this.#lose === args[0].body.type) {
      this.#lose = undefined;
      this.#down = this.#downAfter;
      throw new AppendUncertain({ cause: new Error("ack lost (test)") });
    }
    return stored;
  }
}

/** Two replicas of `cluster`: `a` on a log that loses acks, `b` on a plain one; each has its own projector. */
async function replicas(cluster: string): Promise<{ a: Journal; b: Journal; lossy: LosingAcks; plain: EventLog }> {
  const root = path.join(env.dir, "pools", cluster, "default");
  const lossy = new LosingAcks(nc, { cluster });
  const plain = new EventLog(nc, { cluster });
  await lossy.ensureStream();
  const pool = () => new FilePool({ name: "default", id: 1, root });
  return {
    a: journalReplica({ cluster, dir: env.dir, redis, events: lossy, pool: pool() }),
    b: journalReplica({ cluster, dir: env.dir, redis, events: plain, pool: pool() }),
    lossy,
    plain,
  };
}

/** The live records named `name`, by kind (uuids sorted), as the whole log folds. */
async function liveRecordsNamed(log: EventLog, name: string): Promise<Partial<Record<Kind, string[]>>> {
  const states: States = new Map();
  await log.read(1, async (batch) => void foldInto(states, batch));
  const live: Partial<Record<Kind, string[]>> = {};
  for (const s of states.values()) {
    if (s.kind === "name" || s.record?.name !== name) continue;
    live[s.kind] = [...(live[s.kind] ?? []), s.uuid].sort();
  }
  return live;
}

const isUnavailable = (e: unknown) => e instanceof DriverError && e.code === "Unavailable";

/** The first try's outcome as its case says: answered (one write: what it answered), or Unavailable (undefined). */
async function firstTry(c: { oneWrite?: true }, tried: Promise<Partial<Record<Kind, string[]>>>): Promise<Partial<Record<Kind, string[]>> | undefined> {
  if (c.oneWrite) return await tried;
  await assert.rejects(tried, isUnavailable);
  return undefined;
}

/** A create of `name`: the live records it answers with, by kind (a group: itself and its members). */
type Create = (j: Journal, requestId: string) => Promise<Partial<Record<Kind, string[]>>>;

/**
 * What each case creates, the event whose ack is lost, and how its create is made (its source
 * volumes made first, on `b`). `oneWrite`: the create sends its whole reservation in one write
 * (volumes and snapshots, docs/journal.md "A create in three round trips"): the writer reads the
 * log after the lost ack, finds all of it there, and answers — the volume it answers is then the
 * only live record of its name. A group snapshot's reservation is still appended step by step:
 * the writer fails Unavailable.
 */
const cases: { id: string; what: string; lost: EventBody["type"]; oneWrite?: true; prepare: (b: Journal, name: string) => Promise<Create> }[] = [
  {
    id: "snapshot",
    what: "snapshot",
    lost: "SnapshotReserved",
    oneWrite: true,
    prepare: async (b, name) => {
      const source = await b.createVolume({ ...fencedAsk(`${name}-src`), requestId: "src" });
      return (j, requestId) =>
        j.createSnapshot({ requestId, name, sourceUuid: source.uuid, sourcePoolId: undefined, parameters: {} }).then((s) => ({ snapshot: [s.uuid] }));
    },
  },
  {
    id: "volume",
    what: "volume",
    lost: "VolumeReserved",
    oneWrite: true,
    prepare: async (_b, name) => (j, requestId) => j.createVolume({ ...fencedAsk(name), requestId }).then((v) => ({ volume: [v.uuid] })),
  },
  { id: "group", what: "group snapshot (its GroupSnapshotReserved)", lost: "GroupSnapshotReserved", prepare: groupCreate },
  { id: "member", what: "group snapshot (a member's SnapshotReserved)", lost: "SnapshotReserved", prepare: groupCreate },
];

/** A group snapshot of two volumes: the group and its members carry its name. */
async function groupCreate(b: Journal, name: string): Promise<Create> {
  const sourceUuids: string[] = [];
  for (const i of [1, 2]) sourceUuids.push((await b.createVolume({ ...fencedAsk(`${name}-src${i}`), requestId: `src${i}` })).uuid);
  return (j, requestId) =>
    j
      .createGroupSnapshot({ requestId, name, sourceUuids, parameters: {} })
      .then((g) => ({ groupsnapshot: [g.uuid], snapshot: g.snapshots.map((s) => s.uuid).sort() }));
}

describe("a reservation stored without its ack", () => {
  for (const c of cases) {
    test(`${c.what}: the writer's own undo leaves no live record behind its name`, async () => {
      const { a, b, lossy, plain } = await replicas(`xs-own-${c.id}`);
      const name = `${c.id}-own`;
      const create = await c.prepare(b, name);

      lossy.loseNext(c.lost);
      const first = await firstTry(c, create(a, "first"));
      // The CO retries; either replica may take it.
      const told = await create(b, "retry");
      if (first) assert.deepEqual(first, told, "the retry answers what the first try answered");
      assert.deepEqual(await create(a, "retry-2"), told, "both replicas answer the same");
      assert.deepEqual(await liveRecordsNamed(plain, name), told, `the live records named ${name}: only those the CO was told of`);
    });

    test(`${c.what}: a retry on another replica, whose projection has the name but not the record, leaves no second record`, async () => {
      const { a, b, lossy, plain } = await replicas(`xs-other-${c.id}`);
      const name = `${c.id}-other`;
      const create = await c.prepare(b, name);

      lossy.loseNext(c.lost, true); // and A's log is down for appends afterwards: its undo cannot be appended
      const first = await firstTry(c, create(a, "first"));
      // B never had a reason to catch up: it reads the projection as A left it.
      const told = await create(b, "retry");
      if (first) assert.deepEqual(first, told, "the retry answers what the first try answered");
      lossy.up();
      assert.deepEqual(await create(a, "retry-2"), told, "both replicas answer the same");
      assert.deepEqual(await liveRecordsNamed(plain, name), told, `the live records named ${name}: only those the CO was told of`);
    });
  }
});
