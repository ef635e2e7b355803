/**
 * The backup file of an event log: what the writer produces the reader accepts whole (foreign
 * records and removed sequences included), and every way a file can be wrong (truncated, edited,
 * reordered, of another cluster, with a subject of another log) is refused with the line that
 * says why.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { subjects } from "@csi/contracts";
import { volumeReservedBody } from "./fixtures.js";
import { BackupError, type BackupGap, type BackupMessage, BackupReader, BackupWriter } from "./log-backup.js";

const CLUSTER = "c1";
const UUID = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const meta = { v: 1, time: "2026-01-01T00:00:00.000Z", requestId: "r-1", actor: { service: "journal", replica: "t" } };

/** A three-message log of cluster c1, as `log export` writes it. */
function backupLines(n = 3): string[] {
  const w = new BackupWriter();
  const messages: BackupMessage[] = Array.from({ length: n }, (_, i) => ({
    seq: i + 1,
    subject: subjects.volumeEvents(CLUSTER, UUID),
    data: JSON.stringify(
      i === 0 ? { ...volumeReservedBody(UUID, "pvc-1"), ...meta } : { type: "VolumeExpanded", uuid: UUID, sizeBytes: (i + 1) * 1024, ...meta },
    ),
  }));
  const header = w.header({
    format: "csi-event-log",
    version: 1,
    cluster: CLUSTER,
    stream: subjects.streamName(CLUSTER),
    firstSeq: 1,
    lastSeq: n,
    exportedAt: meta.time,
  });
  return [header, ...messages.map((m) => w.message(m)), w.footer()].map((l) => l.trimEnd());
}

/** Reads every line of a file into a reader for `cluster`: the messages it returned, or the error. */
function read(lines: string[], cluster = CLUSTER): { messages: (BackupMessage | BackupGap)[]; foreign?: number } | { error: string } {
  const r = new BackupReader(cluster);
  const messages: (BackupMessage | BackupGap)[] = [];
  try {
    for (const l of lines) {
      const m = r.line(l);
      if (m) messages.push(m);
    }
    const { foreign } = r.end();
    return foreign > 0 ? { messages, foreign } : { messages };
  } catch (err) {
    assert.ok(err instanceof BackupError, `a BackupError, got ${err}`);
    return { error: err.message };
  }
}

const refused = (lines: string[], why: RegExp, cluster = CLUSTER) => {
  const r = read(lines, cluster);
  assert.ok("error" in r, "the file must be refused");
  assert.match(r.error, why);
};

test("given a whole export, when it is read, then every message comes back in order, payload byte for byte", () => {
  const lines = backupLines();
  const r = read(lines);
  assert.ok("messages" in r, JSON.stringify(r));
  assert.deepEqual(
    r.messages.map((m) => m.seq),
    [1, 2, 3],
  );
  assert.equal((r.messages[1] as BackupMessage).data, JSON.parse(lines[2] as string).data);
});

test("given an empty log's export (header and footer only), when it is read, then it is whole", () => {
  const w = new BackupWriter();
  const lines = [
    w.header({ format: "csi-event-log", version: 1, cluster: CLUSTER, stream: subjects.streamName(CLUSTER), firstSeq: 1, lastSeq: 0, exportedAt: meta.time }),
    w.footer(),
  ];
  assert.deepEqual(read(lines), { messages: [] });
});

test("given a truncated file, when it is read, then it is refused: no footer, or fewer messages than the header promises", () => {
  const lines = backupLines();
  refused(lines.slice(0, -1), /without its footer \(truncated\?\)/);
  refused(lines.slice(0, 1), /without its footer/);
  refused([], /the file is empty/);
});

test("given an edited file, when it is read, then the footer's count or SHA-256 refuses it", () => {
  const lines = backupLines();
  const edited = [...lines];
  const m = JSON.parse(edited[2] as string);
  m.data = m.data.replace('"sizeBytes":2048', '"sizeBytes":4096');
  edited[2] = JSON.stringify(m);
  refused(edited, /do not match the footer's SHA-256/);
  refused([...lines.slice(0, 2), ...lines.slice(3)], /sequence 3 where 2 was due/);
  const swapped = [lines[0], lines[2], lines[1], ...lines.slice(3)] as string[];
  refused(swapped, /sequence 2 where 1 was due/);
});

test("given a backup of another cluster, or not a backup at all, when it is read for c1, then it is refused at the header", () => {
  refused(backupLines(), /the backup is of cluster c1, not c2/, "c2");
  refused(["hello"], /line 1: not JSON/);
  refused(['{"format":"tar"}'], /line 1: not a backup header/);
  const purged = backupLines();
  purged[0] = JSON.stringify({ ...JSON.parse(purged[0] as string), firstSeq: 2 });
  refused(purged, /starts at sequence 2: the log was purged/);
});

test("given a message of a subject of another log, or out of order, when it is read, then it is refused at its line", () => {
  const w = new BackupWriter();
  const header = w
    .header({ format: "csi-event-log", version: 1, cluster: CLUSTER, stream: subjects.streamName(CLUSTER), firstSeq: 1, lastSeq: 1, exportedAt: meta.time })
    .trimEnd();
  const data = JSON.stringify({ ...volumeReservedBody(UUID, "pvc-1"), ...meta });
  refused([header, JSON.stringify({ seq: 1, subject: "csi.c2.evt.vol.x", data })], /line 2: subject "csi.c2.evt.vol.x" is not of this cluster's log/);
  refused([header, JSON.stringify({ seq: 1, subject: "csi.c1.evt.>", data })], /line 2: subject .* is not of this cluster's log/);
  refused([header, JSON.stringify({ seq: 2, subject: subjects.volumeEvents(CLUSTER, UUID), data })], /sequence 2 where 1 was due/);
});

test("given a log with foreign records and removed sequences, when its export is read, then every sequence is accounted for and the foreign ones counted", () => {
  const w = new BackupWriter();
  const subject = subjects.volumeEvents(CLUSTER, UUID);
  const event = JSON.stringify({ ...volumeReservedBody(UUID, "pvc-1"), ...meta });
  const lines = [
    w.header({ format: "csi-event-log", version: 1, cluster: CLUSTER, stream: subjects.streamName(CLUSTER), firstSeq: 1, lastSeq: 7, exportedAt: meta.time }),
    w.gap({ seq: 1, removedThrough: 1 }),
    w.message({ seq: 2, subject, data: event }),
    w.message({ seq: 3, subject, data: "{oops" }),
    w.message({ seq: 4, subject, data: '{"type":"io.nats.jetstream.api.v1.account_info_response"}' }),
    w.gap({ seq: 5, removedThrough: 6 }),
    w.message({ seq: 7, subject: subjects.volumeEvents(CLUSTER, "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f"), data: event }),
    w.footer(),
  ].map((l) => l.trimEnd());
  const r = read(lines);
  assert.ok("messages" in r, JSON.stringify(r));
  assert.deepEqual(
    r.messages.map((m) => ("removedThrough" in m ? `${m.seq}-${m.removedThrough}` : m.seq)),
    ["1-1", 2, 3, 4, "5-6", 7],
  );
  assert.equal(r.foreign, 3, "bad JSON, a JetStream reply, an event on another volume's subject");
  refused([lines[0], lines[2], ...lines.slice(1)] as string[], /sequence 2 where 1 was due/);
  const edited = [...lines];
  edited[5] = JSON.stringify({ seq: 5, removedThrough: 5 });
  refused(edited, /sequence 7 where 6 was due/);
});

test("given lines after the footer, when they are read, then blank ones are ignored and anything else is refused", () => {
  const lines = backupLines();
  assert.ok("messages" in read([...lines, ""]));
  refused([...lines, lines[1] as string], /after the footer/);
});
