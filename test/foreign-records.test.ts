/**
 * A journal that survives its log (docs/journal.md, "Foreign records in the log"), on real
 * nats-server, redis-server and journal processes: 100 foreign records of every kind (bad JSON,
 * an unknown type, a known type off its schema, a valid event on another aggregate's subject,
 * larger than an event may be, JetStream API replies the server itself wrote there because a
 * requester named the subject as its reply) are put into a live event stream among real events,
 * as an operator with full rights (or a misdirected reply) could. The running journal keeps
 * serving every volume — expand, delete, create on subjects that got garbage answer, none
 * ABORTED —, `csictl history` shows the garbage as foreign rows, `csictl verify` names exactly
 * the 100 sequences (exit 1), the journal's metric counts them, a restarted journal starts and
 * serves, a rebuild completes, and `csictl log purge-foreign` removes them (re-checked: an event
 * is never removed) after which verify is clean and every fence still holds.
 *
 * Then the responder: a journal command or a service-discovery request whose reply subject is
 * not an inbox (an event subject) is dropped unanswered and counted: nothing lands in the stream.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { JournalEvent, MAX_EVENT_BYTES, nameToken, subjects, type VolumeView } from "@csi/contracts";
import { keysFor, RedisStore } from "@csi/journal/redis";
import type { ServiceProcess } from "@csi/testkit";
import { csictlOf, type JournalTestEnv, journalTestEnv, scrape } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const CLUSTER = "fr";
const STREAM = subjects.streamName(CLUSTER);
const MiB = 1024 * 1024;
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
/** A server that takes a record larger than an event may be (the default max_payload is exactly MAX_EVENT_BYTES). */
const NATS_CONFIG = `max_payload: ${4 * MiB}\n`;

let j: JournalTestEnv;
let journal: ServiceProcess;

before(async () => {
  j = await journalTestEnv(CLUSTER, { natsConfig: NATS_CONFIG, timeoutMs: 300_000 }); // rebuilds of this log are slow on a busy machine
  journal = await j.spawnJournal();
});
after(async () => {
  await journal?.stop();
  await j?.dispose();
});

const csictlAt = csictlOf(() => j, CLUSTER);
/**
 * csictl with a deadline for a busy machine: a verify reads the whole log, MiB-sized foreign
 * records included, and took longer than the default 30 s there ("journal of cluster fr did not
 * answer in time").
 */
const csictl = (...args: string[]) => csictlAt("--timeout", "300000", ...args);
/**
 * csictl again while it exits 3 with UNAVAILABLE (on a busy machine a JetStream call of the
 * journal can time out; the journal then answers Unavailable for the caller to retry), as an
 * operator would, at most 5 tries. `tries`: how many it took.
 */
const csictlRetrying = async (...args: string[]) => {
  for (let tries = 1; ; tries++) {
    const r = await csictl(...args);
    if (r.code !== 3 || !/UNAVAILABLE/.test(r.stderr) || tries >= 5) return { ...r, tries };
    console.log(`# csictl ${args.join(" ")}: ${r.stderr.trim()} (try ${tries}); again`);
  }
};

const call = <C extends Parameters<JournalTestEnv["client"]["call"]>[1]>(command: C, req: Parameters<JournalTestEnv["client"]["call"]>[2] & object) =>
  j.client.call(CLUSTER, command, req as never);
const lastSeq = async () => (await (await jetstreamManager(j.nc)).streams.info(STREAM)).state.last_seq;
const recordAt = async (seq: number) =>
  (await jetstreamManager(j.nc)).streams.getMessage(STREAM, { seq }).then(
    (m) => m ?? undefined,
    () => undefined,
  );
const journalMetric = async (name: string, labels: Record<string, string> = {}) => {
  const samples = await scrape(journal.metricsUrl);
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0);
};

/** Waits (polling the stream, not the clock) until its last sequence passes `seq`; returns it. */
async function lastSeqAbove(seq: number): Promise<number> {
  for (;;) {
    const now = await lastSeq();
    if (now > seq) return now;
    await sleep(10);
  }
}

type GarbageKind = "bad-json" | "unknown-type" | "schema" | "wrong-subject" | "oversized" | "jetstream-reply";
const KINDS: GarbageKind[] = [
  "bad-json",
  "unknown-type",
  "wrong-subject",
  "oversized",
  "jetstream-reply",
  "bad-json",
  "schema",
  "wrong-subject",
  "oversized",
  "jetstream-reply",
];

const meta = () => ({ v: 1, time: new Date().toISOString(), requestId: "forged", actor: { service: "journal", replica: "nobody" } });

/**
 * One foreign record of `kind` on `subject`, as anyone with full rights could put it there (the
 * JetStream replies are the server's own: a request with the subject as its reply). Its sequence.
 */
async function plant(kind: GarbageKind, subject: string, otherVolume: string): Promise<number> {
  const js = jetstream(j.nc);
  switch (kind) {
    case "bad-json":
      return (await js.publish(subject, `{"type":"VolumeDeleted","uuid":${randomUUID()}`)).seq;
    case "unknown-type":
      return (await js.publish(subject, JSON.stringify({ type: "Hello", from: "nats pub", ...meta() }))).seq;
    case "schema":
      return (await js.publish(subject, JSON.stringify({ type: "VolumeExpanded", uuid: otherVolume, sizeBytes: "huge", ...meta() }))).seq;
    case "wrong-subject": {
      // A valid event — another volume's end — on this subject: it must not end anything.
      const forged = { type: "VolumeDeleted", uuid: otherVolume, ...meta() };
      assert.ok(JournalEvent.safeParse(forged).success, "schema-valid");
      return (await js.publish(subject, JSON.stringify(forged))).seq;
    }
    case "oversized":
      return (await js.publish(subject, JSON.stringify({ type: "VolumeCreated", pad: "x".repeat(MAX_EVENT_BYTES) }))).seq;
    case "jetstream-reply": {
      const before = await lastSeq();
      j.nc.publish("$JS.API.INFO", "", { reply: subject });
      const seq = await lastSeqAbove(before);
      const m = await recordAt(seq);
      assert.equal(m?.subject, subject, "the server's reply landed on the subject");
      assert.match(m?.string() ?? "", /io\.nats\.jetstream\.api\.v1\.account_info_response/);
      return seq;
    }
  }
}

const planted: number[] = [];
const vols: VolumeView[] = [];
let snapUuid = "";
let later = ""; // a request name that got garbage on its subject before its first create

describe("foreign records in a live event stream", () => {
  test("the running journal serves every volume while 100 foreign records land among its events", async () => {
    for (let i = 0; i < 5; i++) vols.push(await call("volume.create", { requestId: `c${i}`, name: `pvc-${i}`, sizeBytes: MiB, capabilities: [cap] }));
    snapUuid = (await call("snapshot.create", { requestId: "s0", name: "snap-0", sourceUuid: (vols[0] as VolumeView).uuid })).uuid;
    later = `pvc-later-${randomUUID().slice(0, 8)}`;
    const [v0, v1, v2, v3, v4] = vols as [VolumeView, VolumeView, VolumeView, VolumeView, VolumeView];
    const nameOf = (name: string) => subjects.nameEvents(CLUSTER, "vol", "default", name);
    const targets = [
      subjects.volumeEvents(CLUSTER, v0.uuid),
      nameOf("pvc-0"),
      subjects.volumeEvents(CLUSTER, v1.uuid),
      subjects.volumeEvents(CLUSTER, v2.uuid),
      nameOf("pvc-2"),
      subjects.volumeEvents(CLUSTER, v3.uuid),
      nameOf(later),
      subjects.snapshotEvents(CLUSTER, snapUuid),
      subjects.deviceEvents(CLUSTER, v0.uuid),
      subjects.poolEvents(CLUSTER, "default"),
      subjects.volumeEvents(CLUSTER, randomUUID()), // an aggregate never seen
      `csi.${CLUSTER}.evt.name.vol.another-instance.${nameToken("pvc-0")}`,
      `csi.${CLUSTER}.evt.junk`,
    ];
    for (let i = 0; i < 100; i++) {
      planted.push(await plant(KINDS[i % KINDS.length] as GarbageKind, targets[i % targets.length] as string, v4.uuid));
      // Real events among them: every 20 records, v0 (whose subject and name got garbage) grows.
      if (i % 20 === 19) await call("volume.expand", { requestId: `grow-${i}`, uuid: v0.uuid, sizeBytes: (2 + i) * MiB });
    }
    assert.equal(new Set(planted).size, 100);

    // Every volume whose subjects got garbage is served: expand, delete, create, snapshot; nothing ABORTED.
    const grown = await call("volume.expand", { requestId: "grow-v1", uuid: v1.uuid, sizeBytes: 8 * MiB });
    assert.equal(grown.sizeBytes, 8 * MiB);
    assert.deepEqual(await call("volume.delete", { requestId: "del-v2", uuid: v2.uuid }), { deleted: true });
    const again = await call("volume.create", { requestId: "re-v2", name: "pvc-2", sizeBytes: MiB, capabilities: [cap] });
    assert.notEqual(again.uuid, v2.uuid, "the name, its subject full of garbage, is reserved afresh");
    const made = await call("volume.create", { requestId: "later", name: later, sizeBytes: MiB, capabilities: [cap] });
    assert.equal(made.name, later);
    assert.equal((await call("volume.create", { requestId: "later-2", name: later, sizeBytes: MiB, capabilities: [cap] })).uuid, made.uuid, "idempotent");
    await call("snapshot.create", { requestId: "s3", name: "snap-3", sourceUuid: v3.uuid });
    assert.equal((await call("volume.get", { uuid: v4.uuid })).uuid, v4.uuid, "v4 lives: its forged VolumeDeleted on other subjects ended nothing");
    assert.ok((await call("volume.list", {})).entries.some((v) => v.uuid === v4.uuid));
    assert.equal(await journalMetric("csi_journal_aborted_total"), 0, "no command answered ABORTED");
  });

  test("csictl history shows the foreign records on a volume's subjects as skipped rows", async () => {
    const v0 = vols[0] as VolumeView;
    const r = await csictl("--json", "history", v0.uuid);
    assert.equal(r.code, 0, r.stderr);
    const [found] = (JSON.parse(r.stdout) as { items: { events: { seq: number; type: string; foreign?: { reason: string } }[] }[] }).items;
    const foreign = found?.events.filter((e) => e.foreign) ?? [];
    const own = new Set([
      subjects.volumeEvents(CLUSTER, v0.uuid),
      subjects.nameEvents(CLUSTER, "vol", "default", "pvc-0"),
      subjects.deviceEvents(CLUSTER, v0.uuid),
    ]);
    const expected: number[] = [];
    for (const seq of planted) if (own.has((await recordAt(seq))?.subject ?? "")) expected.push(seq);
    assert.deepEqual(
      foreign.map((e) => e.seq),
      expected,
    );
    assert.ok(foreign.every((e) => e.type === "(foreign, skipped)"));
    assert.ok(
      found?.events.some((e) => e.type === "VolumeExpanded"),
      "its events are there too",
    );
    const human = await csictl("history", v0.uuid);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /\(foreign, skipped\)\s+-\s+-\s+too-large: .* bytes/);
  });

  test("csictl verify names exactly the 100 sequences (exit 1), and the journal's metric counts each once", async () => {
    const r = await csictl("--json", "verify");
    assert.equal(r.code, 1, r.stderr);
    const out = JSON.parse(r.stdout) as { counts: Record<string, number>; findings: { type: string; seq?: number; reason?: string; preview?: string }[] };
    const seqs = out.findings.flatMap((f) => (f.type === "foreignRecord" ? [f.seq] : []));
    assert.deepEqual(
      seqs,
      [...planted].sort((a, b) => a - b),
    );
    assert.deepEqual(out.counts, { leakedImages: 0, orphanedReservations: 0, missingImages: 0, projectionDrift: 0, staleClaims: 0, foreignRecords: 100 });
    const reasons = new Set(out.findings.map((f) => f.reason));
    for (const reason of ["not-json", "unknown-type", "schema", "wrong-subject", "too-large"]) assert.ok(reasons.has(reason), reason);
    assert.ok(
      out.findings.every((f) => (f.preview?.length ?? 0) < 80),
      "never more of a body than a short preview",
    );
    assert.equal(await journalMetric("csi_journal_foreign_records_total"), 100);
    await csictl("verify"); // read again: still counted once each
    assert.equal(await journalMetric("csi_journal_foreign_records_total"), 100);
    await journal.untilLog((l) => l.includes("foreign record in the event log skipped"), "a skipped foreign record");
    assert.ok(!journal.logs.some((l) => l.includes("x".repeat(100))), "no body in the logs");
  });

  test("a restarted journal starts over the garbage (its watermark passes it) and serves; a rebuild completes", async () => {
    await journal.stop();
    journal = await j.spawnJournal();
    const meta = await new RedisStore(j.redis, keysFor(CLUSTER, "default")).projectionMeta();
    assert.equal(meta?.applied, await lastSeq(), "the watermark is at the log's end, past every foreign record");
    const v1 = vols[1] as VolumeView;
    assert.equal((await call("volume.expand", { requestId: "grow-v1-2", uuid: v1.uuid, sizeBytes: 16 * MiB })).sizeBytes, 16 * MiB);
    const rebuilt = await call("audit.rebuild", {});
    assert.ok(rebuilt.replayedTo >= (planted.at(-1) as number));
    const v0 = vols[0] as VolumeView;
    assert.equal((await call("volume.expand", { requestId: "grow-v0-3", uuid: v0.uuid, sizeBytes: 200 * MiB })).sizeBytes, 200 * MiB);
    assert.equal(await journalMetric("csi_journal_aborted_total"), 0);
    assert.equal(await journalMetric("csi_journal_foreign_records_total"), 100, "the new process met each once (start-up check, rebuild)");
  });

  test("csictl log purge-foreign: a dry run touches nothing, an event is never removed, --apply removes the 100 and the fences hold", async () => {
    const dry = await csictlRetrying("--json", "log", "purge-foreign");
    assert.equal(dry.code, 0, dry.stderr);
    const planned = JSON.parse(dry.stdout) as { records: { seq: number; outcome: string }[] };
    assert.deepEqual(
      planned.records.map((r) => [r.seq, r.outcome]),
      [...planted].sort((a, b) => a - b).map((s) => [s, "planned"]),
    );
    assert.ok(await recordAt(planted[0] as number), "still there after the dry run");

    const anEvent = (await call("volume.history", { uuid: (vols[0] as VolumeView).uuid })).events.find((e) => !e.foreign)?.seq as number;
    const refused = await csictlRetrying("--json", "log", "purge-foreign", "--seq", String(anEvent), "--apply");
    assert.equal(refused.code, 1, "a sequence asked for was skipped");
    assert.match((JSON.parse(refused.stdout) as { records: { why?: string }[] }).records[0]?.why ?? "", /events are never removed/);
    assert.ok(await recordAt(anEvent), "the event is still there");

    const applied = await csictlRetrying("--json", "log", "purge-foreign", "--apply");
    assert.equal(applied.code, 0, applied.stderr);
    const out = JSON.parse(applied.stdout) as { records: { outcome: string }[]; rebuilt: boolean };
    if (applied.tries === 1) {
      assert.equal(out.records.filter((r) => r.outcome === "done").length, 100);
      assert.equal(out.rebuilt, true);
    }
    // However many tries it took (an Unavailable one may have removed some): the journal removed
    // exactly the 100, each once, and rebuilt its projection after the last removal.
    const REMOVED = "foreign record removed from the event log";
    const logged = () =>
      journal.logs.map((l) => {
        try {
          return JSON.parse(l) as { msg?: string; seq?: number; reason?: string };
        } catch {
          return {};
        }
      });
    const rebuiltAfterPurge = () => {
      const ls = logged();
      let lastRemoval = -1;
      ls.forEach((l, i) => {
        if (l.msg === REMOVED) lastRemoval = i;
      });
      const started = ls.findIndex((l, i) => i > lastRemoval && l.msg === "projection rebuild started" && /audit\.purge/.test(l.reason ?? ""));
      return lastRemoval >= 0 && started > lastRemoval && ls.some((l, i) => i > started && l.msg === "projection rebuilt");
    };
    // Its log lines may come after its reply: waited for.
    for (const end = Date.now() + 60_000; !rebuiltAfterPurge() && Date.now() < end; ) await sleep(100);
    assert.ok(rebuiltAfterPurge(), "a rebuild started after the last removal, and completed");
    assert.deepEqual(
      logged()
        .flatMap((l) => (l.msg === REMOVED ? [l.seq as number] : []))
        .sort((a, b) => a - b),
      [...planted].sort((a, b) => a - b),
      "each planted record removed once",
    );
    for (const seq of planted) assert.equal(await recordAt(seq), undefined, `sequence ${seq} removed`);
    const clean = await csictlRetrying("--json", "verify");
    assert.equal(clean.code, 0, clean.stdout);

    // The subjects' last sequences moved back; the projection (rebuilt) follows: every fence holds.
    const [v0, v1, , v3] = vols as VolumeView[];
    assert.equal((await call("volume.expand", { requestId: "grow-v1-3", uuid: (v1 as VolumeView).uuid, sizeBytes: 32 * MiB })).sizeBytes, 32 * MiB);
    assert.equal((await call("volume.expand", { requestId: "grow-v0-4", uuid: (v0 as VolumeView).uuid, sizeBytes: 256 * MiB })).sizeBytes, 256 * MiB);
    await call("snapshot.delete", {
      requestId: "ds3",
      uuid: (await call("snapshot.list", { sourceUuid: (v3 as VolumeView).uuid })).entries[0]?.uuid as string,
    });
    assert.deepEqual(await call("volume.delete", { requestId: "del-v3", uuid: (v3 as VolumeView).uuid }), { deleted: true });
    await call("volume.create", { requestId: "after", name: "pvc-after-purge", sizeBytes: MiB, capabilities: [cap] });
    assert.equal(await journalMetric("csi_journal_aborted_total"), 0);

    // The log with its holes still backs up: the removed sequences are gaps in the file.
    const file = `${j.servers.dir}/after-purge.jsonl`;
    const exported = await csictl("--json", "log", "export", file);
    assert.equal(exported.code, 0, exported.stderr);
  });
});

describe("replies go only to inboxes", () => {
  test("a command or a discovery request whose reply subject is an event subject is dropped unanswered: nothing lands in the stream", async () => {
    const uuid = (vols[1] as VolumeView).uuid;
    const target = subjects.volumeEvents(CLUSTER, uuid);
    const before = await lastSeq();
    const refusedBefore = await journalMetric("csi_journal_requests_refused_total", { reason: "reply-subject" });
    j.nc.publish(subjects.command(CLUSTER, "volume.get"), JSON.stringify({ uuid }), { reply: target });
    j.nc.publish(`$SRV.PING.${subjects.journalServiceName(CLUSTER)}`, "", { reply: target });
    j.nc.publish("$SRV.INFO", "", { reply: target });
    j.nc.publish(subjects.command(CLUSTER, "volume.get"), JSON.stringify({ uuid })); // no reply subject at all
    // Wait for the journal to have seen all four (its metric), not for a time.
    for (let i = 0; (await journalMetric("csi_journal_requests_refused_total")) < refusedBefore + 4; i++) {
      assert.ok(i < 500, "the journal did not count the refused requests");
      await sleep(10);
    }
    assert.equal(await journalMetric("csi_journal_requests_refused_total", { reason: "reply-subject" }), refusedBefore + 3);
    assert.equal(await journalMetric("csi_journal_requests_refused_total", { reason: "no-reply" }), 1);
    // A command on an inbox is still answered (after the refused ones: same subscription, in order), and nothing was stored.
    assert.equal((await call("volume.get", { uuid })).uuid, uuid);
    assert.equal(await lastSeq(), before, "no reply landed in the event stream");
    await journal.untilLog((l) => l.includes("request dropped unanswered") && l.includes(target), "the dropped request");
  });
});
