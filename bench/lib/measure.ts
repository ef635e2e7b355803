/** Run a number of calls at a given concurrency and report throughput and latency. */

export interface Figures {
  ops: number;
  seconds: number;
  opsPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  /** The first few errors' messages (a bench that measured an error path must say so). */
  firstErrors: string[];
}

/** Run `n` calls of `op(i)` with `concurrency` in flight; latencies in ms. */
export async function measure(n: number, concurrency: number, op: (i: number) => Promise<unknown>): Promise<Figures> {
  const lat: number[] = [];
  const firstErrors: string[] = [];
  let next = 0;
  let errors = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        try {
          await op(i);
        } catch (err) {
          errors++;
          if (firstErrors.length < 3) firstErrors.push((err as Error).message);
        }
        lat.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  const pct = (p: number) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] ?? 0;
  return { ops: n, seconds, opsPerSec: n / seconds, p50: pct(50), p99: pct(99), errors, firstErrors };
}

export function row(label: string, f: Figures): string {
  return `${label.padEnd(30)} ${f.opsPerSec.toFixed(0).padStart(7)} ops/s   p50 ${f.p50.toFixed(2).padStart(6)} ms   p99 ${f.p99.toFixed(2).padStart(6)} ms   errors ${f.errors}`;
}

/** A wrong answer fails the step (a bench that measured an error path must say so). */
export function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`wrong answer: ${what}`);
}

/** The capability every bench volume asks for. */
export const csiCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };
