import assert from "node:assert/strict";
import { test } from "node:test";
import type { VolumeRecord } from "../../fold/records.js";
import type { ImageInfo } from "../../pools/port.js";
import { checkVolumeReservation, digestOf, type VolumeAsk, volumeDigest } from "./reservation.js";

const MiB = 1024 * 1024;
const U = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const digest = volumeDigest("default", {});
const ask: VolumeAsk = { name: "pvc", sizeBytes: 4 * MiB, limitBytes: 0, digest, capabilities: [] };
const rec = (more: Partial<VolumeRecord> = {}): VolumeRecord => ({
  uuid: U,
  name: "pvc",
  pool: "default",
  poolId: 1,
  imageName: `csi-vol-${U}`,
  imageId: "ab",
  digest,
  createdAt: "",
  seq: 3,
  sizeBytes: 4 * MiB,
  parameters: {},
  capabilities: [],
  claims: [],
  mutableParameters: {},
  ...more,
});
const img = (sizeBytes = 4 * MiB): ImageInfo => ({ name: `csi-vol-${U}`, id: "ab", sizeBytes, readOnly: false });

const table: [string, VolumeAsk, string | undefined, VolumeRecord | undefined, ImageInfo | undefined, string][] = [
  ["nothing reserved", ask, undefined, undefined, undefined, "new"],
  ["same request again", ask, U, rec(), img(), "reuse"],
  ["grown since, still within the range", ask, U, rec({ sizeBytes: 8 * MiB }), img(8 * MiB), "reuse"],
  ["bigger size asked", { ...ask, sizeBytes: 8 * MiB }, U, rec(), img(), "conflict"],
  ["past the limit", { ...ask, limitBytes: 4 * MiB }, U, rec({ sizeBytes: 8 * MiB }), img(8 * MiB), "conflict"],
  ["other parameters", { ...ask, digest: "other" }, U, rec(), img(), "conflict"],
  ["other source", { ...ask, source: { kind: "volume", uuid: U } }, U, rec(), img(), "conflict"],
  ["record missing", ask, U, undefined, undefined, "stale"],
  ["image never made", ask, U, rec({ imageId: "" }), undefined, "stale"],
  ["image gone", ask, U, rec(), undefined, "stale"],
  ["image left half-made", ask, U, rec({ imageId: "" }), img(0), "stale"],
  ["image made, Created missing", ask, U, rec({ imageId: "" }), img(), "complete"],
  ["image made, Created missing, incompatible ask", { ...ask, digest: "other" }, U, rec({ imageId: "" }), img(), "conflict"],
  ["directory and record disagree", ask, U, rec({ name: "other" }), img(), "inconsistent"],
];

for (const [name, a, dir, r, i, want] of table) {
  test(`reservation: ${name} → ${want}`, () => assert.equal(checkVolumeReservation(a, dir, r, i).kind, want));
}

test("a repeated create is judged on the limits given at creation; a volume without limits digests as before", () => {
  assert.equal(volumeDigest("default", { a: "1" }), digestOf({ pool: "default", parameters: { a: "1" } }), "old reservations stay compatible");
  assert.equal(volumeDigest("default", { a: "1" }, {}), volumeDigest("default", { a: "1" }));
  assert.notEqual(volumeDigest("default", {}, { readIOPS: "5" }), volumeDigest("default", {}));
  assert.notEqual(volumeDigest("default", {}, { readIOPS: "5" }), volumeDigest("default", {}, { readIOPS: "6" }));
  assert.equal(volumeDigest("default", {}, { readIOPS: "5", writeIOPS: "1" }), volumeDigest("default", {}, { writeIOPS: "1", readIOPS: "5" }));
});
