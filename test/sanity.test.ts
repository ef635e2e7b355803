/**
 * The CSI conformance suite (csi-sanity) against a fresh stack, as `npm run sanity` runs it
 * (scripts/lib/sanity.ts): every spec that runs must pass. Skipped, saying why, without the
 * binary (set CSI_SANITY) or without root (the node specs mount). csi-sanity's own output is
 * shown only when it fails; its summary always, as a diagnostic.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { abortOnSignals, runSanity, sanityBinary, summaryLine, whyNoBinary, whyNoDevices } from "../scripts/lib/sanity.js";

const binary = sanityBinary();

test("csi-sanity against a fresh stack: no failed spec", async (t) => {
  const noDevices = whyNoDevices();
  const why = whyNoBinary(binary) ?? (noDevices && `csi-sanity ${noDevices}`);
  if (why) return t.skip(why);
  const result = await runSanity({ binary, signal: abortOnSignals() });
  t.diagnostic(summaryLine(result));
  if (!result.ok) t.diagnostic(`csi-sanity output:\n${result.output}`);
  assert.ok(result.summary, "csi-sanity printed its summary");
  assert.ok(result.summary.ran > 0, "csi-sanity ran specs");
  assert.equal(result.summary.failed, 0, "failed specs");
  assert.equal(result.exitCode, 0, "csi-sanity's exit code");
});
