/**
 * `npm run chaos`: mixed CSI operations through the controller and node-agent endpoints of a
 * fresh stack (several journal replicas) while faults of every kind are injected, then a table
 * of invariants with their violations (scripts/lib/chaos/, docs/chaos.md).
 *
 *   npm run chaos -- --ops 2000 --faults-per-kind 20 --seed 7 --concurrency 6 --replicas 3 [--ha] [--log chaos.log] [--json chaos.json]
 *
 * `--ha`: the replicated stack (3 NATS nodes, Redis primary + replica behind 3 Sentinels) and its
 * fault kinds (NATS stream-leader kill, Redis primary kill, NATS node freeze; docs/chaos.md).
 *
 * Exits 1 when an invariant is violated, 2 on bad arguments; Ctrl-C stops the run and cleans up.
 */

import { writeFileSync } from "node:fs";
import { parseChaosArgs, repeatArgs, UsageError } from "./lib/chaos/options.js";
import { formatReport } from "./lib/chaos/report.js";
import { runChaos } from "./lib/chaos/run.js";
import { abortOnSignals, whyNoDevices } from "./lib/sanity.js";

let opts: ReturnType<typeof parseChaosArgs>;
try {
  opts = parseChaosArgs(process.argv.slice(2), Date.now() % 100_000);
} catch (err) {
  console.error(err instanceof UsageError || err instanceof TypeError ? err.message : String(err));
  process.exit(2);
}
const noDevices = whyNoDevices();
if (noDevices) {
  console.error(`chaos: cannot run: the node operations ${noDevices}`);
  process.exit(1);
}
const started = Date.now();
const signal = abortOnSignals();
try {
  const result = await runChaos(opts, {
    signal,
    say: (m) => console.log(`chaos [${Math.round((Date.now() - started) / 1000)}s] ${m}`),
  });
  console.log(`\n${formatReport(result)}`);
  if (opts.logFile) console.log(`service logs: ${opts.logFile}`);
  if (opts.jsonFile) {
    const { stats, ...rest } = result;
    const json = { ...rest, stats: { attempts: stats.attempts, retries: stats.retries, attemptErrors: Object.fromEntries(stats.attemptErrors) } };
    writeFileSync(opts.jsonFile, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`every violation, fault and operation: ${opts.jsonFile}`);
  }
  console.log(`repeat with: npm run chaos -- ${repeatArgs(opts).join(" ")}`);
  process.exit(result.ok ? 0 : 1);
} catch (err) {
  const why = signal.aborted ? String(signal.reason?.message ?? signal.reason) : ((err as Error)?.stack ?? String(err));
  console.error(`chaos: ${why}\nthe stack was stopped and its temporary directory removed`);
  process.exit(1);
}
