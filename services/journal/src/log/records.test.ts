/**
 * What a record of an event stream is, as specifications: given a log (cluster, instance), when
 * a record (bytes on a subject at a sequence) is read, then an event — or a foreign record with
 * its reason, a sanitised preview and the aggregate whose fence it is on.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { type ForeignReason, JournalEvent, MAX_EVENT_BYTES, subjects } from "@csi/contracts";
import { events, GRP, SNAP, VOL } from "../../test-support/fixtures.js";
import type { Address } from "../fold/evolve.js";
import { classifyRecord, eventSubject, isForeign, type LogOf, type LogRecord, subjectAddress } from "./records.js";

const LOG: LogOf = { cluster: "c1", instance: "default" };
const VOLUME_SUBJECT = subjects.volumeEvents("c1", VOL);
const NAME_SUBJECT = subjects.nameEvents("c1", "vol", "default", "pvc");

function given(log: LogOf) {
  return {
    when(subject: string, data: string | Uint8Array, seq = 7) {
      const r = classifyRecord(log, { seq, subject, data: typeof data === "string" ? new TextEncoder().encode(data) : data });
      return {
        thenEvent(check: (r: LogRecord) => void = () => {}) {
          assert.equal(isForeign(r), false, `expected an event, got ${JSON.stringify(r)}`);
          check(r);
        },
        thenForeign(reason: ForeignReason, check: (r: Extract<LogRecord, { foreign: unknown }>) => void = () => {}) {
          assert.ok(isForeign(r), `expected a foreign record, got an event ${JSON.stringify(r)}`);
          assert.equal(r.foreign.reason, reason, r.foreign.detail);
          assert.equal(r.seq, seq);
          assert.equal(r.subject, subject);
          check(r);
        },
      };
    },
  };
}

const json = (e: { event: JournalEvent }) => JSON.stringify(e.event);

test("a valid event on its aggregate's subject is an event, as it was written", () => {
  const e = events();
  const created = e.volCreated();
  given(LOG)
    .when(VOLUME_SUBJECT, json(created))
    .thenEvent((r) => assert.deepEqual(r, { seq: 7, subject: VOLUME_SUBJECT, event: created.event }));
});

test("every event type, on the subject its journal appends it on, is an event", () => {
  const e = events();
  const all = [
    e.nameReserved("volume", "pvc", VOL),
    e.nameReleased("snapshot", "snap", SNAP),
    e.volReserved(),
    e.volCreated(),
    e.at({ type: "VolumeExpanded", uuid: VOL, sizeBytes: 2097152 }),
    e.at({ type: "VolumeModified", uuid: VOL, mutableParameters: {} }),
    e.claimed(),
    e.unclaimed(),
    e.at({ type: "VolumeDeleted", uuid: VOL }),
    e.at({ type: "DeviceStateReported", uuid: VOL, nodeId: "n1", state: "staged", via: "grpc", at: "2026-01-01T00:00:00Z" }),
    e.snapReserved(),
    e.snapCreated(),
    e.at({ type: "SnapshotDeleted", uuid: SNAP }),
    e.groupReserved(),
    e.at({ type: "GroupSnapshotCreated", uuid: GRP }),
    e.at({ type: "GroupSnapshotDeleted", uuid: GRP }),
    e.at({ type: "ReservationUndone", kind: "snapshot", uuid: SNAP, reason: "r" }),
    e.at({ type: "ImageLeakCollected", pool: "default", imageName: "x", imageId: "1", sizeBytes: 1, reason: "gc" }),
    e.at({ type: "ReservationCollected", kind: "groupsnapshot", uuid: GRP, reason: "gc" }),
  ];
  assert.deepEqual(new Set(all.map((x) => x.event.type)).size, JournalEvent.options.length, "one of each type");
  for (const x of all) {
    const subject = eventSubject(LOG, x.event);
    assert.ok(subject, x.event.type);
    given(LOG).when(subject, json(x)).thenEvent();
  }
});

test("larger than an event may be: foreign (too-large), not even parsed", () => {
  const body = `{"type":"VolumeCreated","pad":"${"x".repeat(MAX_EVENT_BYTES)}"}`;
  given(LOG)
    .when(VOLUME_SUBJECT, body)
    .thenForeign("too-large", (r) => {
      assert.equal(r.foreign.bytes, Buffer.byteLength(body));
      assert.ok(r.foreign.preview.length < 80, "a short preview");
      assert.deepEqual(r.address, { kind: "volume", uuid: VOL });
    });
});

test("not JSON, or JSON that is not an object: foreign (not-json)", () => {
  for (const data of ["{{{", "", "[1,2]", "42", "null", '"NameReserved"', new Uint8Array([0xff, 0xfe, 0x00, 0x01])]) {
    given(LOG).when(VOLUME_SUBJECT, data).thenForeign("not-json");
  }
});

test("a JetStream API reply (what a requester's reply subject made the server write there): foreign (unknown-type)", () => {
  const reply = JSON.stringify({
    type: "io.nats.jetstream.api.v1.account_info_response",
    memory: 0,
    storage: 1234,
    streams: 3,
    consumers: 2,
    limits: { max_memory: -1 },
    api: { total: 40, errors: 0 },
  });
  given(LOG)
    .when(VOLUME_SUBJECT, reply)
    .thenForeign("unknown-type", (r) => assert.match(r.foreign.detail, /unknown event type "io\.nats\.jetstream/));
  given(LOG).when(VOLUME_SUBJECT, '{"hello":"world"}').thenForeign("unknown-type");
  given(LOG).when(VOLUME_SUBJECT, '{"type":7}').thenForeign("unknown-type");
});

test("a known type that does not match its schema: foreign (schema), naming the field, never its value", () => {
  const e = events();
  const bad = { ...e.volCreated().event, sizeBytes: "SECRET-VALUE" };
  given(LOG)
    .when(VOLUME_SUBJECT, JSON.stringify(bad))
    .thenForeign("schema", (r) => {
      assert.match(r.foreign.detail, /^VolumeCreated: sizeBytes: /);
      assert.doesNotMatch(r.foreign.detail, /SECRET/);
    });
  const { requestId: _r, ...noRequestId } = e.volCreated().event;
  given(LOG)
    .when(VOLUME_SUBJECT, JSON.stringify(noRequestId))
    .thenForeign("schema", (r) => assert.match(r.foreign.detail, /requestId/));
  given(LOG)
    .when(VOLUME_SUBJECT, JSON.stringify({ ...e.volCreated().event, v: 2 }))
    .thenForeign("schema");
});

test("a valid event on another aggregate's subject: foreign (wrong-subject), on the fence of the subject's aggregate", () => {
  const e = events();
  const other = "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";
  given(LOG)
    .when(subjects.volumeEvents("c1", other), json(e.volCreated()))
    .thenForeign("wrong-subject", (r) => assert.deepEqual(r.address, { kind: "volume", uuid: other }));
  given(LOG).when(subjects.snapshotEvents("c1", VOL), json(e.volCreated())).thenForeign("wrong-subject");
  given(LOG).when(subjects.deviceEvents("c1", VOL), json(e.volCreated())).thenForeign("wrong-subject");
  given(LOG).when(NAME_SUBJECT, json(e.volCreated())).thenForeign("wrong-subject");
  given(LOG).when(subjects.volumeEvents("c2", VOL), json(e.volCreated())).thenForeign("wrong-subject");
  given(LOG)
    .when(VOLUME_SUBJECT, json(e.at({ type: "DeviceStateReported", uuid: VOL, nodeId: "n", state: "staged", via: "grpc", at: "t" })))
    .thenForeign("wrong-subject");
});

test("a name event on another name's subject, another kind's, or another instance's: foreign (wrong-subject)", () => {
  const e = events();
  const reserved = json(e.nameReserved("volume", "pvc", VOL));
  given(LOG).when(NAME_SUBJECT, reserved).thenEvent();
  given(LOG)
    .when(subjects.nameEvents("c1", "vol", "default", "pvc-2"), reserved)
    .thenForeign("wrong-subject");
  given(LOG)
    .when(subjects.nameEvents("c1", "snap", "default", "pvc"), reserved)
    .thenForeign("wrong-subject");
  given(LOG)
    .when(subjects.nameEvents("c1", "vol", "other", "pvc"), reserved)
    .thenForeign("wrong-subject", (r) => assert.equal(r.address, undefined, "another instance's name is no fence of this journal"));
  // A reader that does not know the journal's instance (a tool) takes any instance's name subject.
  given({ cluster: "c1" })
    .when(subjects.nameEvents("c1", "vol", "other", "pvc"), reserved)
    .thenEvent();
});

test("the preview is a short prefix, sanitised and quoted; the detail never quotes more than a short type", () => {
  const body = `\u0007\u001b[31mRED\u2028${"y".repeat(500)}`;
  given(LOG)
    .when(VOLUME_SUBJECT, body)
    .thenForeign("not-json", (r) => {
      const shown = JSON.parse(r.foreign.preview) as string;
      assert.ok(Buffer.byteLength(shown) <= 48, shown);
      assert.ok(shown.endsWith("…"));
      // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what must not be there
      assert.doesNotMatch(shown, /[\u0000-\u001f\u2028]/u);
      assert.equal(r.foreign.bytes, Buffer.byteLength(body));
    });
  given(LOG)
    .when(VOLUME_SUBJECT, JSON.stringify({ type: "z".repeat(10_000) }))
    .thenForeign("unknown-type", (r) => assert.ok(r.foreign.detail.length < 200));
});

test("the aggregate a subject is the fence of", () => {
  const cases: [string, Address | undefined][] = [
    [VOLUME_SUBJECT, { kind: "volume", uuid: VOL }],
    [subjects.snapshotEvents("c1", SNAP), { kind: "snapshot", uuid: SNAP }],
    [subjects.aggregateEvents("c1", "groupsnapshot", GRP), { kind: "groupsnapshot", uuid: GRP }],
    [NAME_SUBJECT, { kind: "name", of: "volume", name: "pvc" }],
    [subjects.nameEvents("c1", "grp", "default", "a.b >"), { kind: "name", of: "groupsnapshot", name: "a.b >" }],
    [subjects.nameEvents("c1", "vol", "other", "pvc"), undefined],
    [subjects.deviceEvents("c1", VOL), undefined],
    [subjects.poolEvents("c1", "default"), undefined],
    ["csi.c1.evt.vol.not-a-uuid", undefined],
    ["csi.c1.evt.vol", undefined],
    ["csi.c1.evt.name.vol.default.!!!", undefined],
    ["csi.c1.evt.name.vol.default._", undefined],
    ["csi.c1.evt.whatever.x.y", undefined],
    [subjects.volumeEvents("c2", VOL), undefined],
  ];
  for (const [subject, address] of cases) assert.deepEqual(subjectAddress(LOG, subject), address, subject);
});
