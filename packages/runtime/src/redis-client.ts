/**
 * A Redis client that does not die in a Sentinel failover.
 *
 * ioredis (6.0.0) ends a client for good ("Connection is closed.", status `end`, no more
 * reconnects) when its Sentinel failover detector disconnects the connector while the client is
 * already reconnecting: the primary died, the client is asking the sentinels where the master is,
 * and the `+switch-master` message of the promotion arrives in that window. The connector's
 * connect then rejects and the client sets itself `end`. On a busy machine the window is wide
 * (seen in test/ha-fence.test.ts under two CPU hogs: the writers' client never reached the new
 * master). A journal whose client ended would answer UNAVAILABLE until restarted.
 *
 * `SentinelSafeRedis` connects again after an `end` it did not ask for (`quit()` or
 * `disconnect()` of ours mark the end as wanted), after REVIVE_MS, for as long as it is not closed.
 * With sentinels in its options it also reaches a failover's new master as soon as that is one
 * (sentinel-promotion.ts), a second before the sentinels' `+switch-master`.
 */
import { Redis, type RedisOptions } from "ioredis";
import { SentinelPromotions } from "./sentinel-promotion.js";

/** The pause before a client that ended on its own connects again. */
export const REVIVE_MS = 250;

export class SentinelSafeRedis extends Redis {
  #closed = false;
  /** How many times the client connected again after an end it did not ask for. */
  revivals = 0;

  constructor(
    url: string,
    options: Omit<RedisOptions, "replyMapping">,
    private readonly onRevive: () => void = () => {},
  ) {
    const promotions = options.sentinels?.length ? new SentinelPromotions(options) : undefined;
    // With sentinels the switch is followed by `promotions` (at the promotion, and at +switch-master
    // only if the client is elsewhere), not by ioredis' failover detector.
    super(url, promotions ? { ...options, natMap: promotions.natMap, failoverDetector: false } : options);
    this.#promotions = promotions;
    promotions?.follow(this);
    this.on("end", () => this.#revive());
  }

  readonly #promotions?: SentinelPromotions;

  override disconnect(reconnect = false): void {
    if (!reconnect) this.#close();
    super.disconnect(reconnect);
  }

  override quit(callback?: (err?: Error | null, res?: "OK") => void): Promise<"OK"> {
    this.#close();
    return callback ? super.quit(callback) : super.quit();
  }

  #close(): void {
    this.#closed = true;
    this.#promotions?.close();
  }

  #revive(): void {
    if (this.#closed) return;
    setTimeout(() => {
      if (this.#closed || this.status !== "end") return;
      this.revivals++;
      this.onRevive();
      this.connect().catch(() => {}); // a failure ends it again, and this runs again
    }, REVIVE_MS).unref();
  }
}
