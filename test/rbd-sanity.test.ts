/**
 * csi-sanity, the whole suite (Identity, Controller, Node), against a stack whose default pool is
 * an RBD pool on a local single-node Ceph (`npm run sanity -- --ceph`, scripts/lib/sanity.ts): the
 * node-agent stages and publishes its volumes through rbd-fuse + a loop device. Every spec that
 * runs must pass. Skipped, saying why, without the binary (set CSI_SANITY), without root, or
 * without Ceph's packages.
 */
import { test } from "node:test";
import { whyNoCeph } from "@csi/testkit";
import { abortOnSignals, assertNoFailedSpec, runSanity, sanityBinary, whyNoBinary, whyNoDevices } from "../scripts/lib/sanity.js";

const binary = sanityBinary();

test("csi-sanity against an RBD-backed stack: no failed spec", async (t) => {
  const noDevices = whyNoDevices();
  const why = whyNoBinary(binary) ?? (noDevices && `csi-sanity ${noDevices}`) ?? whyNoCeph();
  if (why) return t.skip(why);
  assertNoFailedSpec(t, await runSanity({ binary, ceph: true, signal: abortOnSignals() }));
});
