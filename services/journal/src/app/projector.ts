/**
 * Replays the event log into the Redis projection. Runs before the journal serves (catch-up),
 * when a command finds the projection gone (Redis flushed or replaced), after a fence conflict,
 * and periodically to advance the watermark. Replays are idempotent per aggregate, so several
 * replicas may replay at once; in one process a replay is single-flight.
 */
import type { Logger } from "pino";
import type { EventLog } from "../adapters/event-log.js";
import type { RedisStore } from "../adapters/redis-store.js";
import { mutationsFor } from "../domain/projection.js";

export class Projector {
  #running?: Promise<number>;

  constructor(
    private readonly log: EventLog,
    private readonly store: RedisStore,
    private readonly logger: Logger,
  ) {}

  /** Apply everything after the watermark (or everything, if the projection is gone). */
  catchUp(): Promise<number> {
    this.#running ??= this.#replay().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async #replay(): Promise<number> {
    const started = performance.now();
    const from = ((await this.store.watermark()) ?? 0) + 1;
    let applied = 0;
    let events = 0;
    const last = await this.log.read(from, async (batch) => {
      events += batch.length;
      const last = batch[batch.length - 1]?.seq ?? 0;
      applied += await this.store.applyAndUnlock(mutationsFor(this.store.keys, batch), [], last);
    });
    await this.store.markPresent(); // even for an empty log
    if (events > 0) {
      this.logger.info({ from, to: last, events, applied, ms: Math.round(performance.now() - started) }, "projection caught up");
    }
    return last;
  }
}
