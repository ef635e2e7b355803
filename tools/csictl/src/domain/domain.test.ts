/** The pure parts of csictl: sizes, what a person names an aggregate by, the timeline, health. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { composeVolumeId, NodeRegistration, SUPPORTED_FS } from "@csi/contracts";
import { CliError, EXIT, notConnected } from "../errors.js";
import { MAX_TIMEOUT_MS, timeoutOption } from "../options.js";
import { collect, FILESYSTEMS } from "../program.js";
import { timeLeft } from "../progress.js";
import { findingRow, formatDuration, gcRow, parseDuration, parseLogPoint, replayRow } from "./audit.js";
import { TableTail, table } from "./format.js";
import { ago, clusterHealth, nodeHealth, removalRefusal } from "./health.js";
import { formatBytes, parseSize } from "./sizes.js";
import { csiIdOf, looksLikePvc, parseTarget, type VolumeCandidate, volumesNamed } from "./target.js";
import { actorOf, changeOf, type HistoryEntry, mergeHistories, Reorder, timelineRow } from "./timeline.js";

const UUID = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const usage = (f: () => unknown, message: RegExp) =>
  assert.throws(f, (e: unknown) => e instanceof CliError && e.exitCode === EXIT.usage && message.test(e.message));

describe("sizes", () => {
  test("parseSize: decimal and binary units, bytes, an optional B", () => {
    const cases: [string, number][] = [
      ["1073741824", 2 ** 30],
      ["8Mi", 8 * 2 ** 20],
      ["8MiB", 8 * 2 ** 20],
      ["1Gi", 2 ** 30],
      ["1.5Gi", 1.5 * 2 ** 30],
      ["500M", 500e6],
      ["2k", 2000],
      [" 4 ki ", 4096],
    ];
    for (const [text, bytes] of cases) assert.equal(parseSize(text), bytes, text);
  });
  test("parseSize: anything else is a usage error", () => {
    for (const bad of ["", "Gi", "-1Mi", "0", "1.5", "3 parsecs", "1e3", "9999999999Ti"]) usage(() => parseSize(bad), /size/);
  });
  test("formatBytes", () => {
    assert.equal(formatBytes(512), "512 B");
    assert.equal(formatBytes("8388608"), "8 MiB");
    assert.equal(formatBytes(1.5 * 2 ** 30), "1.5 GiB");
  });
});

describe("targets", () => {
  const id = composeVolumeId({ clusterID: "east-1", poolID: 4, uuid: UUID });
  test("a CSI id gives its cluster and uuid; a uuid is a uuid; anything else a request name", () => {
    assert.deepEqual(parseTarget(id), { by: "id", id, clusterID: "east-1", uuid: UUID });
    assert.deepEqual(parseTarget(UUID), { by: "uuid", uuid: UUID });
    assert.deepEqual(parseTarget("pvc-1234"), { by: "name", name: "pvc-1234" });
    assert.deepEqual(parseTarget(id, { asName: true }), { by: "name", name: id });
  });
  test("an id that starts like one but is malformed is a usage error that mentions --name", () => {
    usage(() => parseTarget("0001-0005-local-zz"), /--name/);
    usage(() => parseTarget(""), /empty/);
    usage(() => parseTarget("x".repeat(129)), /128 bytes/);
  });
  test("csiIdOf", () => {
    assert.equal(csiIdOf(id), id);
    usage(() => csiIdOf("pvc-1"), /^not a volume id: too short/);
    usage(() => csiIdOf("pvc-1", "snapshot id"), /^not a snapshot id/);
  });
});

describe("timeline", () => {
  const meta = { v: 1, time: "2026-01-01T00:00:00.000Z", requestId: "r1", actor: { service: "journal", replica: "host:1" } };
  test("what each event changed, in a few words", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ type: "NameReserved", kind: "volume", name: "pvc-1", uuid: UUID }, `name "pvc-1" → volume ${UUID}`],
      [
        {
          type: "VolumeReserved",
          uuid: UUID,
          name: "pvc-1",
          pool: "default",
          sizeBytes: 8 * 2 ** 20,
          imageName: "csi-vol-x",
          parameters: { fs: "xfs" },
          source: { kind: "snapshot", uuid: UUID },
        },
        `name "pvc-1", pool default, size 8 MiB, image csi-vol-x, from snapshot ${UUID}, params fs=xfs`,
      ],
      [{ type: "VolumeCreated", uuid: UUID, imageId: "abc", sizeBytes: 2 ** 20 }, "image id abc, size 1 MiB"],
      [{ type: "VolumeExpanded", uuid: UUID, sizeBytes: 2 ** 21 }, "size → 2 MiB"],
      [{ type: "VolumeModified", uuid: UUID, mutableParameters: { readIOPS: "500" } }, "limits → readIOPS=500"],
      [{ type: "VolumeModified", uuid: UUID, mutableParameters: {} }, "limits removed"],
      [
        { type: "VolumeClaimed", uuid: UUID, nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: true },
        "claimed by node n1: SINGLE_NODE_WRITER, mount, read-only",
      ],
      [{ type: "VolumeUnclaimed", uuid: UUID, nodeId: "n1" }, "claim of node n1 released"],
      [
        { type: "DeviceStateReported", uuid: UUID, nodeId: "n1", state: "staged", device: "/dev/loop3", path: "/s", via: "grpc", at: "t" },
        "staged device /dev/loop3 at /s",
      ],
      [{ type: "DeviceStateReported", uuid: UUID, nodeId: "n1", state: "failed", reason: "no space", via: "nats", at: "t" }, "failed (no space)"],
      [{ type: "VolumeDeleted", uuid: UUID }, "deleted"],
      [{ type: "ReservationUndone", kind: "snapshot", uuid: UUID, reason: "copy failed" }, "snapshot reservation undone: copy failed"],
      [{ type: "SomethingNewer", uuid: UUID, x: 1 }, `{"uuid":"${UUID}","x":1}`],
    ];
    for (const [event, change] of cases) assert.equal(changeOf({ ...meta, ...event }), change, String(event.type));
  });
  test("whom Kubernetes made it for: the PVC and PV, the VolumeSnapshot and its content, the pod a publish was for", () => {
    const cases: [Record<string, unknown>, string][] = [
      [
        {
          type: "VolumeReserved",
          uuid: UUID,
          name: "pvc-9",
          pool: "default",
          sizeBytes: 2 ** 20,
          imageName: "csi-vol-x",
          parameters: {},
          kubernetes: { pvcNamespace: "shop", pvcName: "data-db-0", pvName: "pvc-9" },
        },
        `name "pvc-9", pvc shop/data-db-0, pv pvc-9, pool default, size 1 MiB, image csi-vol-x`,
      ],
      [
        {
          type: "SnapshotReserved",
          uuid: UUID,
          name: "snapshot-1",
          sourceUuid: UUID,
          pool: "default",
          imageName: "csi-snap-x",
          kubernetes: { volumeSnapshotNamespace: "shop", volumeSnapshotName: "daily", volumeSnapshotContentName: "snapcontent-1" },
        },
        `name "snapshot-1", volumesnapshot shop/daily, content snapcontent-1, of volume ${UUID}, pool default, image csi-snap-x`,
      ],
      [
        {
          type: "DeviceStateReported",
          uuid: UUID,
          nodeId: "n1",
          state: "published",
          device: "/dev/loop3",
          path: "/t",
          via: "grpc",
          at: "t",
          pod: { namespace: "shop", name: "web-0", uid: "0b1c", serviceAccount: "web" },
        },
        "published device /dev/loop3 at /t for pod shop/web-0 (uid 0b1c, service account web)",
      ],
      [
        { type: "DeviceStateReported", uuid: UUID, nodeId: "n1", state: "unpublished", path: "/t", via: "grpc", at: "t", pod: { name: "web-0" } },
        "unpublished at /t for pod web-0",
      ],
    ];
    for (const [event, change] of cases) assert.equal(changeOf({ ...meta, ...event }), change, String(event.type));
  });
  test("the actor: the node (and how it was asked) for a device report, the service replica otherwise; a report's time is the node's", () => {
    const report = { ...meta, type: "DeviceStateReported", uuid: UUID, nodeId: "n1", state: "attached", via: "healer", at: "2026-01-01T00:00:05.000Z" };
    assert.equal(actorOf(report), "node n1 (healer)");
    assert.equal(actorOf({ ...meta, type: "VolumeDeleted", uuid: UUID }), "journal host:1");
    assert.deepEqual(timelineRow({ seq: 7, subject: "s", event: report }), {
      seq: 7,
      time: "2026-01-01T00:00:05.000Z",
      type: "DeviceStateReported",
      requestId: "r1",
      actor: "node n1 (healer)",
      change: "attached",
    });
  });
  const e = (seq: number): HistoryEntry => ({ seq, subject: `s${seq}`, event: { type: "VolumeExpanded", seq } });
  test("mergeHistories: log order, each sequence once", () => {
    assert.deepEqual(
      mergeHistories([e(5), e(1)], [e(3), e(5)], []).map((x) => x.seq),
      [1, 3, 5],
    );
  });
  test("Reorder: held entries go out in sequence order, a late lower one first, nothing twice", () => {
    const r = new Reorder(100, [1]);
    r.push(e(1), 0); // already shown
    r.push(e(4), 0);
    assert.deepEqual(r.take(50), [], "held");
    r.push(e(3), 60); // from another subject, a little later
    assert.deepEqual(
      r.take(100).map((x) => x.seq),
      [3, 4],
    );
    r.push(e(4), 120);
    r.push(e(6), 130);
    assert.deepEqual(
      r.take(300).map((x) => x.seq),
      [6],
    );
  });
});

describe("health", () => {
  const reg = (time: string): NodeRegistration =>
    NodeRegistration.parse({ nodeId: "n1", maxVolumes: 0, topology: { zone: "a" }, capabilities: [], version: "0.1.0", time, heartbeatMs: 10_000 });
  const now = new Date("2026-01-01T00:01:00.000Z");
  test("a node is healthy up to three missed heartbeats", () => {
    assert.equal(nodeHealth(reg("2026-01-01T00:00:30.000Z"), now).healthy, true);
    assert.equal(nodeHealth(reg("2026-01-01T00:00:30.000Z"), now).ageMs, 30_000);
    assert.equal(nodeHealth(reg("2026-01-01T00:00:31.000Z"), now, 3).healthy, true);
    assert.equal(nodeHealth(reg("2026-01-01T00:00:29.999Z"), now).healthy, false);
    assert.equal(nodeHealth(reg("not a time"), now).healthy, false);
  });
  test("node remove: refused while healthy or holding claims, unless --force", () => {
    const fresh = nodeHealth(reg("2026-01-01T00:00:50.000Z"), now);
    const stale = nodeHealth(reg("2026-01-01T00:00:00.000Z"), now);
    const claims = Array.from({ length: 7 }, (_, i) => ({ id: `v${i}`, name: `pvc-${i}` }));
    assert.equal(removalRefusal(stale, [], false), undefined);
    assert.match(
      removalRefusal(fresh, [], false) ?? "",
      /^node n1 not removed: it is healthy \(last heartbeat 10s ago\): stop its node-agent first, or it registers again within 10s \(or --force\)$/,
    );
    assert.match(removalRefusal(stale, claims.slice(0, 1), false) ?? "", /it holds a claim on v0 \(pvc-0\): csictl volume detach <volume> n1 releases each/);
    assert.match(removalRefusal(fresh, claims, false) ?? "", /healthy .*; it holds 7 claims on v0 \(pvc-0\), .*v4 \(pvc-4\), and 2 more/);
    assert.equal(removalRefusal(fresh, claims, true), undefined);
  });
  test("a cluster is served with a replica and a complete projection; lag = log − watermark", () => {
    assert.deepEqual(clusterHealth("c", 2, 10, { applied: 7, complete: true }), {
      cluster: "c",
      replicas: 2,
      logSeq: 10,
      applied: 7,
      lag: 3,
      projection: "complete",
      ok: true,
    });
    assert.equal(clusterHealth("c", 0, 10, { applied: 10, complete: true }).ok, false);
    assert.deepEqual(clusterHealth("c", 1, 10, undefined), { cluster: "c", replicas: 1, logSeq: 10, projection: "missing", ok: false });
    assert.equal(clusterHealth("c", 1, 10, { applied: 4, complete: false }).projection, "rebuilding");
    assert.deepEqual(clusterHealth("c", 1, undefined, { applied: 0, complete: true }), {
      cluster: "c",
      replicas: 1,
      applied: 0,
      projection: "complete",
      ok: true,
    });
  });
  test("ago", () => {
    assert.equal(ago(4_000), "4s ago");
    assert.equal(ago(125_000), "2m ago");
    assert.equal(ago(Number.POSITIVE_INFINITY), "never");
    assert.equal(ago(-5), "in the future");
  });
});

describe("audit: --at, --older-than, rows", () => {
  test("parseLogPoint: digits are a sequence, an ISO date or time is kept as typed; anything else is a usage error", () => {
    assert.equal(parseLogPoint("0"), 0);
    assert.equal(parseLogPoint(" 1234 "), 1234);
    assert.equal(parseLogPoint("2026-11-22T09:30:00Z"), "2026-11-22T09:30:00Z");
    assert.equal(parseLogPoint("2026-11-22"), "2026-11-22");
    for (const bad of ["", "-1", "yesterday", "2026-13-45T00:00:00Z", "12:00", "99999999999999999999"]) usage(() => parseLogPoint(bad), /--at/);
  });
  test("parseDuration / formatDuration: units, sums, plain ms; round trip", () => {
    const cases: [string, number][] = [
      ["90s", 90_000],
      ["10m", 600_000],
      ["2h", 7_200_000],
      ["1d", 86_400_000],
      ["1h30m", 5_400_000],
      ["500ms", 500],
      ["1.5h", 5_400_000],
      ["0", 0],
      ["250", 250],
    ];
    for (const [text, ms] of cases) assert.equal(parseDuration(text), ms, text);
    for (const bad of ["", "soon", "10 minutes", "h", "-5m", "1h-", "m10"]) usage(() => parseDuration(bad), /not a duration/);
    usage(() => parseDuration("4000d"), /longer than 10 years/);
    for (const ms of [0, 500, 90_000, 5_400_000, 86_400_000 + 1000]) assert.equal(parseDuration(formatDuration(ms)), ms);
    assert.equal(formatDuration(5_400_000), "1h30m");
  });
  test("rows: a replayed volume by its CSI id with size and nodes; findings and gc actions say what and why", () => {
    const volume = {
      uuid: UUID,
      name: "pvc-1",
      pool: "default",
      poolId: 0,
      imageName: `csi-vol-${UUID}`,
      imageId: "1",
      sizeBytes: 4 * 2 ** 20,
      parameters: {},
      capabilities: [],
      createdAt: "2026-01-01T00:00:00.000Z",
      claims: [{ nodeId: "n1", accessMode: "SINGLE_NODE_WRITER" as const, accessType: "mount" as const, readOnly: false }],
      mutableParameters: {},
    };
    assert.deepEqual(replayRow("local", { kind: "volume", uuid: UUID, status: "ready", seq: 7, volume }), [
      "volume",
      composeVolumeId({ clusterID: "local", poolID: 0, uuid: UUID }),
      "pvc-1",
      "ready",
      "4 MiB",
      "n1",
      7,
    ]);
    assert.deepEqual(findingRow({ type: "leakedImage", pool: "default", imageName: "x", imageId: "9", sizeBytes: 4096 }), [
      "leakedImage",
      "default/x",
      "4 KiB, no reservation owns it",
    ]);
    assert.match(findingRow({ type: "staleClaim", uuid: UUID, nodeId: "n9" })[2] as string, /claimed by n9, last heartbeat never/);
    assert.deepEqual(
      gcRow({ type: "collectReservation", pool: "p", imageName: "i", kind: "snapshot", uuid: UUID, outcome: "skipped", reason: "has an image now" }),
      ["collectReservation", "p/i", `snapshot ${UUID}`, "skipped (has an image now)", undefined],
    );
  });
});

describe("what a volume argument names (issue 37)", () => {
  const vol = (uuid: string, name: string, pvc?: string): VolumeCandidate => ({
    id: composeVolumeId({ clusterID: "local", poolID: 1, uuid }),
    clusterID: "local",
    uuid,
    name,
    ...(pvc ? { pvc } : {}),
  });
  const a = vol("0a1b2c3d-0000-4000-8000-000000000001", "pvc-a", "shop/data-a");
  const b = vol("0a1b9999-0000-4000-8000-000000000002", "pvc-b");
  const c = vol("ffff0000-0000-4000-8000-000000000003", "0a1b");
  const all = [a, b, c];
  test("the request name first, even when it is also a prefix of other uuids", () => {
    assert.deepEqual(volumesNamed("pvc-a", all), [a]);
    assert.deepEqual(volumesNamed("0a1b", all), [c]);
  });
  test("the PVC it was made for, where the log recorded one", () => {
    assert.deepEqual(volumesNamed("shop/data-a", all), [a]);
    assert.ok(looksLikePvc("shop/data-a"));
    assert.ok(!looksLikePvc("pvc-a") && !looksLikePvc("a/b/c") && !looksLikePvc("Shop/x"));
  });
  test("a unique prefix of the uuid or of the id; several are ambiguous; a too short one names nothing", () => {
    assert.deepEqual(volumesNamed("0a1b2", all), [a]);
    assert.deepEqual(volumesNamed("0A1B2C", all), [a], "hex in either case");
    assert.deepEqual(volumesNamed(a.id.slice(0, 45), all), [a]);
    assert.deepEqual(volumesNamed("0a1b-", []), []);
    assert.deepEqual(volumesNamed("ffff", all), [c]);
    assert.deepEqual(volumesNamed(a.id.slice(0, 30), all), all, "the cluster and pool part alone: every volume");
    assert.deepEqual(volumesNamed("0a1", all), [], "under MIN_PREFIX");
    assert.deepEqual(volumesNamed("nothing-like-it", all), []);
  });
});

describe("options (issue 37)", () => {
  test("--timeout: whole milliseconds from 1 to 2^31-1; anything else a usage error", () => {
    assert.equal(timeoutOption("30000"), 30000);
    assert.equal(timeoutOption(String(MAX_TIMEOUT_MS)), 2 ** 31 - 1);
    for (const bad of ["0", "-1", "1.5", "1e12", "2147483648", "soon", "", "0x10"]) {
      assert.throws(
        () => timeoutOption(bad),
        (e: unknown) => e instanceof CliError && e.exitCode === EXIT.usage,
        bad,
      );
    }
  });
  test("a repeatable option starts with no values (its help shows no default)", () => {
    assert.deepEqual(collect("a=1", undefined), ["a=1"]);
    assert.deepEqual(collect("b=2", ["a=1"]), ["a=1", "b=2"]);
  });
  test("--fs offers what the node-agent makes", () => {
    assert.deepEqual(FILESYSTEMS, [...SUPPORTED_FS]);
  });
  test("an endpoint that answered UNAVAILABLE is not one csictl could not reach", () => {
    assert.equal(notConnected("projection store unavailable: reconnecting"), undefined);
    assert.equal(notConnected("event log unavailable: connection refused by the journal"), undefined);
    assert.equal(
      notConnected("No connection established. Last error: Error: connect ECONNREFUSED /run/c.sock. Resolution note: x"),
      "connect ECONNREFUSED /run/c.sock",
    );
    assert.equal(notConnected("No connection established. Last error: connect ENOENT /x.sock"), "connect ENOENT /x.sock");
  });
});

describe("progress and followed rows", () => {
  test("timeLeft: the rate so far, whole seconds; nothing while unknown (no progress, done)", () => {
    assert.equal(timeLeft(0, 100, 5000), "", "no rate yet: no NFs left");
    assert.equal(timeLeft(100, 100, 5000), "");
    assert.equal(timeLeft(50, 100, 5000), " | 5s left");
    assert.equal(timeLeft(99, 100, 990), " | 1s left", "under a second shows 1s");
    assert.equal(timeLeft(10, 1000, 60_000), " | 1h39m left");
  });
  test("TableTail: rows printed after a table start every column where the table's do", () => {
    const head = ["SEQ", "TIME", "EVENT", "CHANGE"];
    const printed = table(head, [[7, "2026-01-01T00:00:00Z", "VolumeReserved", "size 1 MiB"]]);
    const tail = new TableTail(head, [[7, "2026-01-01T00:00:00Z", "VolumeReserved", "size 1 MiB"]], true);
    const lines = [...printed.split("\n"), tail.line([12, "2026-01-01T00:00:09Z", "Claimed", "n1"]), tail.line([100, "-", "X", ""])];
    const starts = (l: string, cells: string[]) => {
      let at = 0;
      return cells.map((c) => {
        at = l.indexOf(c, at);
        return at;
      });
    };
    const cols = starts(lines[0] as string, head);
    assert.deepEqual(starts(lines[2] as string, ["12", "2026-01-01T00:00:09Z", "Claimed", "n1"]), cols);
    assert.deepEqual(starts(lines[3] as string, ["100", "-", "X", "-"]), cols);
    const longer = tail.line([1, "t", "AVeryLongEventNameIndeed", "c"]);
    assert.match(longer, /AVeryLongEventNameIndeed {2}c$/, "a wider cell widens its column from there on");
  });
});
