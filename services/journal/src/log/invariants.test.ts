/**
 * The log's rules as a restore checks them: given a log, when it is replayed through the fold
 * with the rules, then it passes, or is refused at the record that breaks one (which rule, which
 * sequence). Every log here that passes is one a journal writes (the deciders' event orders).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { events, SNAP, VOL } from "../../test-support/fixtures.js";
import { LogInvariantError, LogInvariants } from "./invariants.js";
import type { LogRecord } from "./records.js";

const OTHER = "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";

/** Replays `log` through the rules: "ok", or the refusal's message. */
function replay(log: LogRecord[]): string {
  const rules = new LogInvariants();
  try {
    for (const r of log) rules.add(r);
    return "ok";
  } catch (err) {
    assert.ok(err instanceof LogInvariantError, String(err));
    return err.message;
  }
}

/** A volume of uuid `uuid` named `name` reserved (name, then record) and made. */
function volume(e: ReturnType<typeof events>, uuid: string, name: string, imageName = `csi-vol-${uuid}`) {
  return [
    e.nameReserved("volume", name, uuid),
    e.volReserved({ uuid, name, imageName }),
    e.at({ type: "VolumeCreated", uuid, imageId: "1a", sizeBytes: 1048576 }),
  ];
}

test("given a whole life (reserve, create, claim, snapshot, group, unclaim, delete, the name used again), when replayed, then it passes", () => {
  const e = events();
  const log = [
    ...volume(e, VOL, "pvc"),
    e.claimed(),
    e.nameReserved("snapshot", "snap", SNAP),
    e.snapReserved(),
    e.snapCreated(),
    e.groupReserved(),
    e.unclaimed(),
    e.at({ type: "SnapshotDeleted", uuid: SNAP }),
    e.at({ type: "VolumeDeleted", uuid: VOL }),
    e.nameReleased("volume", "pvc", VOL),
    ...volume(e, OTHER, "pvc"),
  ];
  assert.equal(replay(log), "ok");
});

test("given a reservation that landed before its name's (a fenced retry of the name), when replayed, then it passes", () => {
  const e = events();
  assert.equal(replay([e.volReserved({ name: "pvc" }), e.nameReserved("volume", "pvc", VOL), e.volCreated()]), "ok");
});

test("given a stale reservation undone and the name reserved afresh, when replayed, then it passes", () => {
  const e = events();
  const log = [
    e.nameReserved("volume", "pvc", VOL),
    e.volReserved({ name: "pvc" }),
    e.nameReleased("volume", "pvc", VOL),
    e.at({ type: "ReservationUndone", kind: "volume", uuid: VOL, reason: "stale" }),
    ...volume(e, OTHER, "pvc"),
  ];
  assert.equal(replay(log), "ok");
});

test("given a second volume that names a live volume's image (an edited backup), when replayed, then it is refused at its reservation", () => {
  const e = events();
  const log = [...volume(e, VOL, "pvc-a"), ...volume(e, OTHER, "pvc-b", `csi-vol-${VOL}`)];
  assert.match(replay(log), new RegExp(`^sequence 5: volume ${OTHER} names image "default/csi-vol-${VOL}", which volume ${VOL} holds while it lives$`));
});

test("given a snapshot that names a live volume's image, when replayed, then it is refused (image names are unique across kinds)", () => {
  const e = events();
  assert.match(
    replay([...volume(e, VOL, "pvc"), e.snapReserved({ imageName: `csi-vol-${VOL}` })]),
    /^sequence 4: snapshot .* names image .* which volume .* holds/,
  );
});

test("given an image name used again only after its record ended, when replayed, then it passes (only live records hold an image)", () => {
  const e = events();
  const log = [...volume(e, VOL, "pvc-a"), e.at({ type: "VolumeDeleted", uuid: VOL }), ...volume(e, OTHER, "pvc-b", `csi-vol-${VOL}`)];
  assert.equal(replay(log), "ok");
});

test("given a uuid reserved twice (before or after it ended), when replayed, then the second reservation is refused", () => {
  const e = events();
  assert.match(
    replay([...volume(e, VOL, "pvc"), e.volReserved({ name: "pvc" })]),
    /^sequence 4: a second VolumeReserved of volume .*: a uuid is reserved once$/,
  );
  const f = events();
  assert.match(
    replay([...volume(f, VOL, "pvc"), f.at({ type: "VolumeDeleted", uuid: VOL }), f.volReserved({ name: "pvc" })]),
    /^sequence 5: a second VolumeReserved/,
  );
});

test("given a name pointed at another name's live record, or at an ended one, when replayed, then the NameReserved is refused", () => {
  const e = events();
  assert.match(
    replay([...volume(e, VOL, "pvc-a"), e.nameReserved("volume", "pvc-b", VOL)]),
    /^sequence 4: NameReserved points volume name "pvc-b" at volume .*, the record of name "pvc-a": a name is reserved for a new record$/,
  );
  const f = events();
  assert.match(replay([...volume(f, VOL, "pvc"), f.at({ type: "VolumeDeleted", uuid: VOL }), f.nameReserved("volume", "pvc", VOL)]), /which has ended/);
});

test("given foreign records on any subject, when replayed, then they are not judged", () => {
  const e = events();
  const log = [e.foreign({ kind: "volume", uuid: VOL }), ...volume(e, VOL, "pvc"), e.foreign({ kind: "name", of: "volume", name: "pvc" }), e.foreign()];
  assert.equal(replay(log), "ok");
});
