/**
 * One journal operation: take its locks (bounded wait → Aborted), keep them renewed while it
 * runs, append its events, then apply them to the projection and release the locks in one
 * round trip. Everything a journal command does to state goes through here.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { type Actor, aborted, type EventBody, type StoredEvent } from "@csi/contracts";
import type { Logger } from "pino";
import { type Append, SequenceConflict, type EventLog } from "../adapters/event-log.js";
import { type ReadResult, type ReadSpec, RedisStore } from "../adapters/redis-store.js";
import { mutationsFor } from "../domain/projection.js";
import type { Projector } from "./projector.js";

export interface OperationEnv {
  log: EventLog;
  store: RedisStore;
  projector: Projector;
  actor: Actor;
  logger: Logger;
  lockTtlMs: number;
  lockWaitMs: number;
  now: () => Date;
}

export class Operation {
  readonly token = RedisStore.newToken();
  readonly stored: StoredEvent[] = [];
  readonly #locks: string[] = [];
  #renewTimer?: NodeJS.Timeout;

  constructor(
    private readonly env: OperationEnv,
    readonly requestId: string,
  ) {}

  /** Take `spec.locks` (all or none, waiting a bounded time) and read `spec`'s keys. */
  async lock(spec: ReadSpec): Promise<ReadResult> {
    const deadline = Date.now() + this.env.lockWaitMs;
    let pause = 1;
    for (;;) {
      const res = await this.env.store.lockAndRead(this.token, this.env.lockTtlMs, spec);
      if (res.ok) {
        this.#locks.push(...spec.locks);
        this.#startRenewing();
        if (res.read.projectionPresent) return res.read;
        // Redis lost the projection (flushed, replaced): rebuild it from the log, then read again.
        this.env.logger.warn("projection missing: rebuilding from the event log");
        await this.#release(spec.locks);
        await this.env.projector.catchUp();
        continue;
      }
      if (Date.now() >= deadline) throw aborted(`an operation on the same ${describeLock(res.busy)} is in progress, retry`);
      await sleep(pause + Math.random() * pause);
      pause = Math.min(pause * 2, 50);
    }
  }

  /** Append events (concurrently when several); what landed is applied when the operation ends. */
  async append(...list: Append[]): Promise<StoredEvent[]> {
    const meta = { requestId: this.requestId, actor: this.env.actor, time: this.env.now().toISOString() };
    const { stored, error } = await this.env.log.appendAll(list, meta);
    this.stored.push(...stored);
    if (error) throw error;
    return stored;
  }

  /** Apply what was appended and release every lock (one round trip); catch up after a fence conflict. */
  async finish(err?: unknown): Promise<void> {
    clearInterval(this.#renewTimer);
    const locks = this.#locks.map((k) => [k, this.token] as [string, string]);
    this.#locks.length = 0;
    try {
      await this.env.store.applyAndUnlock(mutationsFor(this.env.store.keys, this.stored), locks);
    } catch (applyErr) {
      // The events are in the log; the projector replays them. Locks expire by TTL.
      this.env.logger.error({ err: applyErr }, "could not apply events after append");
    }
    if (err instanceof SequenceConflict) await this.env.projector.catchUp().catch(() => {});
  }

  async #release(keys: string[]): Promise<void> {
    await this.env.store.applyAndUnlock([], keys.map((k) => [k, this.token] as [string, string]));
    for (const k of keys) this.#locks.splice(this.#locks.indexOf(k), 1);
  }

  #startRenewing(): void {
    if (this.#renewTimer) return;
    const every = Math.max(50, Math.floor(this.env.lockTtlMs / 3));
    this.#renewTimer = setInterval(() => {
      for (const k of this.#locks) {
        this.env.store.renew(k, this.token, this.env.lockTtlMs).then(
          (ok) => ok || this.env.logger.warn({ lock: k }, "lock lost while working; appends stay fenced by sequence"),
          () => {},
        );
      }
    }, every);
    this.#renewTimer.unref();
  }
}

function describeLock(key: string): string {
  const what = key.split("lock.")[1] ?? key;
  return what.startsWith("name.") ? "name" : what.startsWith("volume.") ? "volume" : "snapshot";
}

/** Run `fn` as one operation: finish() always runs, with the error if there was one. */
export async function runOperation<T>(env: OperationEnv, requestId: string, fn: (op: Operation) => Promise<T>): Promise<T> {
  const op = new Operation(env, requestId);
  try {
    const result = await fn(op);
    // The commit point is the log's ack; the reply still waits for the projection (one round
    // trip that also releases the locks), so whoever reads after the reply — through any
    // replica — sees what it was told.
    await op.finish();
    return result;
  } catch (err) {
    await op.finish(err);
    throw err;
  }
}

export type { Append, EventBody };
