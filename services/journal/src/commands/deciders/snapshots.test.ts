/**
 * The snapshot, group snapshot and gc deciders, as specifications (given the log, when a command
 * decides, then its decision or refusal). No server.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { EventBody, GcAction } from "@csi/contracts";
import { given, image, landed, request, U } from "../../../test-support/spec.js";
import { collectReservation, removeLeakedImage } from "../../audit/findings.js";
import type { ImageInfo } from "../../pools/port.js";
import type { ImageRef } from "../decider.js";
import { createGroupSnapshot, deleteGroupSnapshot } from "./group.js";
import { digestOf } from "./reservation.js";
import { createSnapshot, deleteSnapshot } from "./snapshots.js";

const MiB = 1024 * 1024;
const V1 = "11111111-1111-4111-8111-111111111111";
const V2 = "33333333-3333-4333-8333-333333333333";
const S1 = "22222222-2222-4222-8222-222222222222";
const G1 = "44444444-4444-4444-8444-444444444444";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

function volume(uuid: string, pool = "default"): EventBody[] {
  return [
    {
      type: "VolumeReserved",
      uuid,
      name: `pvc-${uuid.slice(0, 4)}`,
      instance: "default",
      pool,
      poolId: pool === "default" ? 1 : 2,
      imageName: `csi-vol-${uuid}`,
      sizeBytes: MiB,
      digest: "d",
      parameters: {},
      capabilities: [cap],
    },
    { type: "VolumeCreated", uuid, imageId: `i-${uuid.slice(0, 4)}`, sizeBytes: MiB },
  ];
}
const snapshotOf = (uuid: string, source: string, more: Record<string, unknown> = {}): EventBody => ({
  type: "SnapshotReserved",
  uuid,
  name: "snap-1",
  instance: "default",
  sourceUuid: source,
  pool: "default",
  poolId: 1,
  imageName: `csi-snap-${uuid}`,
  digest: digestOf({ parameters: {} }),
  ...more,
});

describe("CreateSnapshot", () => {
  const ask = (sourceUuid = V1) => createSnapshot(request("snapshot.create", { name: "snap-1", sourceUuid }));

  const cut = { op: "snapshot" as const, pool: "default", from: `csi-vol-${V1}`, imageName: `csi-snap-${U(0)}`, name: "snap-1" };
  const ours: [ImageRef, ImageInfo] = [{ pool: "default", imageName: `csi-snap-${U(0)}` }, image(`csi-snap-${U(0)}`, MiB, "s-1")];
  const oneWrite = (reservation: EventBody) => ({
    act: {
      events: [
        { type: "NameReserved" as const, kind: "snapshot" as const, name: "snap-1", uuid: U(0) },
        reservation,
        { type: "SnapshotCreated" as const, uuid: U(0), imageId: "s-1", sizeBytes: MiB },
      ],
    },
  });

  test("new: cut from its source volume's image first, then reserved in the source's pool and recorded in one act; a missing source is NotFound", () => {
    given(...landed(...volume(V1)))
      .when(ask())
      .then({ act: { effects: [cut] } });
    given(...landed(...volume(V1)))
      .made(ours)
      .in("built")
      .when(ask())
      .then(oneWrite(snapshotOf(U(0), V1)));
    given()
      .when(ask())
      .thenThrows("NotFound", /source volume/);
  });

  test("the VolumeSnapshot and its content are recorded on the reservation, and a repeat need not match them", () => {
    const kubernetes = { volumeSnapshotNamespace: "shop", volumeSnapshotName: "db-daily", volumeSnapshotContentName: "snapcontent-1" };
    const with_ = (k?: object) => createSnapshot(request("snapshot.create", { name: "snap-1", sourceUuid: V1, ...(k ? { kubernetes: k } : {}) }));
    given(...landed(...volume(V1)))
      .made(ours)
      .in("built")
      .when(with_(kubernetes))
      .then(oneWrite(snapshotOf(U(0), V1, { kubernetes })));
    const log = landed(...volume(V1), { type: "NameReserved", kind: "snapshot", name: "snap-1", uuid: S1 }, snapshotOf(S1, V1, { kubernetes }), {
      type: "SnapshotCreated",
      uuid: S1,
      imageId: "s-1",
      sizeBytes: MiB,
    });
    for (const k of [undefined, { volumeSnapshotName: "other" }]) {
      const d = given(...log)
        .images([{ pool: "default", imageName: `csi-snap-${S1}` }, image(`csi-snap-${S1}`, MiB, "s-1")])
        .in("looked")
        .when(with_(k))
        .decision();
      assert.ok("reply" in d && d.reply.uuid === S1, `the snapshot as it is: ${JSON.stringify(d)}`);
    }
  });

  test("a reservation cut by a writer that died before recording it (a log of an earlier version) is completed: SnapshotCreated", () => {
    const log = landed(...volume(V1), { type: "NameReserved", kind: "snapshot", name: "snap-1", uuid: S1 }, snapshotOf(S1, V1));
    given(...log)
      .images([{ pool: "default", imageName: `csi-snap-${S1}` }, image(`csi-snap-${S1}`, MiB, "s-1")])
      .in("looked")
      .when(ask())
      .then({ act: { events: [{ type: "SnapshotCreated", uuid: S1, imageId: "s-1", sizeBytes: MiB }] } });
  });

  test("the name taken by a snapshot of another volume is AlreadyExists, whatever its state", () => {
    given(...landed(...volume(V1), ...volume(V2), { type: "NameReserved", kind: "snapshot", name: "snap-1", uuid: S1 }, snapshotOf(S1, V2)))
      .images([{ pool: "default", imageName: `csi-snap-${S1}` }, null])
      .in("looked")
      .when(ask())
      .thenThrows("AlreadyExists", /another source volume/);
  });

  test("delete: a member of a live group snapshot is InvalidArgument (after reading the group)", () => {
    const member = landed(...volume(V1), snapshotOf(S1, V1, { groupSnapshotUuid: G1 }), { type: "SnapshotCreated", uuid: S1, imageId: "x", sizeBytes: MiB });
    const group: EventBody = {
      type: "GroupSnapshotReserved",
      uuid: G1,
      name: "g",
      instance: "default",
      pool: "default",
      poolId: 1,
      digest: "d",
      members: [{ volumeUuid: V1, snapshotUuid: S1 }],
    };
    const del = deleteSnapshot(request("snapshot.delete", { uuid: S1 }));
    given(...member, ...landed(group))
      .when(del)
      .thenThrows("InvalidArgument", /part of group snapshot/);
  });
});

describe("CreateVolumeGroupSnapshot / DeleteVolumeGroupSnapshot", () => {
  const ask = (sourceUuids = [V1, V2]) => createGroupSnapshot(request("groupsnapshot.create", { name: "g", sourceUuids }));
  const members = [
    { volumeUuid: V1, snapshotUuid: U(1) },
    { volumeUuid: V2, snapshotUuid: U(2) },
  ];
  const groupReserved = (uuid: string, m = members): EventBody => ({
    type: "GroupSnapshotReserved",
    uuid,
    name: "g",
    instance: "default",
    pool: "default",
    poolId: 1,
    digest: digestOf({ sources: [V1, V2].sort(), parameters: {} }),
    members: m,
  });

  const named = (uuid: string): EventBody => ({ type: "NameReserved", kind: "groupsnapshot", name: "g", uuid });
  const memberAddresses = members.map((m) => ({ kind: "snapshot" as const, uuid: m.snapshotUuid }));
  const undone = (kind: "groupsnapshot" | "snapshot", uuid: string, reason: string): EventBody => ({ type: "ReservationUndone", kind, uuid, reason });

  test("new: the name, then (the name ours) the group (its members' snapshot uuids chosen now); refusals before the name: a missing source, sources in several pools", () => {
    given(...landed(...volume(V1), ...volume(V2)))
      .when(ask())
      .then({ act: { events: [named(U(0))] } });
    given(...landed(...volume(V1), ...volume(V2), named(U(0))))
      .in("named")
      .when(ask())
      .then({ act: { events: [groupReserved(U(0))] } });
    given(...landed(...volume(V1)))
      .when(ask())
      .thenThrows("NotFound", new RegExp(V2));
    given(...landed(...volume(V1), ...volume(V2, "fast")))
      .when(ask())
      .thenThrows("FailedPrecondition", /several pools/);
  });

  test("ours: every member reserved, then every member cut at once, then all recorded together", () => {
    const ours = landed(...volume(V1), ...volume(V2), named(U(0)), groupReserved(U(0)));
    // Our members are fresh uuids: reserved without reading them first.
    const d = given(...ours)
      .when(ask())
      .decision();
    assert.ok("act" in d && !("fail" in d) && d.act.events?.length === 2 && d.act.events.every((e) => e.type === "SnapshotReserved"), JSON.stringify(d));
    const reservedMembers = landed(
      ...members.map((m) =>
        snapshotOf(m.snapshotUuid, m.volumeUuid, { name: "g", digest: digestOf({ sources: [V1, V2].sort(), parameters: {} }), groupSnapshotUuid: U(0) }),
      ),
    );
    given(...ours, ...reservedMembers)
      .when(ask())
      .then({
        act: {
          effects: members.map((m) => ({ op: "snapshot", pool: "default", from: `csi-vol-${m.volumeUuid}`, imageName: `csi-snap-${m.snapshotUuid}` })),
        },
      });
    const cut = given(...ours, ...reservedMembers)
      .images(
        ...members.map((m, i): [ImageRef, ImageInfo] => [
          { pool: "default", imageName: `csi-snap-${m.snapshotUuid}` },
          image(`csi-snap-${m.snapshotUuid}`, MiB, `c${i}`),
        ]),
      )
      .when(ask())
      .decision();
    assert.ok("act" in cut && !("fail" in cut), JSON.stringify(cut));
    assert.deepEqual(
      cut.act?.events?.map((e) => e.type),
      ["SnapshotCreated", "SnapshotCreated", "GroupSnapshotCreated"],
    );
  });

  test("another group under the name with other sources is AlreadyExists", () => {
    const other = [{ volumeUuid: V1, snapshotUuid: S1 }];
    given(...landed(...volume(V1), ...volume(V2), named(G1), groupReserved(G1, other)))
      .fromLog({ kind: "snapshot", uuid: S1 })
      .when(ask())
      .thenThrows("AlreadyExists", /other source volumes/);
  });

  test("the name points at a group the projection has no record of: read from the log; none there: the name released and the group ended (fenced on 0)", () => {
    const pointed = { kind: "groupsnapshot" as const, uuid: G1 };
    given(...landed(...volume(V1), ...volume(V2), named(G1)))
      .when(ask())
      .then({ read: { fromLog: [pointed] } });
    given(...landed(...volume(V1), ...volume(V2), named(G1)))
      .fromLog(pointed)
      .when(ask())
      .then({
        act: {
          effects: [],
          events: [{ type: "NameReleased", kind: "groupsnapshot", name: "g", uuid: G1 }, undone("groupsnapshot", G1, "the group record is missing")],
        },
      });
  });

  test("another's group whose members the projection lacks: they are read from the projection, then the log; the undo ends them all, seen live or not", () => {
    const theirs = landed(...volume(V1), ...volume(V2), named(G1), groupReserved(G1));
    given(...theirs)
      .when(ask())
      .then({ read: { states: memberAddresses } });
    given(...theirs)
      .read(...memberAddresses)
      .when(ask())
      .then({ read: { fromLog: memberAddresses } });
    // One member's reservation stored without its writer hearing of it: the log has it; the other's none (or on its way).
    const [first, second] = members as [(typeof members)[0], (typeof members)[0]];
    const stored = landed(snapshotOf(first.snapshotUuid, V1, { name: "g", groupSnapshotUuid: G1 }));
    const reason = `not every member was cut (volumes ${V1}, ${V2})`;
    given(...theirs, ...stored)
      .fromLog(...memberAddresses)
      .images([{ pool: "default", imageName: `csi-snap-${first.snapshotUuid}` }, null])
      .when(ask())
      .then({
        act: {
          effects: [
            { op: "delete", pool: "default", imageName: `csi-snap-${first.snapshotUuid}` },
            { op: "delete", pool: "*", imageName: `csi-snap-${second.snapshotUuid}` },
          ],
          events: [
            { type: "NameReleased", kind: "groupsnapshot", name: "g", uuid: G1 },
            undone("groupsnapshot", G1, reason),
            undone("snapshot", first.snapshotUuid, reason),
            undone("snapshot", second.snapshotUuid, reason),
          ],
        },
      });
  });

  test("our group's reservation unanswered (it may have landed, or land yet): the name released and the group ended; refused: the name alone", () => {
    const error = new Error("no ack");
    const ours = landed(...volume(V1), ...volume(V2), named(U(0)));
    const released = { type: "NameReleased" as const, kind: "groupsnapshot" as const, name: "g", uuid: U(0) };
    given(...ours)
      .failed({ step: "append", error, fenced: false, uncertain: true })
      .when(ask())
      .then({ fail: error, act: { events: [released, undone("groupsnapshot", U(0), "a reservation failed")] } });
    given(...ours)
      .failed({ step: "append", error, fenced: false })
      .when(ask())
      .then({ fail: error, act: { events: [released] } });
  });

  test("a member's reservation unanswered: the undo ends every member not ended, the one not seen live too", () => {
    const error = new Error("no ack");
    const [first, second] = members as [(typeof members)[0], (typeof members)[0]];
    const reason = "a reservation failed";
    given(...landed(...volume(V1), ...volume(V2), named(U(0)), groupReserved(U(0)), snapshotOf(first.snapshotUuid, V1, { name: "g", groupSnapshotUuid: U(0) })))
      .failed({ step: "append", error, fenced: false, uncertain: true })
      .when(ask())
      .then({
        fail: error,
        act: {
          effects: [
            { op: "delete", pool: "default", imageName: `csi-snap-${first.snapshotUuid}` },
            { op: "delete", pool: "*", imageName: `csi-snap-${second.snapshotUuid}` },
          ],
          events: [
            { type: "NameReleased", kind: "groupsnapshot", name: "g", uuid: U(0) },
            undone("groupsnapshot", U(0), reason),
            undone("snapshot", first.snapshotUuid, reason),
            undone("snapshot", second.snapshotUuid, reason),
          ],
        },
      });
  });

  test("delete: snapshot ids that are not the group's are InvalidArgument; members go first, then the group and its name", () => {
    const log = landed(
      ...volume(V1),
      { type: "NameReserved", kind: "groupsnapshot", name: "g", uuid: G1 },
      groupReserved(G1, [{ volumeUuid: V1, snapshotUuid: S1 }]),
    );
    given(...log)
      .when(deleteGroupSnapshot(request("groupsnapshot.delete", { uuid: G1, snapshotUuids: [U(9)] })))
      .thenThrows("InvalidArgument", /do not match/);
    const member = landed(snapshotOf(S1, V1, { groupSnapshotUuid: G1 }));
    const del = deleteGroupSnapshot(request("groupsnapshot.delete", { uuid: G1 }));
    given(...log, ...member)
      .when(del)
      .then({ act: { effects: [{ op: "delete", pool: "default", imageName: `csi-snap-${S1}` }], events: [{ type: "SnapshotDeleted", uuid: S1 }] } });
    given(...log, ...member, ...landed({ type: "SnapshotDeleted", uuid: S1 }))
      .when(del)
      .then({
        act: {
          events: [
            { type: "GroupSnapshotDeleted", uuid: G1 },
            { type: "NameReleased", kind: "groupsnapshot", name: "g", uuid: G1 },
          ],
        },
      });
  });
});

describe("audit.gc, re-checked under the locks", () => {
  const leak: GcAction = { type: "removeLeakedImage", pool: "default", imageName: `csi-vol-${V1}`, kind: "volume", uuid: V1, outcome: "planned" };
  const ref = { pool: "default", imageName: `csi-vol-${V1}` };

  test("a leaked image whose volume lives now is skipped; one still leaked is removed and recorded", () => {
    given(...landed(...volume(V1)))
      .images([ref, image(ref.imageName)])
      .in("looked")
      .when(removeLeakedImage("r", leak))
      .then({ reply: { ...leak, outcome: "skipped", reason: `volume ${V1} owns it now` } });
    given()
      .images([ref, image(ref.imageName, MiB, "z")])
      .in("looked")
      .when(removeLeakedImage("r", leak))
      .then({
        act: {
          effects: [{ op: "delete", ...ref, quarantine: true }],
          events: [
            {
              type: "ImageLeakCollected",
              pool: "default",
              imageName: ref.imageName,
              imageId: "z",
              sizeBytes: MiB,
              reason: "in the pool without a reservation (audit.gc)",
            },
          ],
        },
      });
  });

  test("an orphaned reservation younger than the threshold is skipped; an old one is collected and its name released", () => {
    const orphan: GcAction = { type: "collectReservation", pool: "default", imageName: `csi-vol-${V1}`, kind: "volume", uuid: V1, outcome: "planned" };
    const log = landed({ type: "NameReserved", kind: "volume", name: `pvc-${V1.slice(0, 4)}`, uuid: V1 }, volume(V1)[0] as EventBody);
    const at = Date.parse("2026-01-01T00:00:00.000Z");
    given(...log)
      .images([ref, null])
      .in("looked")
      .when(collectReservation("r", orphan, { now: at + 1000, olderThanMs: 60_000 }))
      .then({ reply: { ...orphan, outcome: "skipped", reason: "it is younger than the threshold" } });
    given(...log)
      .images([ref, null])
      .in("looked")
      .when(collectReservation("r", orphan, { now: at + 120_000, olderThanMs: 60_000 }))
      .then({
        act: {
          // The delete takes what an interrupted build may have left (temporaries) too.
          effects: [{ op: "delete", pool: "default", imageName: ref.imageName, quarantine: true }],
          events: [
            { type: "ReservationCollected", kind: "volume", uuid: V1, reason: "reserved without an image past the threshold (audit.gc)" },
            { type: "NameReleased", kind: "volume", name: `pvc-${V1.slice(0, 4)}`, uuid: V1 },
          ],
        },
      });
    // A journal killed between making the image and recording it: collected with its image.
    given(...log)
      .images([ref, image(ref.imageName, MiB, "z")])
      .in("looked")
      .when(collectReservation("r", orphan, { now: at + 120_000, olderThanMs: 60_000 }))
      .then({
        act: {
          effects: [{ op: "delete", pool: "default", imageName: ref.imageName, quarantine: true }],
          events: [
            { type: "ReservationCollected", kind: "volume", uuid: V1, reason: "its image made and never recorded, past the threshold (audit.gc)" },
            { type: "NameReleased", kind: "volume", name: `pvc-${V1.slice(0, 4)}`, uuid: V1 },
          ],
        },
      });
  });
});
