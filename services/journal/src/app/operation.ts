/**
 * One journal operation: take its locks (bounded wait → Aborted), keep them renewed while it
 * runs, append its events, then apply them to the projection and release the locks in one
 * round trip. Everything a journal command does to state goes through here.
 */
import { type Actor, aborted, type StoredEvent } from "@csi/contracts";
import { retry } from "@csi/runtime";
import type { Logger } from "pino";
import { AppendError, isFenced, isUncertain } from "../adapters/event-log.js";
import { type ReadResult, type ReadSpec, RedisStore } from "../adapters/redis-store.js";
import { type Address, type Aggregate, addressKey, addressOf } from "../domain/evolve.js";
import { nameFromRedis, stateFromHash } from "../domain/projection.js";
import type { Hash } from "../domain/records.js";
import type { Append, EventLog } from "../ports/event-log.js";
import { type Projector, planWithBefores } from "./projector.js";

export interface OperationEnv {
  log: EventLog;
  store: RedisStore;
  projector: Projector;
  actor: Actor;
  logger: Logger;
  lockTtlMs: number;
  lockWaitMs: number;
  now: () => Date;
  /** Told how long each lock() waited, and whether it got the locks or gave up (ABORTED): the metrics. */
  observeLockWait?: (seconds: number, outcome: "acquired" | "busy") => void;
}

/** A lock someone else holds (retried until the bounded wait is over, then Aborted). */
class LockBusy extends Error {
  constructor(readonly key: string) {
    super(`lock ${key} is busy`);
  }
}

export class Operation {
  readonly token = RedisStore.newToken();
  /** Everything appended so far: applied to the projection when the operation ends. */
  readonly #landed: StoredEvent[] = [];
  readonly #locks: string[] = [];
  /** What the locked reads saw, by key (and key + field): the states the appended events start from. */
  readonly #hashesRead = new Map<string, Hash | undefined>();
  readonly #fieldsRead = new Map<string, string | undefined>();
  #renewTimer?: NodeJS.Timeout;

  constructor(
    private readonly env: OperationEnv,
    readonly requestId: string,
  ) {}

  /** Take `spec.locks` (all or none, waiting a bounded time) and read `spec`'s keys. */
  async lock(spec: ReadSpec): Promise<ReadResult> {
    for (;;) {
      await this.env.projector.current();
      const read = await this.#take(spec);
      if (this.env.projector.distrusted) {
        // Redis came back while we read (e.g. a Sentinel failover): read again once caught up.
        await this.#release(spec.locks);
        continue;
      }
      if (read.projectionComplete) return read;
      // Redis lost the projection (flushed, replaced) or it is being rebuilt: wait for it (one
      // rebuild per cluster, shared by every operation; bounded → Unavailable), then read again.
      await this.#release(spec.locks);
      await this.env.projector.ready();
    }
  }

  async #take(spec: ReadSpec): Promise<ReadResult> {
    const attempt = async () => {
      const res = await this.env.store.lockAndRead(this.token, this.env.lockTtlMs, spec);
      if (!res.ok) throw new LockBusy(res.busy);
      this.#locks.push(...spec.locks);
      this.#startRenewing();
      this.#remember(spec, res.read);
      return res.read;
    };
    const started = performance.now();
    const waited = (outcome: "acquired" | "busy") => this.env.observeLockWait?.((performance.now() - started) / 1000, outcome);
    try {
      const read = await retry(attempt, {
        tries: Number.POSITIVE_INFINITY,
        deadline: Date.now() + this.env.lockWaitMs,
        firstDelayMs: 1,
        maxDelayMs: 50,
        jitter: 1,
        retryIf: (err) => err instanceof LockBusy,
      });
      waited("acquired");
      return read;
    } catch (err) {
      if (!(err instanceof LockBusy)) throw err;
      waited("busy");
      throw aborted(`an operation on the same ${describeLock(err.key)} is in progress, retry`);
    }
  }

  /**
   * Append events (concurrently when several) and return them as stored, in the order given.
   * If some failed, the AppendError says which landed. What landed is applied when the operation ends.
   */
  async append(...list: Append[]): Promise<StoredEvent[]> {
    const meta = { requestId: this.requestId, actor: this.env.actor, time: this.env.now().toISOString() };
    try {
      const stored = await this.env.log.appendAll(list, meta);
      this.#landed.push(...stored);
      return stored;
    } catch (err) {
      if (err instanceof AppendError) this.#landed.push(...err.landed.filter((e) => e !== undefined));
      // An append without an answer may still land (e.g. committed by a new stream leader): the
      // projection cannot know, so the next command catches up with the log before it reads.
      // Its decision then rests on the log, not on a fence check alone (nats-server before 2.10
      // does not enforce an expected subject sequence of 0 on replicated streams: nats-server#5644).
      if (isUncertain(err)) this.env.projector.distrust();
      throw err;
    }
  }

  #remember(spec: ReadSpec, read: ReadResult): void {
    spec.hashes.forEach((key, i) => {
      this.#hashesRead.set(key, read.hashes[i]);
    });
    spec.fields.forEach(([key, field], i) => {
      this.#fieldsRead.set(`${key}\u0000${field}`, read.fields[i]);
    });
    const pointed = read.fields[0];
    if (spec.recordPrefix && pointed) this.#hashesRead.set(spec.recordPrefix + pointed, read.record);
  }

  /**
   * The state before this operation's events of an aggregate it read under its locks. An append
   * lands only on the sequence the read showed (its fence), so that read is exactly the state
   * the events follow.
   */
  #readState(a: Address): { known: boolean; state?: Aggregate } {
    const k = this.env.store.keys;
    if (a.kind !== "name") {
      const key = k.record(a.kind, a.uuid);
      return this.#hashesRead.has(key) ? { known: true, state: stateFromHash(a.kind, a.uuid, this.#hashesRead.get(key)) } : { known: false };
    }
    const dir = `${k.dir(a.of)}\u0000${k.dirField(a.of, a.name)}`;
    const seq = `${k.dirSeq(a.of)}\u0000${a.name}`;
    if (!this.#fieldsRead.has(dir) || !this.#fieldsRead.has(seq)) return { known: false };
    const s = nameFromRedis(a.of, a.name, this.#fieldsRead.get(dir), Number(this.#fieldsRead.get(seq) ?? 0));
    return { known: true, ...(s ? { state: s } : {}) };
  }

  /** Apply what was appended and release every lock (one round trip); catch up after a fence conflict. */
  async finish(err?: unknown): Promise<void> {
    clearInterval(this.#renewTimer);
    const locks = this.#locks.map((k) => [k, this.token] as [string, string]);
    this.#locks.length = 0;
    try {
      const known = new Map<string, Aggregate | undefined>();
      for (const { event } of this.#landed) {
        const a = addressOf(event);
        const r = a && this.#readState(a);
        if (a && r?.known) known.set(addressKey(a), r.state);
      }
      const muts = (await planWithBefores(this.env.store, this.#landed, known)).mutations;
      if ((await this.env.store.applyAndUnlock(muts, locks)) < 0 && muts.length > 0) {
        // The projection was flushed or is being rebuilt: nothing was written (never into a half
        // projection). The rebuild replays these events; apply them again once it is complete so
        // a read after the reply shows them.
        await this.env.projector.ready();
        await this.env.store.applyAndUnlock(muts, []);
      }
    } catch (applyErr) {
      // The events are in the log; the projector replays them. Locks expire by TTL.
      this.env.logger.error({ err: applyErr }, "could not apply events after append");
    }
    if (isFenced(err)) await this.env.projector.catchUp().catch(() => {});
  }

  async #release(keys: string[]): Promise<void> {
    await this.env.store.applyAndUnlock(
      [],
      keys.map((k) => [k, this.token] as [string, string]),
    );
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

/** "name" for a request-name lock (`lock.name.<kind>.<name>`), else the kind (`lock.<kind>.<uuid>`). */
function describeLock(key: string): string {
  const what = key.split("lock.")[1] ?? key;
  return what.startsWith("name.") ? "name" : (what.split(".")[0] ?? "volume");
}

/**
 * Attempts of one command whose appends were fenced off: a fence conflict means the projection
 * was behind the log (typically: a replica died after appending, before applying — the command
 * may be the very one it was doing, resent by the caller). After catching up, the command is
 * decided again on what the log says, as a CO's retry would be, without the round trip.
 */
const FENCED_ATTEMPTS = 3;

/** Run `fn` as one operation: finish() always runs, with the error if there was one. A fenced-off run is repeated (FENCED_ATTEMPTS). */
export async function runOperation<T>(env: OperationEnv, requestId: string, fn: (op: Operation) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const op = new Operation(env, requestId);
    try {
      const result = await fn(op);
      // The commit point is the log's ack; the reply still waits for the projection (one round
      // trip that also releases the locks), so whoever reads after the reply — through any
      // replica — sees what it was told.
      await op.finish();
      return result;
    } catch (err) {
      await op.finish(err); // catches up after a fence conflict
      if (!isFenced(err) || attempt >= FENCED_ATTEMPTS) throw err;
      env.logger.info({ requestId, attempt }, "fenced off: caught up with the log, deciding again");
    }
  }
}
