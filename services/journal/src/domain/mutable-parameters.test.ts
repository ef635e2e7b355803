import assert from "node:assert/strict";
import { test } from "node:test";
import type { JournalEvent, StoredEvent } from "@csi/contracts";
import { keysFor } from "./kinds.js";
import { foldRecord, mutationsFor } from "./projection.js";
import { volumeFromHash, volumeView } from "./records.js";
import { digestOf, volumeDigest } from "./reservation.js";

const U = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const k = keysFor("c1", "default");
const meta = { v: 1 as const, time: "2026-01-01T00:00:00.000Z", requestId: "r", actor: { service: "journal", replica: "h:1" } };
const stored = (seq: number, event: JournalEvent): StoredEvent => ({ seq, subject: `csi.c1.evt.vol.${U}`, event });
const reserved = {
  ...meta,
  type: "VolumeReserved" as const,
  uuid: U,
  name: "pvc",
  instance: "default",
  pool: "default",
  poolId: 1,
  imageName: `csi-vol-${U}`,
  sizeBytes: 1 << 20,
  digest: "d",
  parameters: {},
  capabilities: [],
};
/** The record after one more event, through the journal's one fold (what the projection writes too). */
const applyHsets = (hash: Record<string, string>, ev: StoredEvent): Record<string, string> =>
  foldRecord("volume", U, Object.keys(hash).length ? hash : undefined, [ev]) ?? {};

test("the projection keeps the limits in force: from the reservation, then from each modification", () => {
  const plain = applyHsets({}, stored(1, reserved));
  assert.equal(plain["csi.mutable"], undefined, "a volume reserved without limits has none");
  assert.deepEqual(volumeFromHash(U, plain).mutableParameters, {});
  let h = applyHsets({}, stored(1, { ...reserved, mutableParameters: { readIOPS: "5" } }));
  assert.deepEqual(volumeFromHash(U, h).mutableParameters, { readIOPS: "5" });
  h = applyHsets(h, stored(4, { ...meta, type: "VolumeModified", uuid: U, mutableParameters: { writeIOPS: "100" } }));
  assert.deepEqual(volumeFromHash(U, h).mutableParameters, { writeIOPS: "100" }, "a modification replaces the whole set");
  assert.deepEqual(volumeView(volumeFromHash(U, h)).mutableParameters, { writeIOPS: "100" });
  assert.deepEqual(
    mutationsFor(k, [stored(4, { ...meta, type: "VolumeModified", uuid: U, mutableParameters: {} })])[0]?.guard,
    [k.record("volume", U), "_seq"],
    "guarded like every volume event",
  );
});

test("a repeated create is judged on the limits given at creation; a volume without limits digests as before", () => {
  assert.equal(volumeDigest("default", { a: "1" }), digestOf({ pool: "default", parameters: { a: "1" } }), "old reservations stay compatible");
  assert.equal(volumeDigest("default", { a: "1" }, {}), volumeDigest("default", { a: "1" }));
  assert.notEqual(volumeDigest("default", {}, { readIOPS: "5" }), volumeDigest("default", {}));
  assert.notEqual(volumeDigest("default", {}, { readIOPS: "5" }), volumeDigest("default", {}, { readIOPS: "6" }));
  assert.equal(volumeDigest("default", {}, { readIOPS: "5", writeIOPS: "1" }), volumeDigest("default", {}, { writeIOPS: "1", readIOPS: "5" }));
});
