/**
 * Whole runs of a command, as scenarios across rounds: given the log, when a command decides,
 * then its decision (with the phase its step names); after what the runner learned from that step
 * (commands/run-state.ts: Read, Statted, Acted, StepFailed), the next decision; … to the answer.
 * `thenNothingHappened`: a run that touched no image and appended no event. No server.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { EventBody, StoredEvent } from "@csi/contracts";
import { given, image, landed, request, U } from "../../../test-support/spec.js";
import type { Acted } from "../run-state.js";
import { type CreatePhase, volumeDigest } from "./reservation.js";
import { createVolume, deleteVolume } from "./volumes.js";

const MiB = 1024 * 1024;
const OTHER = "11111111-1111-4111-8111-111111111111";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
const ask = () => createVolume(request("volume.create", { name: "pvc-1", sizeBytes: MiB, capabilities: [cap] }));
const img = (uuid: string) => `csi-vol-${uuid}`;
const ref = (uuid: string) => ({ pool: "default", imageName: img(uuid) });
const nameOf = { kind: "name" as const, of: "volume" as const, name: "pvc-1" };
const ours = { kind: "volume" as const, uuid: U(0) };

const nameReserved = (uuid: string): EventBody => ({ type: "NameReserved", kind: "volume", name: "pvc-1", uuid });
const volumeReserved = (uuid: string): EventBody => ({
  type: "VolumeReserved",
  uuid,
  name: "pvc-1",
  instance: "default",
  pool: "default",
  poolId: 1,
  imageName: img(uuid),
  sizeBytes: MiB,
  digest: volumeDigest("default", {}),
  parameters: {},
  capabilities: [cap],
});
const volumeCreated = (uuid: string, imageId = "img-1"): EventBody => ({ type: "VolumeCreated", uuid, imageId, sizeBytes: MiB });
const build = { act: { effects: [{ op: "create" as const, pool: "default", imageName: img(U(0)), sizeBytes: MiB, name: "pvc-1" }] }, phase: "built" as const };
const oneWrite = { act: { events: [nameReserved(U(0)), volumeReserved(U(0)), volumeCreated(U(0), "id-9")] }, phase: "written" as const };
/** What the runner learns from our build: the image made. */
const built: Acted<CreatePhase> = { type: "Acted", images: [[ref(U(0)), image(img(U(0)), MiB, "id-9")]], made: [ref(U(0))] };

describe("CreateVolume, a whole run", () => {
  test("a new name: built, written in one write, answered with our volume", () => {
    const d = given()
      .when(ask())
      .then(build)
      .after(built)
      .then(oneWrite)
      .after({ type: "Acted", appended: landed(...oneWrite.act.events) })
      .decision();
    assert.ok("reply" in d, JSON.stringify(d));
    assert.deepEqual([d.reply.uuid, d.reply.imageId, d.reply.sizeBytes], [U(0), "id-9", MiB]);
  });

  const error = new Error("no ack");
  /** A create whose one write got no answer, to its read of the log: the log then holds what `name` and `record` say. */
  const unanswered = (name: StoredEvent[], record: StoredEvent[]) =>
    given()
      .when(ask())
      .then(build)
      .after(built)
      .then(oneWrite)
      .after({ type: "StepFailed", failure: { step: "append", error, fenced: false, uncertain: true } })
      .then({ read: { fromLog: [nameOf, ours] }, phase: "logRead" })
      .after({
        type: "Read",
        log: [
          { address: nameOf, history: name },
          { address: ours, history: record },
        ],
      });

  test("our one write unanswered, and the log has none of it: the log read, our record sealed on 0, the image removed, the run failed", () => {
    unanswered([], []).then({
      fail: error,
      act: {
        events: [{ type: "ReservationUndone", kind: "volume", uuid: U(0), reason: "its reservation failed" }],
        cleanup: [{ op: "delete", pool: "default", imageName: img(U(0)) }],
      },
    });
  });

  test("our one write unanswered, and the log has all of it: the log read, the volume answered after all", () => {
    const [name, ...record] = landed(...oneWrite.act.events);
    const d = unanswered(name ? [name] : [], record).decision();
    assert.ok("reply" in d && d.reply.uuid === U(0), JSON.stringify(d));
  });

  test("a repeat: the volume's image looked at, the volume answered; nothing happened", () => {
    given(...landed(nameReserved(OTHER), volumeReserved(OTHER), volumeCreated(OTHER)))
      .when(ask())
      .then({ stat: [ref(OTHER)], phase: "looked" })
      .after({ type: "Statted", images: [[ref(OTHER), image(img(OTHER))]] })
      .thenNothingHappened();
  });
});

describe("DeleteVolume, a whole run", () => {
  const del = () => deleteVolume(request("volume.delete", { uuid: OTHER }));

  test("unknown: answered deleted: false; nothing happened", () => {
    given().when(del()).thenNothingHappened();
  });

  test("a volume: its image removed and its events appended, then answered deleted: true", () => {
    const events: EventBody[] = [
      { type: "NameReleased", kind: "volume", name: "pvc-1", uuid: OTHER },
      { type: "VolumeDeleted", uuid: OTHER },
    ];
    given(...landed(nameReserved(OTHER), volumeReserved(OTHER), volumeCreated(OTHER)))
      .devicesRead(OTHER)
      .when(del())
      .then({ act: { effects: [{ op: "delete", pool: "default", imageName: img(OTHER), copied: false }], events }, phase: "deleted" })
      .after({ type: "Acted", images: [[ref(OTHER), null]], appended: landed(...events) })
      .then({ reply: { deleted: true } });
  });
});

describe("the spec's scenarios can fail", () => {
  test("thenNothingHappened: a run that goes on, or one that acted before it answered, fails it", () => {
    assert.throws(() => given().when(ask()).thenNothingHappened(), /the run goes on/);
    const events: EventBody[] = [
      { type: "NameReleased", kind: "volume", name: "pvc-1", uuid: OTHER },
      { type: "VolumeDeleted", uuid: OTHER },
    ];
    const round = given(...landed(nameReserved(OTHER), volumeReserved(OTHER), volumeCreated(OTHER)))
      .devicesRead(OTHER)
      .when(deleteVolume(request("volume.delete", { uuid: OTHER })));
    round.decision();
    assert.throws(() => round.after({ type: "Acted", images: [[ref(OTHER), null]], appended: landed(...events) }).thenNothingHappened(), /something happened/);
  });

  test("then: another phase than the step names fails it", () => {
    assert.throws(() =>
      given()
        .when(ask())
        .then({ ...build, phase: "written" }),
    );
  });
});
