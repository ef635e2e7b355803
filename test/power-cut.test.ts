/**
 * Acknowledged means on disk (docs/operations.md, "Durability"): the chaos run with the stack's data
 * on the power-cut harness (testkit's powercut, ext4's rule: what ext4 and xfs keep) and power cuts
 * mid-load as its faults — creates, clones, snapshots, expands, deletes, ControllerPublish with the
 * node's stage and publish — each followed by a restart of everything (the node's mounts and loop
 * devices gone, as after a reboot). After every cut: each volume, snapshot and claim the CO was told
 * of is there, at its size, with its image; nothing it was told was deleted is back; verify finds
 * nothing but unanswered creates' images; gc plans no removal of anything the CO was told of. Then the
 * chaos run's own invariants after settle and teardown.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ensurePowercut, whyNoDevices } from "@csi/testkit";
import { formatReport } from "../scripts/lib/chaos/report.js";
import { runChaos } from "../scripts/lib/chaos/run.js";

const why = whyNoDevices() ?? ensurePowercut();

test("power cuts mid-load on the single-server stack (10 cuts): nothing acknowledged is lost", { skip: why, timeout: 900_000 }, async () => {
  const result = await runChaos({ ops: 300, faultsPerKind: 10, seed: 32, concurrency: 4, replicas: 2, ha: false, powerCut: true, failoverBoundMs: 10_000 });
  const report = formatReport(result);
  process.stdout.write(`${report}\n`);
  const cuts = result.faults.filter((f) => f.kind === "power-cut");
  assert.equal(cuts.length, 10, report);
  for (const c of cuts) assert.match(c.note ?? "", /^dropped \d+ unsynced bytes/, `a cut that did not happen: ${c.note}`);
  assert.ok(result.ok, report);
});
