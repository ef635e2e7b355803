/**
 * The volume deciders, as specifications: given the log, when a command decides, then its
 * decision (one round of a run) or the error it refuses with. No server.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { EventBody } from "@csi/contracts";
import { CLUSTER, given, image, landed, POOLS, request, U } from "../../../test-support/spec.js";
import { volumeDigest } from "./reservation.js";
import { createVolume, deleteVolume, expandVolume, modifyVolume, publishVolume, unpublishVolume } from "./volumes.js";

const MiB = 1024 * 1024;
const OTHER = "11111111-1111-4111-8111-111111111111";
const SNAP = "22222222-2222-4222-8222-222222222222";
const cap = { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" };
const ask = (more: Record<string, unknown> = {}) => request("volume.create", { name: "pvc-1", sizeBytes: MiB, capabilities: [cap], ...more });
const img = (uuid: string) => `csi-vol-${uuid}`;
const ref = (uuid: string, pool = "default") => ({ pool, imageName: img(uuid) });

/** A volume's reservation (and name) as a journal appended them. */
function reserved(uuid: string, more: Record<string, unknown> = {}): EventBody[] {
  const pool = (more.pool as string) ?? "default";
  return [
    { type: "NameReserved", kind: "volume", name: "pvc-1", uuid },
    {
      type: "VolumeReserved",
      uuid,
      name: "pvc-1",
      instance: "default",
      pool,
      poolId: pool === "default" ? 1 : 2,
      imageName: img(uuid),
      sizeBytes: MiB,
      digest: volumeDigest(pool, {}),
      parameters: {},
      capabilities: [cap],
      ...more,
    } as EventBody,
  ];
}
const created = (uuid: string, sizeBytes = MiB): EventBody => ({ type: "VolumeCreated", uuid, imageId: "img-1", sizeBytes });
const volume = (uuid: string, more: Record<string, unknown> = {}) => landed(...reserved(uuid, more), created(uuid));
/** A stale reservation of OTHER undone: its image removed (from `pool`), its name released, its record ended (with `reason`) unless it had. */
const undoneOther = (pool: string, reason?: string) => ({
  act: {
    effects: [{ op: "delete" as const, pool, imageName: img(OTHER) }],
    events: [
      { type: "NameReleased" as const, kind: "volume" as const, name: "pvc-1", uuid: OTHER },
      ...(reason ? [{ type: "ReservationUndone" as const, kind: "volume" as const, uuid: OTHER, reason }] : []),
    ],
  },
});

describe("CreateVolume", () => {
  test("a new name: the image of a new uuid first, then NameReserved, VolumeReserved and VolumeCreated in one act", () => {
    const [name, record] = reserved(U(0)) as [EventBody, EventBody];
    given()
      .when(createVolume(ask()))
      .then({ act: { effects: [{ op: "create", pool: "default", imageName: img(U(0)), sizeBytes: MiB, name: "pvc-1" }] } });
    given()
      .made([ref(U(0)), image(img(U(0)), MiB, "id-9")])
      .in("built")
      .when(createVolume(ask()))
      .then({ act: { events: [name, record, { type: "VolumeCreated", uuid: U(0), imageId: "id-9", sizeBytes: MiB }] } });
  });

  test("the first read locks the name and the run's fresh uuid (gc waits for its events), and reads the name with its record", () => {
    const first = createVolume(ask()).first;
    const plan = typeof first === "function" ? first({ cluster: CLUSTER, pools: POOLS, ids: U }) : first;
    assert.deepEqual(plan, {
      locks: [
        { kind: "name", of: "volume", name: "pvc-1" },
        { kind: "volume", uuid: U(0) },
      ],
      states: [{ kind: "name", of: "volume", name: "pvc-1" }],
      follow: true,
    });
  });

  test("our one write landed: the volume is answered", () => {
    const d = given()
      .made([ref(U(0)), image(img(U(0)))])
      .appended(...volume(U(0)))
      .in("written")
      .when(createVolume(ask()))
      .decision();
    if (!("reply" in d) || d.reply.uuid !== U(0) || d.reply.sizeBytes !== MiB) throw new Error(`expected our volume, got ${JSON.stringify(d)}`);
  });

  test("a repeat is answered with the same volume, once its image is seen", () => {
    const log = volume(OTHER);
    given(...log)
      .when(createVolume(ask()))
      .then({ stat: [ref(OTHER)] });
    const d = given(...log)
      .images([ref(OTHER), image(img(OTHER))])
      .in("looked")
      .when(createVolume(ask()))
      .decision();
    if (!("reply" in d)) throw new Error(`expected a reply, got ${JSON.stringify(d)}`);
    if (d.reply.uuid !== OTHER || d.reply.sizeBytes !== MiB) throw new Error(JSON.stringify(d.reply));
  });

  test("the PVC and PV it is made for are recorded on its reservation", () => {
    const kubernetes = { pvcNamespace: "shop", pvcName: "data-db-0", pvName: "pvc-1" };
    const d = given()
      .made([ref(U(0)), image(img(U(0)))])
      .in("built")
      .when(createVolume(ask({ kubernetes })))
      .decision();
    assert.deepEqual("act" in d ? d.act?.events?.[1] : d, (reserved(U(0), { kubernetes }) as [EventBody, EventBody])[1]);
  });

  test("the PVC and PV are not part of what a repeat must match: another (or none) is answered with the volume as it is", () => {
    const log = volume(OTHER, { kubernetes: { pvcNamespace: "shop", pvcName: "data-db-0", pvName: "pvc-1" } });
    for (const kubernetes of [undefined, { pvcNamespace: "other", pvcName: "x", pvName: "pvc-1" }]) {
      const d = given(...log)
        .images([ref(OTHER), image(img(OTHER))])
        .in("looked")
        .when(createVolume(ask(kubernetes ? { kubernetes } : {})))
        .decision();
      if (!("reply" in d) || d.reply.uuid !== OTHER) throw new Error(`expected the volume as it is, got ${JSON.stringify(d)}`);
    }
  });

  test("a repeat with other parameters, another size range or another source is AlreadyExists", () => {
    const seen = given(...volume(OTHER))
      .images([ref(OTHER), image(img(OTHER))])
      .in("looked");
    seen.when(createVolume(ask({ parameters: { fs: "xfs" } }))).thenThrows("AlreadyExists", /other parameters/);
    seen.when(createVolume(ask({ sizeBytes: 2 * MiB }))).thenThrows("AlreadyExists", /outside the requested range/);
    seen.when(createVolume(ask({ source: { kind: "snapshot", uuid: SNAP }, sourcePoolId: 1 }))).thenThrows("AlreadyExists", /another content source/);
  });

  test("stale: reserved by a writer that died before the image: remove it, release the name, undo the record", () => {
    given(...landed(...reserved(OTHER)))
      .images([ref(OTHER), null])
      .in("looked")
      .when(createVolume(ask()))
      .then(undoneOther("default", "the image was never created"));
  });

  test("the name points at a uuid the projection has no record of: the record is read from the log", () => {
    given(...landed({ type: "NameReserved", kind: "volume", name: "pvc-1", uuid: OTHER }))
      .when(createVolume(ask()))
      .then({ read: { fromLog: [{ kind: "volume", uuid: OTHER }] } });
    // The log has it (stored without its writer hearing of it): judged as any reservation.
    given(...landed(...reserved(OTHER)))
      .fromLog({ kind: "volume", uuid: OTHER })
      .in("pointedRead")
      .when(createVolume(ask()))
      .then({ stat: [ref(OTHER)] });
  });

  test("stale: the name points at a uuid the log has no record of: remove its image from every pool, release the name and end the record (fenced on 0)", () => {
    given(...landed({ type: "NameReserved", kind: "volume", name: "pvc-1", uuid: OTHER }))
      .fromLog({ kind: "volume", uuid: OTHER })
      .in("pointedRead")
      .when(createVolume(ask()))
      .then(undoneOther("*", "the per-uuid record is missing"));
  });

  test("stale: the name points at a record that ended: release the name only", () => {
    given(...landed(...reserved(OTHER), { type: "ReservationUndone", kind: "volume", uuid: OTHER, reason: "x" }))
      .when(createVolume(ask()))
      .then(undoneOther("*"));
  });

  test("complete: the image exists but VolumeCreated is missing (the writer died between): record it", () => {
    given(...landed(...reserved(OTHER)))
      .images([ref(OTHER), image(img(OTHER), MiB, "id-7")])
      .in("looked")
      .when(createVolume(ask()))
      .then({ act: { events: [{ type: "VolumeCreated", uuid: OTHER, imageId: "id-7", sizeBytes: MiB }] } });
  });

  test("inconsistent: the name directory and the record disagree on the name", () => {
    given(...landed({ type: "NameReserved", kind: "volume", name: "pvc-1", uuid: OTHER }, reserved(OTHER, { name: "pvc-2" })[1] as EventBody))
      .images([ref(OTHER), image(img(OTHER))])
      .in("looked")
      .when(createVolume(ask()))
      .thenThrows("Inconsistent", /whose record names pvc-2/);
  });

  test("the size and the pool come decided: past the pool's maximum is OutOfRange; an unknown pool is InvalidArgument; absent, the default pool", () => {
    given()
      .when(createVolume(ask({ pool: "fast", sizeBytes: 16 * MiB })))
      .thenThrows("OutOfRange", /maximum image size/);
    given()
      .when(createVolume(ask({ pool: "nope" })))
      .thenThrows("InvalidArgument", /unknown pool "nope"/);
    const d = given().when(createVolume(ask())).decision();
    const builtIn = "act" in d ? d.act?.effects?.[0]?.pool : undefined;
    if (builtIn !== "default") throw new Error(JSON.stringify(d));
  });

  test("sources: missing is NotFound, in another pool InvalidArgument, larger than asked OutOfRange", () => {
    const snap: EventBody[] = [
      {
        type: "SnapshotReserved",
        uuid: SNAP,
        name: "s",
        instance: "default",
        sourceUuid: OTHER,
        pool: "fast",
        poolId: 2,
        imageName: `csi-snap-${SNAP}`,
        digest: "d",
      },
      { type: "SnapshotCreated", uuid: SNAP, imageId: "i", sizeBytes: 4 * MiB },
    ];
    const restore = (more: Record<string, unknown>) => createVolume(ask({ source: { kind: "snapshot", uuid: SNAP }, sourcePoolId: 2, ...more }));
    given()
      .when(restore({}))
      .thenThrows("NotFound", /source snapshot/);
    given(...landed(...snap))
      .when(restore({ sizeBytes: 4 * MiB }))
      .thenThrows("InvalidArgument", /cross-pool clones are not supported/);
    given(...landed(...snap))
      .when(restore({ pool: "fast", sizeBytes: MiB }))
      .thenThrows("OutOfRange", /smaller than the source/);
    given(...landed(...snap))
      .when(restore({ pool: "fast", sizeBytes: 4 * MiB, sourcePoolId: 1 }))
      .thenThrows("NotFound", /source snapshot/);
  });

  test("a failed build: nothing is in the log; what the build may have left of the image is removed", () => {
    const error = new Error("disk full");
    const build = { op: "create" as const, pool: "default", imageName: img(U(0)), sizeBytes: MiB, name: "pvc-1" };
    given()
      .failed({ step: "effect", effect: build, error, fenced: false })
      .when(createVolume(ask()))
      .then({ fail: error, act: { effects: [{ op: "delete", pool: "default", imageName: img(U(0)) }] } });
  });

  test("a failed step before our image was made (someone's stale reservation undone): nothing of ours to undo", () => {
    const error = new Error("log unavailable");
    given(...landed(...reserved(OTHER)))
      .images([ref(OTHER), null])
      .failed({ step: "append", error, fenced: false })
      .when(createVolume(ask()))
      .then({ fail: error });
  });

  describe("our one write failed: the log is read, then what landed is undone", () => {
    const error = new Error("no ack");
    const ours = [ref(U(0)), image(img(U(0)))] as const;
    const both = [
      { kind: "name" as const, of: "volume" as const, name: "pvc-1" },
      { kind: "volume" as const, uuid: U(0) },
    ];
    const cleanup = [{ op: "delete" as const, pool: "default", imageName: img(U(0)) }];
    const released = { type: "NameReleased" as const, kind: "volume" as const, name: "pvc-1", uuid: U(0) };
    const undone = (reason: string) => ({ type: "ReservationUndone" as const, kind: "volume" as const, uuid: U(0), reason });

    test("first the name and our record are read from the log", () => {
      given()
        .made([...ours])
        .in("built")
        .failed({ step: "append", error, fenced: false, uncertain: true })
        .when(createVolume(ask()))
        .then({ read: { fromLog: both } });
    });

    test("unanswered, and the log has all of it: the volume is answered after all", () => {
      const d = given(...volume(U(0)))
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: false, uncertain: true })
        .in("logRead")
        .when(createVolume(ask()))
        .decision();
      if (!("reply" in d) || d.reply.uuid !== U(0)) throw new Error(`expected our volume, got ${JSON.stringify(d)}`);
    });

    test("unanswered, and the log has none of it: our record sealed on 0 (it may still arrive), then the image removed", () => {
      given()
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: false, uncertain: true })
        .in("logRead")
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [undone("its reservation failed")], cleanup } });
    });

    test("unanswered, the name landed and the record not: the name released, the record sealed, the image removed", () => {
      given(...landed((reserved(U(0)) as [EventBody])[0]))
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: false, uncertain: true })
        .in("logRead")
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [released, undone("its reservation failed")], cleanup } });
    });

    test("the name fenced off while our record landed (the extra record): the record ended, the name left alone, the image removed", () => {
      given(...landed(...reserved(OTHER).slice(0, 1), ...reserved(U(0)).slice(1), created(U(0))))
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: true })
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [undone("name fenced off")], cleanup } });
    });

    test("refused (an answer), decided on what the acks said, without reading the log", () => {
      given()
        .made([...ours])
        .in("built")
        .failed({ step: "append", error, fenced: false })
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [], cleanup } });
      given(...landed((reserved(U(0)) as [EventBody])[0]))
        .made([...ours])
        .in("built")
        .failed({ step: "append", error, fenced: false })
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [released], cleanup } });
    });

    test("refused outright (an answer: nothing landed): the image removed, nothing appended", () => {
      given()
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: true })
        .when(createVolume(ask()))
        .then({ fail: error, act: { events: [], cleanup } });
    });

    test("our record in the log without its VolumeCreated, and named: left for the CO's retry to complete", () => {
      given(...landed(...reserved(U(0))))
        .made([...ours])
        .fromLog(...both)
        .in("built")
        .failed({ step: "append", error, fenced: false, uncertain: true })
        .in("logRead")
        .when(createVolume(ask()))
        .then({ fail: error });
    });
  });
});

describe("DeleteVolume", () => {
  const del = (more: Record<string, unknown> = {}) => deleteVolume(request("volume.delete", { uuid: OTHER, ...more }));

  test("unknown, or in another pool than its id says: deleted: false (idempotent)", () => {
    given()
      .when(del())
      .then({ reply: { deleted: false } });
    given(...volume(OTHER))
      .when(del({ poolId: 2 }))
      .then({ reply: { deleted: false } });
  });

  test("published somewhere: FailedPrecondition", () => {
    const claim: EventBody = { type: "VolumeClaimed", uuid: OTHER, nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false };
    given(...volume(OTHER), ...landed(claim))
      .when(del())
      .thenThrows("FailedPrecondition", /published to n1/);
  });

  test("removes the image, releases the name that points at it and appends VolumeDeleted (the name first: a write stored in part leaves what a retry completes); then answers deleted: true", () => {
    given(...volume(OTHER))
      .devicesRead(OTHER)
      .when(del())
      .then({
        act: {
          effects: [{ op: "delete", pool: "default", imageName: img(OTHER), copied: false }],
          events: [
            { type: "NameReleased", kind: "volume", name: "pvc-1", uuid: OTHER },
            { type: "VolumeDeleted", uuid: OTHER },
          ],
        },
      });
    given(...volume(OTHER))
      .appended(...landed({ type: "VolumeDeleted", uuid: OTHER }))
      .in("deleted")
      .when(del())
      .then({ reply: { deleted: true } });
  });
});

describe("DeleteVolume while a node holds the volume (its own device reports)", () => {
  const del = () => deleteVolume(request("volume.delete", { uuid: OTHER }));
  const report = (state: string, more: Record<string, unknown> = {}): EventBody =>
    ({ type: "DeviceStateReported", uuid: OTHER, nodeId: "n1", state, via: "grpc", at: "2026-01-01T00:00:00.000Z", ...more }) as EventBody;
  const staged = [report("attached", { device: "/dev/loop3" }), report("staged", { device: "/dev/loop3", path: "/stage/v" })];

  test("its reports are read with its first read; unread, the decider asks for them", () => {
    assert.deepEqual((del().first as { devices?: string[] }).devices, [OTHER]);
    given(...volume(OTHER))
      .when(del())
      .then({ read: { devices: [OTHER] } });
  });

  test("staged, with no claim left (the CO skipped NodeUnstageVolume): FailedPrecondition naming the node, the path and the device", () => {
    given(...volume(OTHER), ...landed(...staged))
      .devicesRead(OTHER)
      .when(del())
      .thenThrows("FailedPrecondition", /node n1 has it staged at \/stage\/v, attached as \/dev\/loop3/);
    given(...volume(OTHER), ...landed(...staged, report("published", { path: "/pod/t" }), report("unpublished", { path: "/pod/t" })))
      .devicesRead(OTHER)
      .when(del())
      .thenThrows("FailedPrecondition", /staged at \/stage\/v/);
    given(...volume(OTHER), ...landed(...staged, report("unstaged", { path: "/stage/v" })))
      .devicesRead(OTHER)
      .when(del())
      .thenThrows("FailedPrecondition", /attached as \/dev\/loop3/);
  });

  test("let go (unstaged and detached), or only failed steps: the delete goes on", () => {
    const act = given(...volume(OTHER), ...landed(...staged, report("unstaged", { path: "/stage/v" }), report("detached", { device: "/dev/loop3" })))
      .devicesRead(OTHER)
      .when(del())
      .decision();
    assert.ok("act" in act, JSON.stringify(act));
    const failedOnly = given(...volume(OTHER), ...landed(report("failed", { reason: "mkfs failed" })))
      .devicesRead(OTHER)
      .when(del())
      .decision();
    assert.ok("act" in failedOnly, JSON.stringify(failedOnly));
  });
});

describe("ControllerExpandVolume and ControllerModifyVolume", () => {
  const expand = (sizeBytes: number) => expandVolume(request("volume.expand", { uuid: OTHER, sizeBytes }));

  test("expand: unknown is NotFound; never shrinks; grows the image, then records the image's size", () => {
    given()
      .when(expand(2 * MiB))
      .thenThrows("NotFound");
    const same = given(...volume(OTHER))
      .when(expand(MiB))
      .decision();
    if (!("reply" in same) || same.reply.sizeBytes !== MiB) throw new Error(`never shrinks: ${JSON.stringify(same)}`);
    given(...volume(OTHER))
      .when(expand(2 * MiB))
      .then({ act: { effects: [{ op: "resize", pool: "default", imageName: img(OTHER), sizeBytes: 2 * MiB }] } });
    given(...volume(OTHER))
      .images([ref(OTHER), image(img(OTHER), 2 * MiB)])
      .in("resized")
      .when(expand(2 * MiB))
      .then({ act: { events: [{ type: "VolumeExpanded", uuid: OTHER, sizeBytes: 2 * MiB }] } });
    given(...volume(OTHER, { pool: "fast" }))
      .when(expand(16 * MiB))
      .thenThrows("OutOfRange", /maximum image size/);
  });

  test("modify: the same limits append nothing; new ones append VolumeModified", () => {
    const modify = (m: Record<string, string>) => modifyVolume(request("volume.modify", { uuid: OTHER, mutableParameters: m }));
    given()
      .when(modify({ readIOPS: "100" }))
      .thenThrows("NotFound");
    const d = given(...volume(OTHER))
      .when(modify({}))
      .decision();
    if (!("reply" in d) || d.reply.changed) throw new Error(JSON.stringify(d));
    given(...volume(OTHER))
      .when(modify({ readIOPS: "100" }))
      .then({ act: { events: [{ type: "VolumeModified", uuid: OTHER, mutableParameters: { readIOPS: "100" } }] } });
  });
});

describe("ControllerPublishVolume / ControllerUnpublishVolume: claims", () => {
  const publish = (nodeId: string, more: Record<string, unknown> = {}) =>
    publishVolume(request("volume.publish", { uuid: OTHER, nodeId, capability: cap, readOnly: false, ...more }));
  const claimed = (nodeId: string, accessMode: "SINGLE_NODE_WRITER" | "MULTI_NODE_READER_ONLY" = "SINGLE_NODE_WRITER"): EventBody => ({
    type: "VolumeClaimed",
    uuid: OTHER,
    nodeId,
    accessMode,
    accessType: "mount",
    readOnly: false,
  });

  test("a new claim is VolumeClaimed; an existing one is answered with the publish context", () => {
    given(...volume(OTHER))
      .when(publish("n1"))
      .then({ act: { events: [claimed("n1")] } });
    const d = given(...volume(OTHER), ...landed(claimed("n1")))
      .when(publish("n1"))
      .decision();
    if (!("reply" in d) || d.reply.publishContext.imagePath !== `/pools/default/${img(OTHER)}`) throw new Error(JSON.stringify(d));
  });

  test("access modes: a single-node writer elsewhere is FailedPrecondition; another flag on the same node AlreadyExists; a full node ResourceExhausted", () => {
    const log = [...volume(OTHER), ...landed(claimed("n1"))];
    given(...log)
      .when(publish("n2"))
      .thenThrows("FailedPrecondition", /single-node access mode/);
    given(...log)
      .when(publish("n1", { readOnly: true }))
      .thenThrows("AlreadyExists");
    given(...volume(OTHER))
      .nodeClaims("n3", 2)
      .when(publish("n3", { maxVolumes: 2 }))
      .thenThrows("ResourceExhausted", /maximum of 2 volumes/);
  });

  test("unpublish: a gone volume or no claim is deleted: false; each of the node's claims is released", () => {
    const unpublish = (nodeId?: string) => unpublishVolume(request("volume.unpublish", { uuid: OTHER, ...(nodeId ? { nodeId } : {}) }));
    given()
      .when(unpublish("n1"))
      .then({ reply: { deleted: false, held: [] } });
    given(...volume(OTHER), ...landed(claimed("n1", "MULTI_NODE_READER_ONLY"), claimed("n2", "MULTI_NODE_READER_ONLY")))
      .when(unpublish())
      .then({
        act: {
          events: [
            { type: "VolumeUnclaimed", uuid: OTHER, nodeId: "n1" },
            { type: "VolumeUnclaimed", uuid: OTHER, nodeId: "n2" },
          ],
        },
      });
  });

  test("unpublish of a node that still has it staged (the CO skipped NodeUnstageVolume): released, and the reply names what the node holds", () => {
    const unpublish = unpublishVolume(request("volume.unpublish", { uuid: OTHER, nodeId: "n1" }));
    assert.deepEqual((unpublish.first as { devices?: string[] }).devices, [OTHER]);
    const report = (state: string, more: Record<string, unknown>): EventBody =>
      ({ type: "DeviceStateReported", uuid: OTHER, nodeId: "n1", state, via: "grpc", at: "2026-01-01T00:00:00.000Z", ...more }) as EventBody;
    const staged = landed(report("attached", { device: "/dev/loop3" }), report("staged", { path: "/stage/v" }));
    const decision = given(...volume(OTHER), ...landed(claimed("n1", "SINGLE_NODE_WRITER")), ...staged)
      .appended(...landed({ type: "VolumeUnclaimed", uuid: OTHER, nodeId: "n1" }))
      .devicesRead(OTHER)
      .in("released")
      .when(unpublish)
      .decision();
    assert.ok("reply" in decision && decision.reply.deleted, JSON.stringify(decision));
    assert.deepEqual(
      decision.reply.held.map(({ capability, ...h }) => ({ ...h, accessMode: capability?.accessMode })),
      [{ nodeId: "n1", device: "/dev/loop3", staged: "/stage/v", published: [], accessMode: "SINGLE_NODE_WRITER" }],
    );
  });
});
