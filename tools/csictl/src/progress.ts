/**
 * Progress of long work on stderr (cli-progress): a bar on a terminal, a plain line now and then
 * when stderr is a file or a pipe (CI logs), nothing with --json (stdout carries the result and
 * stderr stays quiet for scripts).
 */
import { SingleBar } from "cli-progress";

export interface Progress {
  update(done: number): void;
  finish(done: number): void;
}

export function startProgress(quiet: boolean, label: string, total: number, unit = "events"): Progress {
  if (quiet || total === 0) return { update: () => {}, finish: () => {} };
  const bar = new SingleBar({
    stream: process.stderr,
    format: `${label} [{bar}] {percentage}% | {value}/{total} ${unit} | {eta_formatted} left`,
    barsize: 30,
    hideCursor: true,
    noTTYOutput: true,
    notTTYSchedule: 1000,
    etaBuffer: 20,
  });
  bar.start(total, 0);
  return {
    update: (done) => bar.update(done),
    finish: (done) => {
      bar.setTotal(Math.max(total, done));
      bar.update(done);
      bar.stop();
    },
  };
}
