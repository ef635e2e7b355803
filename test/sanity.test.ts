/**
 * The CSI conformance suite (csi-sanity) against a fresh stack, as `npm run sanity` runs it
 * (scripts/lib/sanity.ts): every spec that runs must pass. Skipped, saying why, without the
 * binary (set CSI_SANITY) or without root (the node specs mount). csi-sanity's own output is
 * shown only when it fails; its summary always, as a diagnostic.
 */
import { test } from "node:test";
import { abortOnSignals, assertNoFailedSpec, runSanity, sanityBinary, whyNoBinary, whyNoDevices } from "../scripts/lib/sanity.js";

const binary = sanityBinary();

test("csi-sanity against a fresh stack: no failed spec", async (t) => {
  const noDevices = whyNoDevices();
  const why = whyNoBinary(binary) ?? (noDevices && `csi-sanity ${noDevices}`);
  if (why) return t.skip(why);
  assertNoFailedSpec(t, await runSanity({ binary, signal: abortOnSignals() }));
});
