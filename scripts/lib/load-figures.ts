/**
 * Figures of a load under faults (test/ha.test.ts), from the outcome of every call attempt: the
 * longest window in which calls failed, and the throughput in a span. Pure.
 */

/** One attempt's end: when (ms) and whether it succeeded. */
export interface AttemptMark {
  at: number;
  ok: boolean;
}

/**
 * The longest window in which calls failed and none succeeded: from a failed attempt with no
 * success since the last one, to the next success (or to `end` if none came). 0 when nothing failed.
 */
export function longestFailureWindow(marks: readonly AttemptMark[], end?: number): { ms: number; from?: number } {
  let best: { ms: number; from?: number } = { ms: 0 };
  let failingSince: number | undefined;
  for (const m of [...marks].sort((a, b) => a.at - b.at)) {
    if (!m.ok) failingSince ??= m.at;
    else if (failingSince !== undefined) {
      if (m.at - failingSince > best.ms) best = { ms: m.at - failingSince, from: failingSince };
      failingSince = undefined;
    }
  }
  if (failingSince !== undefined && end !== undefined && end - failingSince > best.ms) best = { ms: end - failingSince, from: failingSince };
  return best;
}

/** Operations completed per second in [from, to) (0 for an empty span). */
export function throughput(doneAt: readonly number[], from: number, to: number): number {
  if (to <= from) return 0;
  return doneAt.filter((t) => t >= from && t < to).length / ((to - from) / 1000);
}
