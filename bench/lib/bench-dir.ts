/**
 * Where a bench run keeps its data, and how it ends: a fresh directory under the repo's .data (or
 * BENCH_DIR), on the disk BENCH_DISK picks, removed at the end — also when the run is interrupted,
 * after every process it started is killed. Used by `npm run bench` and `npm run bench:peers`.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import path from "node:path";
import { cleanupUnder, whyNoDevices } from "@csi/testkit";
import { prepareDataDir } from "../../scripts/lib/data-dir.js";

/** Every process below `root` (its children, theirs, …), from /proc. */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {} // gone meanwhile
  }
  const out: number[] = [];
  const todo = [root];
  for (let pid = todo.pop(); pid !== undefined; pid = todo.pop()) {
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      todo.push(child);
    }
  }
  return out;
}

/**
 * Where the run's data lives (JetStream, Redis AOF, the file pool). BENCH_DISK=ext4, the default
 * where loop devices can be used (root): a fresh 8 GiB ext4 with a journal on a loop device, as a
 * server's own data disk would be. BENCH_DISK=here: the bench directory itself. This VM's root
 * file system is an ext4 without a journal, where a create scans past every recently deleted
 * inode of its group, so the pool's create grows from ~30 µs to ~0.5 ms over a run and decides
 * the figures (docs/performance.md, "The file pool's create is the disk's").
 */
export function benchDisk(dir: string): { dir: string; what: string } {
  const disk = process.env.BENCH_DISK ?? (whyNoDevices() ? "here" : "ext4");
  if (disk === "here") return { dir, what: "the bench directory's own disk (BENCH_DISK=here)" };
  if (disk !== "ext4") throw new Error(`BENCH_DISK=${disk}: use ext4 or here`);
  const image = path.join(dir, "disk.img");
  const mnt = path.join(dir, "disk");
  writeFileSync(image, "");
  truncateSync(image, 8 * 2 ** 30);
  execFileSync("mkfs.ext4", ["-q", "-F", image]);
  mkdirSync(mnt);
  execFileSync("mount", ["-o", "loop", image, mnt]);
  return { dir: mnt, what: "a fresh ext4 with a journal on a loop device (BENCH_DISK=ext4)" };
}

/**
 * Run `main` in a fresh bench directory on the bench disk, then remove it all; an error thrown
 * joins `failures`. With failures, print them and exit 1. Interrupted: end every process the bench
 * started, then unmount the loop disk and remove it all.
 */
export async function runInBenchDir(main: (disk: { dir: string; what: string }) => Promise<void>, failures: string[]): Promise<void> {
  // Where `npm start` keeps its data (the repo's .data, prepared as it does: scripts/lib/data-dir.ts);
  // BENCH_DIR picks another. File creation costs differ a lot between directories on this VM.
  const benchRoot = process.env.BENCH_DIR ?? path.resolve(import.meta.dirname, "..", "..", ".data");
  prepareDataDir(benchRoot);
  const dir = await mkdtemp(path.join(benchRoot, "bench-"));
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => {
      for (const pid of descendants(process.pid)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {}
      }
      setTimeout(() => void cleanupUnder(dir).finally(() => process.exit(130)), 500);
    });
  }
  try {
    await main(benchDisk(dir));
  } catch (err) {
    failures.push((err as Error).message);
  } finally {
    await cleanupUnder(dir); // unmounts and detaches BENCH_DISK's loop device first
  }
  if (failures.length > 0) {
    console.log(`\nBENCH FAILED:\n  ${failures.join("\n  ")}`);
    process.exit(1);
  }
}
