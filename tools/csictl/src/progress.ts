/**
 * Progress of long work on stderr (cli-progress): a bar on a terminal, a plain line now and then
 * when stderr is a file or a pipe (CI logs), nothing with --json (stdout carries the result and
 * stderr stays quiet for scripts).
 */
import { SingleBar } from "cli-progress";
import { formatDuration } from "./domain/audit.js";

export interface Progress {
  update(done: number): void;
  finish(done: number): void;
}

/**
 * The time left at the rate so far (` | 12s left`, whole seconds), or nothing while it is unknown:
 * no progress yet, or done (cli-progress's own ETA prints `NFs left` then). Pure.
 */
export function timeLeft(done: number, total: number, elapsedMs: number): string {
  if (done <= 0 || done >= total || elapsedMs <= 0) return "";
  const ms = ((total - done) * elapsedMs) / done;
  return Number.isFinite(ms) ? ` | ${formatDuration(Math.max(1, Math.ceil(ms / 1000)) * 1000)} left` : "";
}

export function startProgress(quiet: boolean, label: string, total: number, unit = "events"): Progress {
  if (quiet || total === 0) return { update: () => {}, finish: () => {} };
  const bar = new SingleBar({
    stream: process.stderr,
    format: `${label} [{bar}] {percentage}% | {value}/{total} ${unit}{left}`,
    barsize: 30,
    hideCursor: true,
    noTTYOutput: true,
    notTTYSchedule: 1000,
  });
  const started = performance.now();
  bar.start(total, 0, { left: "" });
  return {
    update: (done) => bar.update(done, { left: timeLeft(done, total, performance.now() - started) }),
    finish: (done) => {
      bar.setTotal(Math.max(total, done));
      bar.update(done, { left: "" });
      bar.stop();
    },
  };
}
