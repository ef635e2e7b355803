/**
 * The backup file of an event log: what the writer produces the reader accepts whole (foreign
 * records and removed sequences included), and every way a file can be wrong (truncated, edited,
 * reordered, of another cluster, with a subject of another log, too large for the server, sealed
 * with another key, not authenticated, breaking the log's rules) is refused with the line that
 * says why.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { subjects } from "@csi/contracts";
import { volumeReservedBody } from "../../../test-support/fixtures.js";
import { BackupError, type BackupGap, BackupKey, type BackupMessage, BackupReader, BackupWriter, type ReadOptions } from "./file.js";

const CLUSTER = "c1";
const UUID = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const meta = { v: 1, time: "2026-01-01T00:00:00.000Z", requestId: "r-1", actor: { service: "journal", replica: "t" } };

const KEY = BackupKey.fromFile(Buffer.from("k".repeat(40)), "test key");
const head = (lastSeq: number) => ({ cluster: CLUSTER, stream: subjects.streamName(CLUSTER), firstSeq: 1, lastSeq, exportedAt: meta.time });

/** A three-message log of cluster c1, as `log export` writes it (unkeyed; with `key`, sealed with it). */
function backupLines(n = 3, key?: BackupKey): string[] {
  const w = new BackupWriter(key);
  const messages: BackupMessage[] = Array.from({ length: n }, (_, i) => ({
    seq: i + 1,
    subject: subjects.volumeEvents(CLUSTER, UUID),
    data: JSON.stringify(
      i === 0 ? { ...volumeReservedBody(UUID, "pvc-1"), ...meta } : { type: "VolumeExpanded", uuid: UUID, sizeBytes: (i + 1) * 1024, ...meta },
    ),
  }));
  const header = w.header(head(n));
  return [header, ...messages.map((m) => w.message(m)), w.footer()].map((l) => l.trimEnd());
}

/** Reads every line of a file into a reader for `cluster` (unkeyed files taken): the messages it returned, or the error. */
function read(
  lines: string[],
  cluster = CLUSTER,
  opts: ReadOptions = { insecureNoMac: true },
): { messages: (BackupMessage | BackupGap)[]; foreign?: number } | { error: string; usage: boolean } {
  const r = new BackupReader(cluster, opts);
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
    return { error: err.message, usage: err.usage };
  }
}

const refused = (lines: string[], why: RegExp, cluster = CLUSTER, opts?: ReadOptions) => {
  const r = read(lines, cluster, opts);
  assert.ok("error" in r, "the file must be refused");
  assert.match(r.error, why);
  return r;
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
  const lines = [w.header(head(0)), w.footer()].map((l) => l.trimEnd());
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
  const header = w.header(head(1)).trimEnd();
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
    w.header(head(7)),
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

test("given a file sealed with the key, when it is read with that key, then it is whole; with another key, or none, it is refused", () => {
  const lines = backupLines(3, KEY);
  assert.match(lines[0] as string, new RegExp(`"seal":"hmac-sha256","keyId":"${KEY.id}"`));
  assert.match(lines.at(-1) as string, /"hmac":"[0-9a-f]{64}"/);
  assert.ok("messages" in read(lines, CLUSTER, { key: KEY }));
  const other = BackupKey.fromFile(Buffer.from("o".repeat(40)), "other");
  const wrong = refused(lines, /sealed with another key \(key id [0-9a-f]{16}; the key given has id [0-9a-f]{16}\): it cannot be authenticated/, CLUSTER, {
    key: other,
  });
  assert.equal(wrong.usage, false, "a wrong key is a failure, not a usage error");
  const none = refused(lines, /sealed with a key \(key id [0-9a-f]{16}\): give it with --key-file/, CLUSTER, {});
  assert.equal(none.usage, true);
  assert.ok("messages" in read(lines, CLUSTER, { insecureNoMac: true }), "--insecure-no-mac without the key: read, not authenticated");
});

test("given a keyed file edited anywhere — a message, the header — when it is read with the key, then its HMAC refuses it", () => {
  const lines = backupLines(3, KEY);
  const m = JSON.parse(lines[2] as string);
  m.data = m.data.replace('"sizeBytes":2048', '"sizeBytes":4096');
  refused(
    [lines[0], lines[1], JSON.stringify(m), ...lines.slice(3)] as string[],
    /line 5: the file does not match its HMAC: it was changed after the export/,
    CLUSTER,
    {
      key: KEY,
    },
  );
  const h = JSON.parse(lines[0] as string);
  h.exportedAt = "2030-01-01T00:00:00.000Z";
  refused([JSON.stringify(h), ...lines.slice(1)], /does not match its HMAC/, CLUSTER, { key: KEY });
});

test("given a keyed file edited and re-sealed without the key (an unkeyed SHA-256 recomputed), when it is read with the key, then it is refused as not authenticated", () => {
  const edited = backupLines(3).map((l) => l.replace('"sizeBytes":2048', '"sizeBytes":4096'));
  const forged = [...edited.slice(0, -1), JSON.stringify({ end: true, messages: 3, sha256: resealed(edited) })];
  const r = refused(forged, /not authenticated .* restore it only with --insecure-no-mac/, CLUSTER, { key: KEY });
  assert.equal(r.usage, true);
  assert.ok("messages" in read(forged, CLUSTER, { key: KEY, insecureNoMac: true }), "taken only when asked for, with --insecure-no-mac");
});

/** The unkeyed seal of a version-2 file's lines (header and messages), as anyone can compute it. */
function resealed(lines: string[]): string {
  const h = createHash("sha256");
  for (const l of lines.slice(0, -1)) h.update(`${l}\n`);
  return h.digest("hex");
}

test("given an unkeyed file, when it is read without --insecure-no-mac, then it is refused as a usage error, whatever key is given", () => {
  const lines = backupLines();
  assert.match(lines[0] as string, /"seal":"sha256"/);
  assert.equal(refused(lines, /not authenticated/, CLUSTER, {}).usage, true);
  assert.equal(refused(lines, /not authenticated/, CLUSTER, { key: KEY }).usage, true);
});

test("given a version 1 file (before keys: the SHA-256 of the messages only), when it is read, then it is taken only with --insecure-no-mac", () => {
  const messages = backupLines()
    .slice(1, -1)
    .map((l) => `${l}\n`);
  const sha256 = createHash("sha256").update(messages.join("")).digest("hex");
  const v1 = [
    JSON.stringify({ format: "csi-event-log", version: 1, ...head(3) }),
    ...messages.map((l) => l.trimEnd()),
    JSON.stringify({ end: true, messages: 3, sha256 }),
  ];
  assert.equal(refused(v1, /not authenticated/, CLUSTER, {}).usage, true);
  assert.ok("messages" in read(v1, CLUSTER, { insecureNoMac: true }));
  refused([JSON.stringify({ format: "csi-event-log", version: 2, ...head(3) }), ...v1.slice(1)], /a version 2 header names its seal/);
});

test("given a record larger than the server's max_payload leaves beside the restore's headers, when it is read for that server, then it is refused at its line", () => {
  const lines = backupLines();
  const bytes = Buffer.byteLength(JSON.parse(lines[1] as string).data);
  refused(lines, new RegExp(`line 2: sequence 1 holds ${bytes} bytes, more than this server's max_payload \\(${bytes + 100}\\) leaves`), CLUSTER, {
    insecureNoMac: true,
    maxPayload: bytes + 100,
  });
  assert.ok("messages" in read(lines, CLUSTER, { insecureNoMac: true, maxPayload: bytes + 256 }));
});

test("given a backup whose second volume names the first one's image (edited, digest recomputed), when it is read with the log's rules, then it is refused at that record", () => {
  const w = new BackupWriter();
  const subject = (uuid: string) => subjects.volumeEvents(CLUSTER, uuid);
  const other = "5d1f4c2e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";
  const reserved = (uuid: string) => JSON.stringify({ ...volumeReservedBody(uuid, `pvc-${uuid.slice(0, 4)}`, { imageName: `csi-vol-${UUID}` }), ...meta });
  const lines = [
    w.header(head(2)),
    w.message({ seq: 1, subject: subject(UUID), data: reserved(UUID) }),
    w.message({ seq: 2, subject: subject(other), data: reserved(other) }),
    w.footer(),
  ].map((l) => l.trimEnd());
  assert.ok("messages" in read(lines), "the file itself is well formed");
  refused(
    lines,
    /line 3: sequence 2: volume 5d1f4c2e-.* names image "default\/csi-vol-36eaa70e-.*", which volume 36eaa70e-.* holds while it lives; no journal writes such a log/,
    CLUSTER,
    {
      insecureNoMac: true,
      invariants: true,
    },
  );
});

test("a backup key: at least 32 bytes, its file's trailing newline left out; its id tells keys apart and shows none of it", () => {
  assert.throws(
    () => BackupKey.fromFile(Buffer.from("short\n"), "key file k"),
    (err: unknown) => err instanceof BackupError && err.usage && /key file k: a backup key has at least 32 bytes/.test(err.message),
  );
  const secret = "s3cr3t-".repeat(6);
  const a = BackupKey.fromFile(Buffer.from(`${secret}\n`), "a");
  assert.equal(a.id, BackupKey.fromFile(Buffer.from(secret), "b").id, "the same key with or without its newline");
  assert.notEqual(a.id, KEY.id);
  assert.match(a.id, /^[0-9a-f]{16}$/);
  assert.ok(!JSON.stringify(a).includes("s3cr3t"), "the key's bytes are not in what it shows");
});
