/**
 * Figures of a load under faults (test/ha.test.ts), from the outcome of every call attempt: the
 * longest window in which calls failed, and the throughput in a span. Pure.
 */

/** One attempt's end: when (ms) and whether it succeeded; when it began and what it was, where known. */
export interface AttemptMark {
  at: number;
  ok: boolean;
  startedAt?: number;
  what?: string;
}

/** The attempts that ran in [from, to) (began before `to`, ended at or after `from`), as lines with times from `origin`: a window's story. */
export function attemptsIn(marks: readonly AttemptMark[], from: number, to: number, origin = from): string[] {
  return marks
    .filter((m) => m.at >= from && (m.startedAt ?? m.at) < to)
    .sort((a, b) => (a.startedAt ?? a.at) - (b.startedAt ?? b.at))
    .map((m) => `  ${(m.startedAt ?? m.at) - origin}..${m.at - origin} ms ${m.ok ? "ok" : "failed"} ${m.what ?? ""}`);
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
