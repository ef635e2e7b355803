/**
 * A projector whose Redis fails in the middle of a catch-up or a rebuild (issue 24: both journals
 * of test/ha.test.ts died when the Sentinel failover dropped Redis during a catch-up). The
 * catch-up's batches and the rebuild's chunks are sent ahead of their answers; when one fails,
 * the call must fail with that error after every call still out has been answered — none left
 * running, none rejecting with nobody waiting (an unhandled rejection ends a Node process).
 * In-memory adapters (MemoryLog, MemoryStore) and a real FilePool; no servers.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { setImmediate as tick } from "node:timers/promises";
import { DriverError, resolveClusters } from "@csi/contracts";
import { MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { MemoryStore, Projector } from "@csi/journal/projection";
import { createLogger, SentAhead } from "@csi/runtime";
import { testJournal } from "@csi/testkit";

const CLUSTER = "c1";
const MiB = 1024 * 1024;
const logger = createLogger("projector-failures-test", "silent");

/** A MemoryStore whose applies and rebuild chunks fail (a tick later, as a dropped connection would) while `failing`; counts the calls and their ends. */
class FailingStore extends MemoryStore {
  failing = false;
  sent = 0;
  ended = 0;
  async #maybeFail<T>(call: () => Promise<T>): Promise<T> {
    this.sent++;
    try {
      if (!this.failing) return await call();
      await tick();
      throw new DriverError("Unavailable", "redis unavailable: the Redis connection is reconnecting (test)");
    } finally {
      this.ended++;
    }
  }
  override applyAndUnlock(...a: Parameters<MemoryStore["applyAndUnlock"]>) {
    return this.#maybeFail(() => super.applyAndUnlock(...a));
  }
  override applyBatch(...a: Parameters<MemoryStore["applyBatch"]>) {
    return this.#maybeFail(() => super.applyBatch(...a));
  }
  override writeFresh(...a: Parameters<MemoryStore["writeFresh"]>) {
    return this.#maybeFail(() => super.writeFresh(...a));
  }
}

let dir: string;
let log: MemoryLog;
let store: FailingStore;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => void unhandled.push(reason);

before(async () => {
  process.on("unhandledRejection", onUnhandled);
  dir = await mkdtemp(path.join(os.tmpdir(), "csi-projector-failures-"));
  const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root: path.join(dir, "pool") }] }] }, dir).get(CLUSTER);
  assert.ok(cluster);
  log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
  store = new FailingStore();
  const projector = new Projector(log, store, logger);
  const pools = new Map([["default", new FilePool({ name: "default", id: 1, root: path.join(dir, "pool") })]]);
  const journal = testJournal({ cluster, pools, log, store, projector, logger });
  await projector.start();
  // Events the projection's watermark is behind: a catch-up has them to apply, in many batches.
  for (let i = 0; i < 12; i++) {
    await journal.createVolume({
      requestId: `c-${i}`,
      name: `pvc-${i}`,
      sizeBytes: MiB,
      limitBytes: 0,
      parameters: {},
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER" }],
    });
  }
});

after(async () => {
  process.off("unhandledRejection", onUnhandled);
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** `call` fails with the store's error; by then every call it sent has ended, and nothing rejects unhandled after it. */
async function failsCleanly(call: () => Promise<unknown>, what: string): Promise<void> {
  store.failing = true;
  store.sent = 0;
  store.ended = 0;
  try {
    await assert.rejects(call(), /redis unavailable/, `${what} fails with the store's error`);
    assert.ok(store.sent > 1, `${what} had several calls out (${store.sent})`);
    assert.equal(store.ended, store.sent, `${what}: every call it sent had ended when it failed`);
    await tick();
    await tick();
    assert.deepEqual(unhandled, [], `${what}: no rejection left unhandled`);
  } finally {
    store.failing = false;
  }
}

describe("a projector whose store fails while calls are out", () => {
  test("a catch-up: fails with the store's error, no batch left out or unhandled; the next catch-up succeeds", async () => {
    const projector = new Projector(log, store, logger, { batch: 1 });
    await failsCleanly(() => projector.catchUp(), "the catch-up");
    assert.equal(await projector.catchUp(), (await log.info()).last, "caught up to the log once the store answers");
  });

  test("a rebuild: fails with the store's error, no chunk left out or unhandled; the next rebuild succeeds", async () => {
    const projector = new Projector(log, store, logger, { batch: 1 });
    await failsCleanly(() => projector.rebuild("test"), "the rebuild");
    assert.equal(await projector.rebuild("test"), (await log.info()).last);
    assert.deepEqual((await projector.compare()).differ, [], "the projection is the log folded");
  });
});

describe("SentAhead", () => {
  test("answers in the order sent, the oldest once `depth` are out, the rest at the end", async () => {
    const out = new SentAhead<number>(2);
    assert.equal(await out.add(Promise.resolve(1)), undefined);
    assert.equal(await out.add(Promise.resolve(2)), 1);
    assert.equal(out.size, 1);
    assert.equal(await out.add(Promise.resolve(3)), 2);
    assert.deepEqual(await out.rest(), [3]);
    assert.equal(out.size, 0);
  });

  test("a failure is thrown where it is taken; the calls after it are marked handled and settled", async () => {
    const out = new SentAhead<number>(3);
    let lateEnded = false;
    await out.add(Promise.reject(new Error("first")));
    await out.add(
      tick()
        .then(() => Promise.reject(new Error("late")))
        .finally(() => {
          lateEnded = true;
        }),
    );
    await assert.rejects(out.rest(), /first/);
    await out.settle();
    assert.ok(lateEnded, "settle waited for the call still out");
    await tick();
    await tick();
    assert.deepEqual(unhandled, []);
  });

  test("depth must be a positive integer", () => {
    assert.throws(() => new SentAhead(0), RangeError);
    assert.throws(() => new SentAhead(1.5), RangeError);
  });
});
