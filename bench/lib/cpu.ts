/** CPU time per process from /proc: what a benchmark step cost each process, per operation. */
import { readFileSync } from "node:fs";

/** CPU seconds a process has used so far (utime + stime; USER_HZ = 100). 0 if it is gone. */
export function cpuSeconds(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

export type Processes = Record<string, number | undefined>;

/** Snapshot the processes' CPU now; `perOp(n)` then gives each one's CPU ms per operation since. */
export function cpuMeter(procs: Processes): { perOp(n: number): Record<string, number> } {
  const before = Object.fromEntries(Object.entries(procs).map(([k, pid]) => [k, cpuSeconds(pid)]));
  return {
    perOp(n) {
      const out: Record<string, number> = {};
      let total = 0;
      for (const [k, pid] of Object.entries(procs)) {
        const ms = ((cpuSeconds(pid) - (before[k] ?? 0)) * 1000) / n;
        out[k] = ms;
        total += ms;
      }
      out.total = total;
      return out;
    },
  };
}

/** "bench 0.12 ctl 0.30 … total 1.10" (ms of CPU per operation). */
export function cpuLine(perOp: Record<string, number>): string {
  return Object.entries(perOp)
    .map(([k, ms]) => `${k} ${ms.toFixed(2)}`)
    .join("  ");
}
