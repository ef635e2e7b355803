/**
 * `npm run sanity`: the CSI conformance suite (csi-sanity) against a fresh stack in a temporary
 * directory (scripts/lib/sanity.ts). Extra arguments go to csi-sanity:
 *
 *   npm run sanity -- --ginkgo.focus=NodeGetVolumeStats
 *
 * The binary: $CSI_SANITY, else ../shared/tools/csi-sanity. Without one it says so and exits 0.
 * Exits non-zero when csi-sanity fails.
 */
import { abortOnSignals, runSanity, sanityBinary, summaryLine, whyNoBinary, whyNoDevices } from "./lib/sanity.js";

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

try {
  const result = await runSanity({
    binary,
    args: process.argv.slice(2),
    onStackReady: (s) => console.log(`sanity: stack ready (controller ${s.controllerEndpoint}, node ${s.nodeEndpoint}); running ${binary}`),
    onOutput: (chunk) => process.stdout.write(chunk),
    signal: abortOnSignals(),
  });
  console.log(`\nsanity: ${summaryLine(result)}`);
  process.exit(result.ok ? 0 : result.exitCode || 1);
} catch (err) {
  console.error(`sanity: ${(err as Error)?.message ?? err}; the stack was stopped and its temporary directory removed`);
  process.exit(1);
}
