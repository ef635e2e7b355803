/**
 * The projector's Redis writes are sent several ahead of their replies (a rebuild's chunks, a
 * catch-up's batches). When Redis goes away part-way — a Sentinel failover, seen in the `--ha`
 * chaos run — every write still in flight fails: the rebuild or catch-up must fail with the error
 * (the caller answers Unavailable and tries again), and none of the writes nobody awaits any more
 * may become an unhandled rejection, which would end the journal's process (it did: a journal
 * exited in the middle of a rebuild when the Redis primary was killed).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { DriverError, subjects } from "@csi/contracts";
import { keysFor, Projector } from "@csi/journal/operator";
import { MemoryLog, MemoryStore, volumeReservedBody } from "@csi/journal/testing";
import { createLogger } from "@csi/runtime";

const CLUSTER = "c1";
const VOLUMES = 40;
const meta = { requestId: "r", actor: { service: "journal", replica: "t" }, time: "2026-01-01T00:00:00.000Z" };
const gone = () => new DriverError("Unavailable", "redis unavailable: the Redis connection is reconnecting");

/** Writes that fail as a dropped Redis connection fails them: the first one a little later, the rest at once. */
class FailingStore extends MemoryStore {
  failing = false;
  #first = true;
  #fail<T>(): Promise<T> {
    const late = this.#first;
    this.#first = false;
    return new Promise((_, reject) => setTimeout(() => reject(gone()), late ? 50 : 0));
  }
  override writeFresh(...args: Parameters<MemoryStore["writeFresh"]>) {
    return this.failing ? this.#fail<boolean>() : super.writeFresh(...args);
  }
  override applyAndUnlock(...args: Parameters<MemoryStore["applyAndUnlock"]>) {
    return this.failing ? this.#fail<number>() : super.applyAndUnlock(...args);
  }
}

async function logOf(n: number): Promise<MemoryLog> {
  const log = new MemoryLog({ cluster: CLUSTER });
  for (let i = 0; i < n; i++) {
    const uuid = randomUUID();
    await log.append({ subject: subjects.volumeEvents(CLUSTER, uuid), body: volumeReservedBody(uuid, `pvc-${i}`), expectedSeq: 0 }, meta);
  }
  return log;
}

/** Runs `f`, collecting the unhandled rejections that come up meanwhile and shortly after. */
async function unhandledDuring(f: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const on = (reason: unknown) => seen.push(reason);
  process.on("unhandledRejection", on);
  try {
    await f();
    await new Promise((r) => setTimeout(r, 200));
  } finally {
    process.off("unhandledRejection", on);
  }
  return seen;
}

const logger = createLogger("projector-test", "silent", 1);

test("a rebuild whose chunk writes fail part-way fails with the error, and leaves no unhandled rejection", async () => {
  const store = new FailingStore({ keys: keysFor(CLUSTER, "default") });
  store.failing = true;
  // One aggregate per chunk: 40 chunks, 8 sent ahead of the first reply.
  const projector = new Projector(await logOf(VOLUMES), store, logger, { batch: 1, waitMs: 500 });
  const unhandled = await unhandledDuring(async () => {
    await assert.rejects(projector.catchUp(), (err: unknown) => err instanceof DriverError && err.code === "Unavailable");
  });
  assert.deepEqual(unhandled, []);
});

test("a catch-up whose batch writes fail part-way fails with the error, and leaves no unhandled rejection", async () => {
  const log = await logOf(VOLUMES);
  const store = new FailingStore({ keys: keysFor(CLUSTER, "default") });
  const projector = new Projector(log, store, logger, { batch: 1, waitMs: 500 });
  await projector.catchUp(); // a complete projection, then more events to catch up with
  for (let i = 0; i < VOLUMES; i++) {
    const uuid = randomUUID();
    await log.append({ subject: subjects.volumeEvents(CLUSTER, uuid), body: volumeReservedBody(uuid, `more-${i}`), expectedSeq: 0 }, meta);
  }
  store.failing = true;
  const unhandled = await unhandledDuring(async () => {
    await assert.rejects(projector.catchUp(), (err: unknown) => err instanceof DriverError && err.code === "Unavailable");
  });
  assert.deepEqual(unhandled, []);
});
