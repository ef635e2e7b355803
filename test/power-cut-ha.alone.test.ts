/**
 * The power cut of the replicated stack (test/power-cut.test.ts says what a cut is and what is
 * checked after it): 3 NATS nodes, a Redis primary and replica behind 3 sentinels, all on one
 * power-cut mount, cut at once — 3 cuts mid-load. Alone on the machine (scripts/test.mjs runs
 * *.alone.test.ts after the others, one at a time): a 3-node cluster whose every write goes through
 * the harness's one FUSE process forms within nats-server's Raft timeouts only without competition.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ensurePowercut, whyNoDevices, whyNoReplicatedStreams } from "@csi/testkit";
import { formatReport } from "../scripts/lib/chaos/report.js";
import { runChaos } from "../scripts/lib/chaos/run.js";

const why = whyNoDevices() ?? ensurePowercut() ?? whyNoReplicatedStreams();

test("power cuts of the replicated stack (3 cuts, all three NATS nodes at once): nothing acknowledged is lost", {
  skip: why,
  timeout: 900_000,
}, async () => {
  const result = await runChaos({ ops: 120, faultsPerKind: 3, seed: 33, concurrency: 4, replicas: 2, ha: true, powerCut: true, failoverBoundMs: 10_000 });
  const report = formatReport(result);
  process.stdout.write(`${report}\n`);
  assert.equal(result.faults.filter((f) => f.kind === "power-cut").length, 3, report);
  assert.ok(result.ok, report);
});
