import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { IMAGE_NAME_RE, MiB, roundUpToMiB, snapshotImageName, volumeImageName } from "../src/index.js";

describe("roundUpToMiB", () => {
  for (const [n, want] of [
    [1, MiB],
    [MiB, MiB],
    [MiB + 1, 2 * MiB],
    [5 * MiB - 1, 5 * MiB],
  ] as const) {
    it(`${n} → ${want}`, () => assert.equal(roundUpToMiB(n), want));
  }
});

describe("image names", () => {
  const uuid = "36eaa70e-eb63-11ea-8e79-246e96907f74";
  it("derive from the uuid and are valid pool image names", () => {
    assert.equal(volumeImageName(uuid), `csi-vol-${uuid}`);
    assert.equal(snapshotImageName(uuid), `csi-snap-${uuid}`);
    assert.match(volumeImageName(uuid), IMAGE_NAME_RE);
    assert.match(snapshotImageName(uuid), IMAGE_NAME_RE);
  });
});
