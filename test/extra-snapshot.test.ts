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
 * never told to the caller. The log itself (folded) is the judge, not a projection.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { DriverError, type EventBody } from "@csi/contracts";
import { EventLog } from "@csi/journal/operator";
import { AppendUncertain, FilePool, foldInto, type Journal, type States } from "@csi/journal/testing";
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

/** The live records of a kind that carry `name`, as the whole log folds. */
async function liveRecordsNamed(log: EventLog, kind: "volume" | "snapshot", name: string): Promise<string[]> {
  const states: States = new Map();
  await log.read(1, async (batch) => void foldInto(states, batch));
  return [...states.values()].flatMap((s) => (s.kind === kind && s.record?.name === name ? [s.uuid] : []));
}

const isUnavailable = (e: unknown) => e instanceof DriverError && e.code === "Unavailable";

describe("a reservation stored without its ack", () => {
  for (const kind of ["snapshot", "volume"] as const) {
    const reserved = kind === "snapshot" ? "SnapshotReserved" : "VolumeReserved";

    test(`${kind}: the writer's own undo leaves no live record behind its name`, async () => {
      const cluster = `xs-own-${kind}`;
      const { a, b, lossy, plain } = await replicas(cluster);
      const source = await b.createVolume({ ...fencedAsk("src"), requestId: "src" });
      const name = `${kind}-own`;
      const create = (j: Journal, requestId: string) =>
        kind === "snapshot"
          ? j.createSnapshot({ requestId, name, sourceUuid: source.uuid, sourcePoolId: undefined, parameters: {} }).then((s) => s.uuid)
          : j.createVolume({ ...fencedAsk(name), requestId }).then((v) => v.uuid);

      lossy.loseNext(reserved);
      await assert.rejects(create(a, "first"), isUnavailable);
      // The CO retries; either replica may take it.
      const told = await create(b, "retry");
      assert.equal(await create(a, "retry-2"), told, "both replicas answer the same");
      assert.deepEqual(await liveRecordsNamed(plain, kind, name), [told], `one live ${kind} record for ${name}: the one the CO was told of`);
    });

    test(`${kind}: a retry on another replica, whose projection has the name but not the record, leaves no second record`, async () => {
      const cluster = `xs-other-${kind}`;
      const { a, b, lossy, plain } = await replicas(cluster);
      const source = await b.createVolume({ ...fencedAsk("src"), requestId: "src" });
      const name = `${kind}-other`;
      const create = (j: Journal, requestId: string) =>
        kind === "snapshot"
          ? j.createSnapshot({ requestId, name, sourceUuid: source.uuid, sourcePoolId: undefined, parameters: {} }).then((s) => s.uuid)
          : j.createVolume({ ...fencedAsk(name), requestId }).then((v) => v.uuid);

      lossy.loseNext(reserved, true); // and A's log is down for appends afterwards: its undo cannot be appended
      await assert.rejects(create(a, "first"), isUnavailable);
      // B never had a reason to catch up: it reads the projection as A left it.
      const told = await create(b, "retry");
      lossy.up();
      assert.equal(await create(a, "retry-2"), told, "both replicas answer the same");
      assert.deepEqual(await liveRecordsNamed(plain, kind, name), [told], `one live ${kind} record for ${name}: the one the CO was told of`);
    });
  }
});
