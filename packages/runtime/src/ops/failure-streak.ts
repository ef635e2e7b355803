/**
 * A periodic task's failures logged once per streak: the first failure of a streak as a warning
 * (its message, no stack: an outage is the world's state, not a bug here), the ones after it
 * silently counted, and the first success after them as one line saying how many and how long.
 * During an outage a heartbeat or a catch-up fails every period; the log says so once.
 */
import type { Logger } from "pino";

export interface FailureStreak {
  failed(err: unknown): void;
  ok(): void;
}

export function failureStreak(log: Pick<Logger, "warn" | "info">, what: string, now: () => number = Date.now): FailureStreak {
  let streak: { since: number; failures: number } | undefined;
  return {
    failed(err) {
      if (streak) {
        streak.failures++;
        return;
      }
      streak = { since: now(), failures: 1 };
      log.warn({ err: err instanceof Error ? err.message : String(err) }, `${what} failed (repeats are not logged until it works again)`);
    },
    ok() {
      if (!streak) return;
      log.info({ failures: streak.failures, ms: now() - streak.since }, `${what} works again`);
      streak = undefined;
    },
  };
}
