/** CPU time per process from /proc: what a benchmark step cost each process, per operation. */
import { readFileSync } from "node:fs";

/**
 * CPU seconds a process has used so far in user and in kernel mode (utime, stime; USER_HZ = 100);
 * with `reaped`, plus what its children that it has waited for used (cutime, cstime: a driver that
 * runs a command per request). 0 if it is gone.
 */
export function cpuTimes(pid: number | undefined, reaped = false): { user: number; sys: number } {
  if (!pid) return { user: 0, sys: 0 };
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    const [user, sys, cuser, csys] = [11, 12, 13, 14].map((i) => Number(fields[i]) / 100) as [number, number, number, number];
    return reaped ? { user: user + cuser, sys: sys + csys } : { user, sys };
  } catch {
    return { user: 0, sys: 0 };
  }
}

/** CPU seconds a process has used so far (user + kernel). */
export function cpuSeconds(pid: number | undefined): number {
  const t = cpuTimes(pid);
  return t.user + t.sys;
}

/** Write-family system calls a process has made so far (`syscw` in /proc/<pid>/io): each socket write is one. 0 if it is gone. */
export function writeCalls(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    return Number(/^syscw: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

export type Processes = Record<string, number | undefined>;

/**
 * Snapshot the processes' CPU now; `perOp(n)` then gives each one's CPU ms per operation since,
 * their `total`, and `kernel`: the share (%) of that total spent in the kernel (system calls,
 * socket wake-ups) rather than in the processes' own code. `reaped`: count the CPU of the children
 * each process waited for too (cpuTimes).
 */
export function cpuMeter(procs: Processes, reaped = false): { perOp(n: number): Record<string, number>; writesPerOp(n: number): Record<string, number> } {
  const before = Object.fromEntries(Object.entries(procs).map(([k, pid]) => [k, cpuTimes(pid, reaped)]));
  const writesBefore = Object.fromEntries(Object.entries(procs).map(([k, pid]) => [k, writeCalls(pid)]));
  return {
    /** Write system calls per operation, by process (how many socket writes a step cost each one). */
    writesPerOp(n) {
      return Object.fromEntries(Object.entries(procs).map(([k, pid]) => [k, (writeCalls(pid) - (writesBefore[k] ?? 0)) / n]));
    },
    perOp(n) {
      const out: Record<string, number> = {};
      let total = 0;
      let sys = 0;
      for (const [k, pid] of Object.entries(procs)) {
        const now = cpuTimes(pid, reaped);
        const was = before[k] ?? { user: 0, sys: 0 };
        const ms = ((now.user - was.user + now.sys - was.sys) * 1000) / n;
        out[k] = ms;
        total += ms;
        sys += ((now.sys - was.sys) * 1000) / n;
      }
      out.total = total;
      out.kernel = total > 0 ? (100 * sys) / total : 0;
      return out;
    },
  };
}

/** "bench 0.12 ctl 0.30 … total 1.10 (kernel 40%)" (ms of CPU per operation; or any per-op figures). */
export function cpuLine(perOp: Record<string, number>, digits = 2): string {
  const { kernel, ...ms } = perOp;
  const line = Object.entries(ms)
    .map(([k, v]) => `${k} ${v.toFixed(digits)}`)
    .join("  ");
  return kernel === undefined ? line : `${line} (kernel ${kernel.toFixed(0)}%)`;
}

/**
 * CPU seconds the whole machine has been busy so far, all cores (/proc/stat's first line: user,
 * nice, system, irq, softirq; not idle, iowait or steal). Against the measured processes' CPU over
 * the same span it tells how much else ran: other work, and kernel threads (a loop disk's I/O).
 */
export function machineBusy(): number {
  const f = /^cpu\s+(.*)$/m.exec(readFileSync("/proc/stat", "utf8"))?.[1]?.split(/\s+/).map(Number) ?? [];
  return [0, 1, 2, 5, 6].reduce((s, i) => s + (f[i] ?? 0), 0) / 100;
}
