/**
 * What every EventLog (services/journal/src/log/port.ts) does, as one suite run against
 * each implementation (test/event-log.test.ts: JetStreamLog on a real nats-server, MemoryLog):
 * sequences, stamped events read back as stored, fenced appends (a wrong fence, fence 0, a fence
 * passing over foreign or removed records), a batch that partly fails, reads (from, to, one
 * subject, batches, an early stop), history, a subject's last record, a record by sequence, a
 * record removed, the log's identity and end, and the size limit. Raw messages (`putRaw`) are
 * what anyone publishing on the log's subjects could put there: they read as foreign records.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, test } from "node:test";
import { DriverError, MAX_WRITTEN_EVENT_BYTES, type StoredEvent, subjects } from "@csi/contracts";
import {
  AppendError,
  type AppendMeta,
  classifyRecord,
  type EventLog,
  isFenced,
  isForeign,
  isUncertain,
  type LogRecord,
  SequenceConflict,
} from "@csi/journal/log";
import { T0, volumeReservedBody } from "@csi/journal/test-support";

/** One fresh, empty log of `cluster`, and how to put a raw message on it. */
export interface LogUnderTest {
  log: EventLog;
  cluster: string;
  /** Store raw bytes on a subject of the log (as a plain publish would); their sequence. */
  putRaw(subject: string, data: Uint8Array | string): Promise<number>;
  close(): Promise<void>;
}

const META: AppendMeta = { requestId: "r-contract", actor: { service: "journal", replica: "contract" }, time: T0 };

const fenced = (err: unknown) => err instanceof SequenceConflict && err.code === "Aborted" && isFenced(err);

export function eventLogContract(name: string, make: () => Promise<LogUnderTest>): void {
  describe(`EventLog contract: ${name}`, () => {
    let t: LogUnderTest;
    let log: EventLog;
    beforeEach(async () => {
      t = await make();
      log = t.log;
    });
    afterEach(() => t.close());

    /** A volume's subject and a valid event for it (a VolumeReserved). */
    const volume = () => {
      const uuid = randomUUID();
      return { uuid, subject: subjects.volumeEvents(t.cluster, uuid), body: volumeReservedBody(uuid, `pvc-${uuid}`) };
    };
    const append = (v: ReturnType<typeof volume>, expectedSeq?: number) =>
      log.append(expectedSeq === undefined ? { subject: v.subject, body: v.body } : { subject: v.subject, body: v.body, expectedSeq }, META);
    const readAll = async (from: number, opts?: Parameters<EventLog["read"]>[2]) => {
      const batches: number[][] = [];
      const last = await log.read(from, async (b) => void batches.push(b.map((r) => r.seq)), opts);
      return { last, batches, seqs: batches.flat() };
    };
    const foreign = (r: LogRecord | undefined) => {
      assert.ok(r && isForeign(r), `expected a foreign record, got ${JSON.stringify(r)}`);
      return r;
    };

    test("sequences start at 1 and grow across subjects; an event is stamped and reads back as stored", async () => {
      const [a, b] = [volume(), volume()];
      assert.deepEqual(await log.info().then((i) => i.last), 0, "an empty log ends at 0");
      const first = await append(a, 0);
      assert.deepEqual(first, { seq: 1, subject: a.subject, event: { ...a.body, v: 1, ...META } });
      assert.equal((await append(b, 0)).seq, 2, "the next sequence, on another subject");
      const third = await append(a);
      assert.equal(third.seq, 3, "an append without a fence");
      assert.deepEqual(await log.recordAt(1), first, "read back as it was returned");
      assert.deepEqual(await log.recordAt(3), third);
      assert.equal(await log.recordAt(4), undefined, "nothing past the end");
      assert.equal((await log.info()).last, 3);
    });

    test("an append fenced on its subject's last sequence lands (other subjects' appends in between do not matter)", async () => {
      const [a, b] = [volume(), volume()];
      await append(a, 0);
      await append(b, 0);
      await append(b, 2);
      const next = await append(a, 1);
      assert.equal(next.seq, 4);
      assert.equal(await log.lastSeqOf(a.subject), 4);
    });

    test("a wrong fence is a SequenceConflict and appends nothing", async () => {
      const [a, b] = [volume(), volume()];
      await append(a, 0); // 1
      await append(b, 0); // 2
      await append(a, 1); // 3
      await assert.rejects(append(a, 0), fenced, "fence 0: the subject is not empty");
      await assert.rejects(append(a, 1), fenced, "an older sequence of the subject: an event came after it");
      await assert.rejects(append(a, 2), fenced, "another subject's sequence before the subject's last event");
      assert.equal((await log.info()).last, 3, "nothing landed");
      assert.equal(await log.lastSeqOf(a.subject), 3);
    });

    test("fence 0 on a fresh subject lands; the subject then has that sequence", async () => {
      const [a, b] = [volume(), volume()];
      await append(a, 0);
      const stored = await append(b, 0);
      assert.equal(stored.seq, 2);
      assert.equal(await log.lastSeqOf(b.subject), 2);
      assert.deepEqual(await log.lastOf(b.subject), stored);
    });

    test("a fence passes over foreign records after it, never over an event", async () => {
      const [a, other, c] = [volume(), volume(), volume()];
      await append(a, 0); // 1
      const garbage = await t.putRaw(a.subject, "{not json"); // 2
      // A valid event, but of another volume: foreign on this subject.
      await t.putRaw(a.subject, JSON.stringify({ ...other.body, v: 1, ...META })); // 3
      const stored = await append(a, 1);
      assert.equal(stored.seq, 4, "appended after the foreign records");
      assert.equal(await log.lastSeqOf(a.subject), 4);
      await t.putRaw(a.subject, JSON.stringify({ type: "Hello" })); // 5
      await assert.rejects(append(a, garbage), fenced, "an event (4) is after the fence, whatever else is");
      await t.putRaw(c.subject, "x"); // 6
      assert.equal((await append(c, 0)).seq, 7, "fence 0 on a subject with only foreign records");
      assert.equal((await log.info()).last, 7);
    });

    test("a fence passes over removed records", async () => {
      const a = volume();
      await append(a, 0); // 1
      // An event the writer did not see, since removed.
      assert.equal(await log.deleteRecord(await t.putRaw(a.subject, JSON.stringify({ ...a.body, v: 1, ...META }))), true); // 2
      assert.equal((await append(a, 1)).seq, 3, "nothing is after the fence any more: appended");
      const garbage = await t.putRaw(a.subject, "garbage"); // 4
      assert.equal(await log.deleteRecord(garbage), true);
      assert.equal((await append(a, garbage)).seq, 5, "fenced on a record since removed: appended");
      assert.equal(await log.lastSeqOf(a.subject), 5);
    });

    test("appendAll returns the events in the order given; a failure says which landed", async () => {
      const [a, b, c] = [volume(), volume(), volume()];
      const both = await log.appendAll(
        [
          { subject: b.subject, body: b.body, expectedSeq: 0 },
          { subject: a.subject, body: a.body, expectedSeq: 0 },
        ],
        META,
      );
      assert.deepEqual(
        both.map((e) => e.subject),
        [b.subject, a.subject],
      );
      assert.deepEqual(both.map((e) => e.seq).sort(), [1, 2]);
      const err = await log
        .appendAll(
          [
            { subject: c.subject, body: c.body, expectedSeq: 0 },
            { subject: a.subject, body: a.body, expectedSeq: 0 }, // a has an event: fenced off
          ],
          META,
        )
        .then(
          () => assert.fail("a fenced append in the batch"),
          (e: unknown) => e,
        );
      assert.ok(err instanceof AppendError, `an AppendError, got ${err}`);
      assert.equal(err.code, "Aborted");
      assert.ok(err.cause instanceof SequenceConflict, "its cause: the first failure");
      assert.ok(isFenced(err) && !isUncertain(err), "fenced, not uncertain");
      assert.equal(err.landed.length, 2);
      const [landed, notLanded] = err.landed;
      assert.equal(notLanded, undefined);
      assert.deepEqual(landed, { seq: 3, subject: c.subject, event: { ...c.body, v: 1, ...META } });
      assert.deepEqual(await log.recordAt(3), landed, "what landed is in the log");
      assert.equal((await log.info()).last, 3);
    });

    test("read: from a sequence to the end or `to`, of one subject, in batches; false stops it", async () => {
      const [a, b] = [volume(), volume()];
      for (let i = 0; i < 4; i++) {
        await append(a);
        await append(b);
      }
      await t.putRaw(a.subject, "{"); // 9
      await append(b); // 10
      assert.deepEqual(await readAll(1, { batch: 3 }), {
        last: 10,
        batches: [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]],
        seqs: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      });
      assert.deepEqual(await readAll(4, { to: 8 }), { last: 8, batches: [[4, 5, 6, 7, 8]], seqs: [4, 5, 6, 7, 8] });
      assert.deepEqual(await readAll(5, { to: 99 }), { last: 10, batches: [[5, 6, 7, 8, 9, 10]], seqs: [5, 6, 7, 8, 9, 10] }, "`to` past the end");
      assert.deepEqual((await readAll(1, { subject: a.subject })).seqs, [1, 3, 5, 7, 9], "one subject's records");
      assert.deepEqual(
        await readAll(2, { subject: a.subject, batch: 2 }),
        {
          last: 9,
          batches: [
            [3, 5],
            [7, 9],
          ],
          seqs: [3, 5, 7, 9],
        },
        "bounded by the subject's last",
      );
      assert.deepEqual(await readAll(1, { subject: b.subject, to: 6, batch: 2 }), { last: 6, batches: [[2, 4], [6]], seqs: [2, 4, 6] });
      assert.deepEqual(await readAll(11), { last: 10, batches: [], seqs: [] }, "from past the end: nothing");

      const seen: LogRecord[][] = [];
      const last = await log.read(
        1,
        async (batch) => {
          seen.push(batch);
          return false;
        },
        { batch: 4 },
      );
      assert.equal(last, 10);
      assert.deepEqual(
        seen.map((batch) => batch.map((r) => r.seq)),
        [[1, 2, 3, 4]],
        "stopped after the first batch",
      );
      const records: LogRecord[] = [];
      await log.read(8, async (batch) => void records.push(...batch));
      assert.deepEqual(
        records.map((r) => [r.seq, isForeign(r)]),
        [
          [8, false],
          [9, true],
          [10, false],
        ],
        "events and foreign records, marked",
      );
    });

    test("read ends at the log's end as it was when it began", async () => {
      const a = volume();
      for (let i = 0; i < 4; i++) await append(a);
      const { last, seqs } = await (async () => {
        const seqs: number[] = [];
        const last = await log.read(
          1,
          async (batch) => {
            if (seqs.length === 0) await append(a); // 5, during the read
            seqs.push(...batch.map((r) => r.seq));
          },
          { batch: 2 },
        );
        return { last, seqs };
      })();
      assert.equal(last, 4);
      assert.deepEqual(seqs, [1, 2, 3, 4]);
      assert.equal((await log.info()).last, 5);
    });

    test("history: every record of the subjects asked, in log order across them", async () => {
      const [a, b, c] = [volume(), volume(), volume()];
      await append(a); // 1
      await append(c); // 2
      await append(b); // 3
      await t.putRaw(a.subject, "nope"); // 4
      await append(c); // 5
      await append(b); // 6
      const h = await log.history([b.subject, a.subject]);
      assert.deepEqual(
        h.map((r) => [r.seq, r.subject, isForeign(r)]),
        [
          [1, a.subject, false],
          [3, b.subject, false],
          [4, a.subject, true],
          [6, b.subject, false],
        ],
      );
      assert.deepEqual(h[0], await log.recordAt(1), "the records themselves");
      assert.deepEqual(await log.history([]), []);
      assert.deepEqual(await log.history([volume().subject]), [], "a subject without records");
    });

    test("lastSeqOf and lastOf: a subject's last record, whatever it is", async () => {
      const [a, b] = [volume(), volume()];
      assert.equal(await log.lastSeqOf(a.subject), 0, "none: 0");
      assert.equal(await log.lastOf(a.subject), undefined);
      const stored = await append(a); // 1
      await append(b); // 2
      assert.equal(await log.lastSeqOf(a.subject), 1);
      assert.deepEqual(await log.lastOf(a.subject), stored);
      const raw = await t.putRaw(a.subject, "[1,2]"); // 3
      await append(b); // 4
      assert.equal(await log.lastSeqOf(a.subject), raw);
      const last = foreign(await log.lastOf(a.subject));
      assert.equal(last.seq, raw);
      assert.equal(last.foreign.reason, "not-json");
      assert.deepEqual(last.address, { kind: "volume", uuid: a.uuid }, "the aggregate whose subject it is on");
      assert.equal(await log.lastSeqOf(b.subject), 4);
    });

    test("recordAt: a record that is not a valid event of its subject reads as foreign, as classifyRecord says", async () => {
      const [a, other] = [volume(), volume()];
      const samples: [string, string][] = [
        ["not-json", "{bad"],
        ["unknown-type", JSON.stringify({ type: "Hello", ...META })],
        ["schema", JSON.stringify({ ...a.body, sizeBytes: "huge", v: 1, ...META })],
        ["wrong-subject", JSON.stringify({ ...other.body, v: 1, ...META })],
      ];
      for (const [reason, data] of samples) {
        const seq = await t.putRaw(a.subject, data);
        const r = foreign(await log.recordAt(seq));
        assert.equal(r.foreign.reason, reason, data);
        assert.deepEqual(r, classifyRecord({ cluster: t.cluster }, { seq, subject: a.subject, data: Buffer.from(data) }));
      }
      const valid = await t.putRaw(a.subject, JSON.stringify({ ...a.body, v: 1, ...META }));
      assert.equal(isForeign((await log.recordAt(valid)) as LogRecord), false, "a valid event put raw is an event");
    });

    test("deleteRecord removes a record; info().last is then the last record there and the sequence is not given again", async () => {
      const [a, b] = [volume(), volume()];
      await append(a); // 1
      await t.putRaw(b.subject, "x"); // 2
      await append(a); // 3
      await t.putRaw(b.subject, "y"); // 4
      assert.equal(await log.deleteRecord(2), true, "a record in the middle");
      assert.equal(await log.recordAt(2), undefined);
      assert.equal((await log.info()).last, 4);
      assert.equal(await log.deleteRecord(4), true, "the log's last record");
      assert.equal(await log.recordAt(4), undefined);
      assert.equal((await log.info()).last, 3, "the last record there");
      assert.equal(await log.lastSeqOf(b.subject), 0, "no record left on the subject");
      assert.equal(await log.lastSeqOf(a.subject), 3);
      assert.deepEqual((await readAll(1)).seqs, [1, 3]);
      assert.deepEqual(
        (await log.history([a.subject, b.subject])).map((r) => r.seq),
        [1, 3],
      );
      assert.equal((await append(b, 0)).seq, 5, "a removed sequence is not given again");
      assert.equal((await log.info()).last, 5);
    });

    test("deleteRecord of a sequence without a record answers false", async () => {
      const a = volume();
      await append(a); // 1
      await t.putRaw(a.subject, "x"); // 2
      assert.equal(await log.deleteRecord(2), true);
      assert.equal(await log.deleteRecord(2), false, "removed already");
      assert.equal(await log.deleteRecord(3), false, "past the end");
    });

    test("info: the log's identity stays while it lives; another log is another", async () => {
      const { id } = await log.info();
      assert.ok(id, "an id");
      await append(volume());
      await log.deleteRecord(1);
      assert.equal((await log.info()).id, id);
      const other = await make();
      try {
        assert.notEqual((await other.log.info()).id, id);
      } finally {
        await other.close();
      }
    });

    test("an event larger than MAX_WRITTEN_EVENT_BYTES is refused (ResourceExhausted) and nothing lands", async () => {
      const a = volume();
      const base = JSON.stringify({ ...volumeReservedBody(a.uuid, `pvc-${a.uuid}`, { digest: "" }), v: 1, ...META });
      const body = (bytes: number) => volumeReservedBody(a.uuid, `pvc-${a.uuid}`, { digest: "d".repeat(bytes - Buffer.byteLength(base)) });
      await assert.rejects(
        log.append({ subject: a.subject, body: body(MAX_WRITTEN_EVENT_BYTES + 1), expectedSeq: 0 }, META),
        (err: unknown) => err instanceof DriverError && err.code === "ResourceExhausted",
      );
      await assert.rejects(
        log.append({ subject: a.subject, body: body(MAX_WRITTEN_EVENT_BYTES + 1) }, META),
        (err: unknown) => err instanceof DriverError && err.code === "ResourceExhausted",
      );
      assert.equal((await log.info()).last, 0);
      assert.equal(await log.lastSeqOf(a.subject), 0);
      const stored = await log.append({ subject: a.subject, body: body(MAX_WRITTEN_EVENT_BYTES) }, META);
      assert.equal(Buffer.byteLength(JSON.stringify(stored.event)), MAX_WRITTEN_EVENT_BYTES);
      assert.equal(isForeign((await log.recordAt(stored.seq)) as LogRecord), false, "an event of MAX_WRITTEN_EVENT_BYTES is one");
    });

    test("a fenced event of exactly MAX_WRITTEN_EVENT_BYTES lands (the fence header fits beside it)", async () => {
      const a = volume();
      const base = JSON.stringify({ ...volumeReservedBody(a.uuid, `pvc-${a.uuid}`, { digest: "" }), v: 1, ...META });
      const body = volumeReservedBody(a.uuid, `pvc-${a.uuid}`, { digest: "d".repeat(MAX_WRITTEN_EVENT_BYTES - Buffer.byteLength(base)) });
      const stored: StoredEvent = await log.append({ subject: a.subject, body, expectedSeq: 0 }, META);
      assert.equal(stored.seq, 1);
    });
  });
}
