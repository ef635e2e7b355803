/**
 * The journal's Redis connection: how it is made, and what the journal knows of its state
 * (docs/operations.md, "When Redis or the event log is down").
 *
 * A command that needs Redis while Redis is known to be down answers UNAVAILABLE at once, instead
 * of queueing in ioredis' offline queue until the caller's deadline (the controller's 30 s
 * DEADLINE_EXCEEDED of issue 23, row 4). "Known down": the connection was ready once and is not
 * now (closed, reconnecting, connecting, handshaking) — `RedisLink.down`, which RedisStore asks
 * before every call. Before the first ready (the journal's start) commands still queue: the start
 * fails by itself if Redis never answers.
 *
 * What bounds the rest:
 *  - a command already sent when the connection drops is resent after a reconnect, at most
 *    `maxRetriesPerRequest` (2) reconnect attempts later — well under a second with the delays below;
 *  - a Redis that stops answering without closing the connection (frozen, a network cut without a
 *    reset) is given up after `commandTimeoutMs` (`commandTimeout`: the command fails) and its
 *    socket is dropped after the same time without data (`socketTimeout`), so the link is known
 *    down from then on;
 *  - reconnect attempts are at most REDIS_RECONNECT_CAP_MS apart (ioredis' default grows to 5 s),
 *    so a Redis that comes back is served again within 150 ms. In a Sentinel
 *    failover the attempts before the sentinels' +switch-master all reach the dead primary, and
 *    the one after it the new master: with a 1 s cap the first command after the switch succeeded
 *    up to ~1 s late (issue 39: 1049 ms measured), with 250 ms 95–306 ms late (three `.ci/run`s
 *    under load), so 100 ms (+ up to 50). An attempt is a sentinel's answer and a connect: during
 *    an outage each journal asks about 7–10 a second, which Sentinel and Redis take in their stride.
 */
import { type RedisAccess, redisConnectOptions } from "@csi/runtime";
import type { Redis, RedisOptions } from "ioredis";
import type { Logger } from "pino";

/** The longest wait between two reconnect attempts (plus up to REDIS_RECONNECT_JITTER_MS). */
export const REDIS_RECONNECT_CAP_MS = 100;
export const REDIS_RECONNECT_JITTER_MS = 50;

/** The wait before reconnect attempt `times` (1-based): 25 ms doubling up to the cap, plus jitter (`random` in [0, 1)). Pure. */
export function reconnectDelayMs(times: number, random: number): number {
  return Math.min(25 * 2 ** Math.max(0, times - 1), REDIS_RECONNECT_CAP_MS) + Math.floor(random * REDIS_RECONNECT_JITTER_MS);
}

/** ioredis options of the journal's connection: access (runtime's redisConnectOptions) plus the bounds above. */
export function journalRedisOptions(access: RedisAccess, commandTimeoutMs: number): RedisOptions {
  return {
    ...redisConnectOptions(access),
    maxRetriesPerRequest: 2,
    enableAutoPipelining: true,
    commandTimeout: commandTimeoutMs,
    socketTimeout: commandTimeoutMs,
    retryStrategy: (times) => reconnectDelayMs(times, Math.random()),
  };
}

/**
 * What the journal knows of its Redis connection. Logs when it is lost and when it is back; of the
 * connection errors, the first of an outage (and any before the first ready) at warn, the rest of
 * the outage (one per reconnect attempt) at debug.
 */
export class RedisLink {
  #wasReady: boolean;
  #lostAt?: number;

  constructor(
    private readonly redis: Redis,
    log: Logger,
  ) {
    this.#wasReady = redis.status === "ready";
    redis.on("error", (err: Error) => {
      const quiet = this.#lostAt !== undefined;
      log[quiet ? "debug" : "warn"]({ err: err.message }, "redis connection error");
    });
    redis.on("ready", () => {
      if (this.#lostAt !== undefined) log.info({ downMs: Date.now() - this.#lostAt }, "Redis connection back");
      this.#lostAt = undefined;
      this.#wasReady = true;
    });
    redis.on("close", () => {
      if (!this.#wasReady || this.#lostAt !== undefined) return;
      this.#lostAt = Date.now();
      log.warn("Redis connection lost: commands that need Redis answer UNAVAILABLE until it is back");
    });
  }

  /** Why Redis is known to be unreachable now (its connection was ready and is not), or undefined. */
  down(): string | undefined {
    if (!this.#wasReady || this.redis.status === "ready") return undefined;
    return `the Redis connection is ${this.redis.status}`;
  }
}
