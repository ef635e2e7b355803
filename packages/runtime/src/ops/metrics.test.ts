/**
 * A service at rest stays at rest: its metrics registry (prom-client's default series, the
 * event-loop lag histogram among them) wakes its main thread a few times a second, not a hundred
 * (EVENT_LOOP_SAMPLE_MS; docs/operations.md, "Metrics and health: the series"). Counted from the
 * kernel: the main thread's voluntary context switches over a second of a child process that
 * holds an Ops and nothing else, beside the same child with prom-client's 10 ms default.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { test } from "node:test";

const switches = (pid: number) => Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);

/** Main-thread wake-ups per second of a child that made `setup` and then idles: the least of three one-second windows (a start-up tail or a busy moment of the machine falls in one). */
async function wakeUpsPerSecond(setup: string): Promise<number> {
  const child = spawn(
    process.execPath,
    [...process.execArgv, "--input-type=module", "-e", `${setup}\nprocess.stdout.write("up\\n");setInterval(() => {}, 1 << 30);`],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  try {
    await once(child.stdout, "data");
    const windows: number[] = [];
    for (let i = 0; i < 3; i++) {
      const before = switches(child.pid as number);
      await new Promise((r) => setTimeout(r, 1000)); // the window counted, not a wait for an event
      windows.push(switches(child.pid as number) - before);
    }
    return Math.min(...windows);
  } finally {
    child.kill("SIGKILL");
  }
}

test("an Ops at rest wakes its main thread far less often than prom-client's 10 ms lag sampling does", async () => {
  const ours = await wakeUpsPerSecond(`const { Ops } = await import("@csi/runtime"); globalThis.ops = new Ops("rest");`);
  const tenMs = await wakeUpsPerSecond(
    `const { collectDefaultMetrics, Registry } = await import("prom-client"); collectDefaultMetrics({ register: new Registry(), eventLoopMonitoringPrecision: 10 });`,
  );
  assert.ok(tenMs >= 50, `the 10 ms reference woke ${tenMs} times in a second (expected ~100: is this a Linux /proc?)`);
  assert.ok(ours * 2 <= tenMs, `an Ops at rest woke its main thread ${ours} times in a second (the 10 ms default: ${tenMs})`);
});
