/**
 * `npm run sanity`: the CSI conformance suite (csi-sanity) against a fresh stack in a temporary
 * directory (scripts/lib/sanity.ts). Extra arguments go to csi-sanity:
 *
 *   npm run sanity -- --ginkgo.focus=NodeGetVolumeStats
 *   npm run sanity -- --ceph --ginkgo.skip=Node     # (or CEPH=1) the default pool an RBD pool on a local Ceph
 *
 * The binary: $CSI_SANITY, else ../shared/tools/csi-sanity. Without one it says so and exits 0.
 * Exits non-zero when csi-sanity fails.
 */
import { whyNoCeph } from "@csi/testkit";
import { abortOnSignals, runSanity, sanityArgs, sanityBinary, summaryLine, whyNoBinary, whyNoDevices } from "./lib/sanity.js";

const binary = sanityBinary();
const noBinary = whyNoBinary(binary);
if (noBinary) {
  console.log(`sanity: skipped: ${noBinary}`);
  process.exit(0);
}
const noDevices = whyNoDevices();
if (noDevices) {
  console.error(`sanity: cannot run: csi-sanity ${noDevices}`);
  process.exit(1);
}

const { ceph, args } = sanityArgs(process.argv.slice(2));
const noCeph = ceph ? whyNoCeph() : undefined;
if (noCeph) {
  console.error(`sanity: cannot run --ceph: ${noCeph}`);
  process.exit(1);
}

try {
  const result = await runSanity({
    binary,
    args,
    ceph,
    onStackReady: (s) =>
      console.log(
        `sanity: stack ready (controller ${s.controllerEndpoint}, node ${s.nodeEndpoint}${ceph ? ", default pool on a local Ceph" : ""}); running ${binary}`,
      ),
    onOutput: (chunk) => process.stdout.write(chunk),
    signal: abortOnSignals(),
  });
  console.log(`\nsanity: ${summaryLine(result)}`);
  process.exit(result.ok ? 0 : result.exitCode || 1);
} catch (err) {
  console.error(`sanity: ${(err as Error)?.message ?? err}; the stack was stopped and its temporary directory removed`);
  process.exit(1);
}
