/**
 * The restore procedure of docs/operations.md ("Backup and restore"), every step on real servers:
 * nats-server (max_payload 64 KiB), redis-server, two journal processes, csictl as a child
 * process. The Redis projection is left as it is, as an operator would: the journals notice that
 * the log is another stream and rebuild once.
 *   1. the documented restore: export (to stdout and to a file, sealed with a key), a second
 *      export onto the file refused, a restore refused while journals answer, journals stopped,
 *      `log restore -` from stdin, journals started: they rebuild once, serve every volume, and
 *      verify is clean after gc;
 *   2. an edited (keyed, and re-sealed unkeyed), truncated or oversized backup is refused with
 *      nothing written: the stream's messages, last sequence and identity unchanged;
 *   3. a restore stopped at each of its steps (a crash), and the re-run that completes it; a
 *      journal started over an interrupted restore waits for it;
 *   4. the input file changed after it was checked cannot slip in: the restore writes what it checked;
 *   5. `log restore` without --apply is a dry run: the backup checked, nothing written, and what the
 *      restored log would find apart from the pools listed (a volume deleted, one expanded, one
 *      created since the backup); verify reports the same after the restore.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile, stat, truncate, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { DriverError, subjects } from "@csi/contracts";
import { type BackupKey, BackupWriter, exportLogToFile, importLog, readBackupKey, restoreUnderWay } from "@csi/journal/backup";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { type JournalTestEnv, journalTestEnv, runCsictl, type ServiceProcess, spawnService } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

type BackupMessage = { seq: number; subject: string; data: string };

const CLUSTER = "rs";
const STREAM = subjects.streamName(CLUSTER);
const STAGING = subjects.restoreStreamName(CLUSTER);
const MiB = 1024 * 1024;
/** The test server's max_payload: a record larger than this (less the restore's headers) cannot be restored. */
const MAX_PAYLOAD = 65536;
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
/** A journal's start (a rebuild included) on a busy machine; a csictl run. */
const READY_MS = 180_000;
const CSICTL_MS = 300_000;

let j: JournalTestEnv;
let keyFile: string;
before(async () => {
  j = await journalTestEnv(CLUSTER, { timeoutMs: 60_000, natsConfig: `max_payload: ${MAX_PAYLOAD}` });
  keyFile = path.join(j.servers.dir, "backup.key");
  await writeFile(keyFile, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600 });
});
after(async () => {
  await j?.dispose();
});

const file = (name: string) => path.join(j.servers.dir, name);
const csictl = (args: string[], input?: Buffer) =>
  runCsictl(
    ["--cluster", CLUSTER, "--timeout", "120000", ...args],
    { NATS_URL: j.servers.nats.url, REDIS_URL: j.servers.redis.url, CLUSTERS_FILE: j.clustersFile, RUN_DIR: j.servers.dir },
    { timeoutMs: CSICTL_MS, ...(input ? { input } : {}) },
  );

/** A journal process of the cluster; ready within READY_MS or the test fails with its last log lines. */
const startJournal = (wait = true) => spawnService("journal", j.journalEnv(), { readyTimeoutMs: READY_MS, waitReady: wait });

async function stopAll(ps: ServiceProcess[]) {
  await Promise.all(ps.map((p) => p.stop()));
}

/** The stream's messages, last sequence and identity (its creation time), or undefined when it does not exist. */
async function streamState(name = STREAM) {
  const info = await (await jetstreamManager(j.nc)).streams.info(name).catch(() => undefined);
  return info && { messages: info.state.messages, lastSeq: info.state.last_seq, created: info.created };
}

/** Volumes and snapshots of some history: created, expanded, snapshotted (alone and in a group), published and unpublished, one deleted. */
async function populate(prefix: string) {
  const c = j.client;
  const vols = [];
  for (let i = 0; i < 5; i++)
    vols.push(await c.call(CLUSTER, "volume.create", { requestId: `${prefix}-c-${i}`, name: `${prefix}-${i}`, sizeBytes: MiB, capabilities: [cap] }));
  const [a, b, g, , gone] = vols as [(typeof vols)[0], (typeof vols)[0], (typeof vols)[0], (typeof vols)[0], (typeof vols)[0]];
  await c.call(CLUSTER, "volume.expand", { requestId: `${prefix}-x`, uuid: a.uuid, sizeBytes: 2 * MiB });
  const snap = await c.call(CLUSTER, "snapshot.create", { requestId: `${prefix}-s`, name: `${prefix}-snap`, sourceUuid: a.uuid });
  const group = await c.call(CLUSTER, "groupsnapshot.create", { requestId: `${prefix}-g`, name: `${prefix}-grp`, sourceUuids: [b.uuid, g.uuid] });
  await c.call(CLUSTER, "volume.publish", { requestId: `${prefix}-p`, uuid: b.uuid, nodeId: "node-rs", capability: cap, readOnly: false });
  await c.call(CLUSTER, "volume.unpublish", { requestId: `${prefix}-u`, uuid: b.uuid, nodeId: "node-rs" });
  await c.call(CLUSTER, "volume.delete", { requestId: `${prefix}-d`, uuid: gone.uuid });
  return { live: vols.filter((v) => v !== gone), gone, snap, group };
}

/** How many rebuilds the journals started, with the reason each logged. */
const rebuildsOf = (ps: ServiceProcess[]) =>
  ps.flatMap((p) =>
    p.logs.flatMap((l) => {
      const line = l.startsWith("{") ? (JSON.parse(l) as { msg?: string; reason?: string }) : {};
      return line.msg === "projection rebuild started" ? [line.reason] : [];
    }),
  );

test("the documented restore, every step by csictl: export (stdout, file, never over a file), restore refused while journals answer, journals stopped, restore from stdin, journals rebuild once and serve every volume; what the backup does not know is reported and never removed by gc", async () => {
  let journals = await Promise.all([startJournal(), startJournal()]);
  try {
    const { live, gone, snap, group } = await populate("doc");
    const before = await streamState();
    assert.ok(before && before.lastSeq > 20, `a log of some length: ${JSON.stringify(before)}`);
    const served = () => Promise.all(live.map((v) => j.client.call(CLUSTER, "volume.get", { uuid: v.uuid })));
    const views = await served();

    // Back up, to stdout (a pipe to gzip or ssh) and to a file; a second export onto the file is refused.
    const piped = await csictl(["log", "export", "-", "--key-file", keyFile]);
    assert.equal(piped.code, 0, piped.stderr);
    assert.match(piped.stderr, new RegExp(`LAST SEQUENCE\\s+${before.lastSeq}\\b`), "the result goes to stderr: stdout carries the backup");
    assert.match(piped.stderr, /SEAL\s+HMAC-SHA-256, key id [0-9a-f]{16}/);
    const backup = file("doc.jsonl");
    const exported = await csictl(["--json", "log", "export", backup, "--key-file", keyFile]);
    assert.equal(exported.code, 0, exported.stderr);
    assert.deepEqual(JSON.parse(piped.stdout.split("\n")[0] as string).lastSeq, before.lastSeq);
    assert.deepEqual(piped.stdout.split("\n").slice(1, -2), (await readFile(backup, "utf8")).split("\n").slice(1, -2), "the same records either way");
    const kept = { bytes: await readFile(backup), mtime: (await stat(backup)).mtimeMs };
    const again = await csictl(["log", "export", backup, "--key-file", keyFile]);
    assert.equal(again.code, 2, again.stderr);
    assert.match(again.stderr, /exists: a backup never replaces a file/);
    assert.deepEqual([await readFile(backup), (await stat(backup)).mtimeMs], [kept.bytes, kept.mtime], "the first backup untouched");

    // Life goes on after the backup: a volume the restored log will not know (its image leaks).
    const later = await j.client.call(CLUSTER, "volume.create", { requestId: "doc-later", name: "doc-later", sizeBytes: MiB, capabilities: [cap] });
    const grown = await streamState();

    // A restore while journals serve is refused after the check, and touches nothing (and csictl exits: no progress left running).
    const refused = await csictl(["log", "restore", backup, "--key-file", keyFile, "--apply"]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /2 journal replica\(s\) of cluster rs answer .*: stop them first .* the log was not touched/);
    assert.deepEqual(await streamState(), grown);
    assert.equal(await streamState(STAGING), undefined, "no staging stream left");

    // The documented steps: journals stopped, `log restore` (from stdin), journals started; Redis as it was.
    await stopAll(journals);
    const restored = await csictl(["--json", "log", "restore", "-", "--key-file", keyFile, "--apply"], Buffer.from(piped.stdout));
    assert.equal(restored.code, 0, restored.stderr);
    const r = JSON.parse(restored.stdout);
    assert.deepEqual(
      [r.file, r.messages, r.lastSeq, r.replaced],
      ["stdin", before.messages, before.lastSeq, { messages: grown?.messages, lastSeq: grown?.lastSeq }],
    );
    const after = await streamState();
    assert.deepEqual([after?.messages, after?.lastSeq], [before.messages, before.lastSeq], "every record on its old sequence");
    assert.notEqual(after?.created, before.created, "another stream");
    assert.equal(await streamState(STAGING), undefined);

    journals = await Promise.all([startJournal(), startJournal()]);
    assert.deepEqual(rebuildsOf(journals), ["built from another log"], "one rebuild, and why");
    assert.deepEqual(await served(), views, "every volume served as it was at the backup");
    assert.equal((await j.client.call(CLUSTER, "snapshot.get", { uuid: snap.uuid })).uuid, snap.uuid);
    assert.equal((await j.client.call(CLUSTER, "groupsnapshot.get", { uuid: group.uuid })).uuid, group.uuid);
    for (const uuid of [gone.uuid, later.uuid])
      await assert.rejects(j.client.call(CLUSTER, "volume.get", { uuid }), (e: unknown) => e instanceof DriverError && e.code === "NotFound");

    // verify: the image of the volume made after the backup has no reservation — a volume a CO may
    // hold: gc never removes it (made before the restore), even past the grace; it is reported.
    const found = await csictl(["--json", "verify"]);
    assert.equal(found.code, 1, found.stdout);
    assert.deepEqual(
      JSON.parse(found.stdout).findings.map((f: { type: string; imageName?: string }) => [f.type, f.imageName]),
      [["leakedImage", later.imageName]],
    );
    const gc = await csictl(["--json", "gc", "--apply", "--older-than", "0"]);
    assert.equal(gc.code, 0, gc.stderr);
    const gcActions = JSON.parse(gc.stdout).actions as { imageName: string; outcome: string; reason?: string }[];
    assert.deepEqual(
      gcActions.map((a) => [a.imageName, a.outcome]),
      [[later.imageName, "skipped"]],
    );
    assert.match(gcActions[0]?.reason ?? "", /made before .* restored/);
    assert.equal((await csictl(["--json", "verify"])).code, 1, "still reported, never removed");

    // The operator says it is live: adopted under its name, it is a volume again with its CSI id; verify is clean.
    const refusals = [
      [["volume", "adopt", later.imageName, "--name", live[0]?.name ?? ""], /ALREADY_EXISTS: the name .* is volume/],
      [["volume", "adopt", live[1]?.imageName ?? "", "--name", "doc-other"], /FAILED_PRECONDITION: the log names volume/],
      [["volume", "adopt", gone.imageName, "--name", "doc-other"], /FAILED_PRECONDITION: the log names volume/],
      [["volume", "adopt", "not-ours", "--name", "doc-other"], /INVALID_ARGUMENT: .* not named after a volume of this driver/],
      [["volume", "adopt", `csi-vol-${"0".repeat(8)}-0000-4000-8000-${"0".repeat(12)}`, "--name", "doc-other"], /NOT_FOUND: pool .* has no image/],
    ] as const;
    for (const [args, why] of refusals) {
      const r = await csictl([...args]);
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, why);
    }
    const adopted = await csictl(["--json", "volume", "adopt", later.imageName, "--name", "doc-later"]);
    assert.equal(adopted.code, 0, adopted.stderr);
    const view = JSON.parse(adopted.stdout) as { uuid: string; sizeBytes: number; id: string };
    assert.deepEqual([view.uuid, view.sizeBytes], [later.uuid, later.sizeBytes], "the same uuid, the image's size");
    const repeat = await csictl(["--json", "volume", "adopt", later.imageName, "--name", "doc-later"]);
    assert.equal((JSON.parse(repeat.stdout) as { id: string }).id, view.id, "idempotent");
    assert.equal((await j.client.call(CLUSTER, "volume.get", { uuid: later.uuid })).condition?.abnormal, false, "served, its image present");
    const history = await j.client.call(CLUSTER, "volume.history", { uuid: later.uuid });
    assert.ok(
      history.events.some((e) => e.event.type === "VolumeReserved" && "adopted" in e.event && e.event.adopted === true),
      "the history says it was adopted",
    );
    assert.equal((await csictl(["--json", "verify"])).code, 0, "clean: the image has its record");
  } finally {
    await stopAll(journals);
  }
});

test("a restore's dry run: the backup checked, nothing written, and every difference from the pools listed; verify reports the same after the restore", async () => {
  let journals = [await startJournal()];
  try {
    const c = j.client;
    const mk = (n: string) => c.call(CLUSTER, "volume.create", { requestId: `dry-${n}`, name: `dry-${n}`, sizeBytes: MiB, capabilities: [cap] });
    const [grown, deleted] = [await mk("grown"), await mk("deleted")];
    const backup = file("dry.jsonl");
    assert.equal((await csictl(["log", "export", backup, "--key-file", keyFile])).code, 0);
    // Since the backup: one volume expanded, one deleted, one created.
    await c.call(CLUSTER, "volume.expand", { requestId: "dry-x", uuid: grown.uuid, sizeBytes: 2 * MiB });
    await c.call(CLUSTER, "volume.delete", { requestId: "dry-d", uuid: deleted.uuid });
    const made = await mk("made");
    const expected = [
      ["leakedImage", made.imageName],
      ["missingImage", deleted.imageName],
      ["imageSizeDiffers", grown.imageName],
    ].sort();
    const kinds = (fs: { type: string; imageName?: string }[]) => fs.map((f) => [f.type, f.imageName]).sort();
    const state = await streamState();

    const dry = await csictl(["--json", "log", "restore", backup, "--key-file", keyFile]);
    assert.equal(dry.code, 0, dry.stderr);
    const plan = JSON.parse(dry.stdout) as { dryRun: boolean; compared: boolean; differences: { type: string; imageName?: string }[] };
    assert.deepEqual([plan.dryRun, plan.compared], [true, true]);
    assert.deepEqual(kinds(plan.differences), expected);
    assert.deepEqual(await streamState(), state, "nothing written");
    const human = await csictl(["log", "restore", backup, "--key-file", keyFile]);
    assert.match(human.stdout, /DRY RUN\s+nothing written; export the log first/);
    const edited = `${(await readFile(backup, "utf8")).replace("dry-grown", "dry-grawn")}`;
    await writeFile(file("dry-edited.jsonl"), edited);
    const refused = await csictl(["log", "restore", file("dry-edited.jsonl"), "--key-file", keyFile]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /nothing was written/, "a dry run checks the whole backup as a restore does");

    await stopAll(journals);
    const blind = JSON.parse((await csictl(["--json", "log", "restore", backup, "--key-file", keyFile])).stdout) as { compared: boolean };
    assert.equal(blind.compared, false, "no journal answers: the backup checked, the pools not compared");
    assert.equal((await csictl(["log", "restore", backup, "--key-file", keyFile, "--apply"])).code, 0);
    journals = [await startJournal()];
    const verify = await csictl(["--json", "verify"]);
    assert.equal(verify.code, 1);
    assert.deepEqual(kinds(JSON.parse(verify.stdout).findings), expected, "verify after the restore finds what the dry run listed");
  } finally {
    await stopAll(journals);
  }
});

/** The lines of a backup file, and the same records written again by a BackupWriter (sealed with `key`, or unkeyed) after `edit`. */
async function rewrite(from: string, key: BackupKey | undefined, edit: (m: BackupMessage) => BackupMessage, extra: BackupMessage[] = []): Promise<string> {
  const lines = (await readFile(from, "utf8")).trimEnd().split("\n");
  const header = JSON.parse(lines[0] as string);
  const w = new BackupWriter(key);
  const out = [w.header({ ...header, lastSeq: header.lastSeq + extra.length })];
  for (const l of lines.slice(1, -1)) {
    const m = JSON.parse(l);
    out.push("removedThrough" in m ? w.gap(m) : w.message(edit(m)));
  }
  for (const m of extra) out.push(w.message(m));
  out.push(w.footer());
  return out.join("");
}

test("an edited (keyed, or re-sealed unkeyed), truncated or oversized backup is refused with nothing written: the stream's messages, last sequence and identity unchanged", async () => {
  const key = await readBackupKey(keyFile);
  const backup = file("refusals.jsonl");
  const exported = await csictl(["log", "export", backup, "--key-file", keyFile]);
  assert.equal(exported.code, 0, exported.stderr);
  const before = await streamState();
  assert.ok(before && before.messages > 0);
  // Volume doc-1's reservation made to name doc-0's image: DeleteVolume(doc-1) would delete doc-0's data.
  const text = await readFile(backup, "utf8");
  const imageOf = (name: string) =>
    new RegExp(`"name\\\\":\\\\"${name}\\\\"[^\\n]*?\\\\"imageName\\\\":\\\\"(csi-vol-[0-9a-f-]{36})`).exec(text)?.[1] as string;
  const [a, b] = [imageOf("doc-0"), imageOf("doc-1")];
  assert.ok(a && b && a !== b, "both reservations found");
  const stolen = (m: BackupMessage) => ({ ...m, data: m.data.replaceAll(b, a) });

  const cases: { name: string; text: string; flags: string[]; code: number; why: RegExp }[] = [
    {
      name: "edited.jsonl",
      text: text.replaceAll("doc-c-2", "doc-c-Z"), // a request id: a change no rule of the log sees, only the HMAC
      flags: ["--key-file", keyFile],
      code: 1,
      why: /does not match its HMAC: it was changed after the export; nothing was written/,
    },
    {
      name: "resealed.jsonl",
      text: await rewrite(backup, undefined, stolen),
      flags: ["--key-file", keyFile],
      code: 2,
      why: /not authenticated .* restore it only with --insecure-no-mac/,
    },
    {
      name: "resealed.jsonl",
      text: await rewrite(backup, undefined, stolen),
      flags: ["--insecure-no-mac"],
      code: 1,
      why: new RegExp(
        `sequence \\d+: volume [0-9a-f-]{36} names image "default/${a}", which volume [0-9a-f-]{36} holds while it lives; no journal writes such a log; nothing was written`,
      ),
    },
    {
      name: "truncated.jsonl",
      text: `${text.trimEnd().split("\n").slice(0, -3).join("\n")}\n`,
      flags: ["--key-file", keyFile],
      code: 1,
      why: /without its footer \(truncated\?\); nothing was written/,
    },
    {
      name: "oversized.jsonl",
      text: await rewrite(backup, key, (m) => m, [{ seq: before.lastSeq + 1, subject: `csi.${CLUSTER}.evt.pool.default`, data: "x".repeat(MAX_PAYLOAD + 10) }]),
      flags: ["--key-file", keyFile],
      code: 1,
      why: new RegExp(`sequence ${before.lastSeq + 1} holds ${MAX_PAYLOAD + 10} bytes, more than this server's max_payload \\(${MAX_PAYLOAD}\\)`),
    },
  ];
  // A key that cannot be had is a usage error, before anything is read or sent.
  await writeFile(file("short.key"), "too short\n");
  for (const [k, why] of [
    [file("no.key"), /cannot read key file .*no\.key: ENOENT/],
    [file("short.key"), /short\.key: a backup key has at least 32 bytes/],
  ] as const) {
    const r = await csictl(["log", "restore", backup, "--key-file", k, "--apply"]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, why);
  }
  for (const c of cases) {
    await writeFile(file(c.name), c.text);
    const r = await csictl(["log", "restore", file(c.name), ...c.flags, "--apply"]);
    assert.equal(r.code, c.code, `${c.name} ${c.flags.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, c.why, c.name);
    assert.deepEqual(await streamState(), before, `${c.name}: the log untouched`);
    assert.equal(await streamState(STAGING), undefined, `${c.name}: nothing staged`);
  }
});

/**
 * `importLog` in this process (replacing the log), stopped for good at `step` — a crash there: it
 * never goes on, its connection is closed. Resolves once it got there.
 */
async function crashAt(step: "checked" | "staged" | "deleted" | "written", backup: string, key: BackupKey): Promise<void> {
  const nc = await connect({ servers: j.servers.nats.url });
  let reached = () => {};
  const there = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const run = importLog(nc, CLUSTER, backup, {
    key,
    replace: true,
    onStep: async (s) => {
      if (s !== step) return;
      reached();
      await new Promise(() => {});
    },
  });
  await Promise.race([there, run.then(() => assert.fail(`the restore ended without reaching ${step}`))]);
  await nc.close();
}

/** `importLog` in this process, to its end. */
async function restoreInProcess(backup: string, key: BackupKey, onStep?: (s: string) => Promise<void>) {
  const nc = await connect({ servers: j.servers.nats.url });
  try {
    return await importLog(nc, CLUSTER, backup, { key, replace: true, ...(onStep ? { onStep } : {}) });
  } finally {
    await nc.close();
  }
}

test("a restore once seen under way lasts until the log exists again: a re-run makes its staging stream anew while the log is gone", async () => {
  const cluster = "rsgap";
  const jsm = await jetstreamManager(j.nc);
  assert.equal(await restoreUnderWay(jsm, cluster), false, "no staging stream, no restore seen: none (a first start makes the log)");
  assert.equal(await restoreUnderWay(jsm, cluster, true), true, "one seen, the log gone: the re-run is between its staging streams");
  await new EventLog(j.nc, { cluster }).ensureStream();
  try {
    assert.equal(await restoreUnderWay(jsm, cluster, true), false, "the log written, no staging stream: ended");
  } finally {
    await jsm.streams.delete(subjects.streamName(cluster));
  }
});

test("a restore stopped at each of its steps leaves the log as it was, or staged; a journal started meanwhile waits; the same restore run again completes it", async () => {
  const tmp = process.env.TMPDIR;
  process.env.TMPDIR = j.servers.dir; // the private copies of the restores stopped here stay under the test's directory
  const key = await readBackupKey(keyFile);
  const backup = file("crash.jsonl");
  assert.equal((await csictl(["log", "export", backup, "--key-file", keyFile])).code, 0);
  const header = JSON.parse((await readFile(backup, "utf8")).split("\n")[0] as string) as { lastSeq: number };
  const restored = async () => {
    const s = await streamState();
    return s && [s.messages, s.lastSeq];
  };
  try {
    const before = await streamState();
    await crashAt("checked", backup, key);
    assert.deepEqual([await streamState(), await streamState(STAGING)], [before, undefined], "checked: nothing written");

    await crashAt("staged", backup, key);
    assert.deepEqual(await streamState(), before, "staged: the log as it was");
    assert.equal((await streamState(STAGING))?.lastSeq, header.lastSeq, "the whole backup staged");

    await crashAt("deleted", backup, key);
    assert.equal(await streamState(), undefined, "deleted: no log");
    assert.ok(await streamState(STAGING), "the staging stream stays: journals wait for it");
    const journal = await startJournal(false);
    try {
      await journal.untilLog((l) => l.includes("a restore of the event log is under way, or was interrupted"), "waiting for the restore");
      assert.equal(await streamState(), undefined, "the waiting journal made no log of its own");
      const again = await csictl(["log", "restore", backup, "--key-file", keyFile, "--apply"]);
      assert.equal(again.code, 0, again.stderr);
      await journal.ready;
      await journal.untilLog((l) => l.includes("the restore of the event log has ended"), "the end of the wait");
      const listed = await j.client.call(CLUSTER, "volume.list", {});
      assert.ok(
        listed.entries.some((v) => v.name === "doc-0"),
        "the restored volumes served",
      );
    } finally {
      await journal.stop();
    }
    assert.deepEqual(await restored(), [before?.messages, header.lastSeq], "restored whole by the run again");
    assert.equal(await streamState(STAGING), undefined);

    await crashAt("written", backup, key);
    assert.deepEqual(await restored(), [before?.messages, header.lastSeq], "written: the log whole");
    assert.ok(await streamState(STAGING), "but not yet told done: the staging stream stays");
    await restoreInProcess(backup, key);
    assert.deepEqual([await restored(), await streamState(STAGING)], [[before?.messages, header.lastSeq], undefined]);
  } finally {
    if (tmp === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = tmp;
  }
});

test("the input changed after it was checked cannot slip in: the restore writes the private copy it checked", async () => {
  const key = await readBackupKey(keyFile);
  const backup = file("changing.jsonl");
  assert.equal((await csictl(["log", "export", backup, "--key-file", keyFile])).code, 0);
  const whole = await stat(backup);
  const header = JSON.parse((await readFile(backup, "utf8")).split("\n")[0] as string) as { lastSeq: number };
  const before = await streamState();
  const r = await restoreInProcess(backup, key, async (step) => {
    if (step === "checked") await truncate(backup, Math.floor(whole.size / 2)); // shortened while the log is written
  });
  assert.equal((await stat(backup)).size, Math.floor(whole.size / 2));
  assert.deepEqual([r.messages, r.lastSeq], [before?.messages, header.lastSeq]);
  const after = await streamState();
  assert.deepEqual([after?.messages, after?.lastSeq], [before?.messages, header.lastSeq], "the whole backup, as checked");
  assert.notEqual(after?.created, before?.created);
});

test("two exports racing onto one name: one backup is made, the other is refused, and the file is whole", async () => {
  // A log of its own (cluster "race": an export reads any cluster's stream), so this test stands alone.
  const nc = await connect({ servers: j.servers.nats.url });
  try {
    const log = new EventLog(nc, { cluster: "race" });
    await log.ensureStream();
    for (let i = 0; i < 50; i++) await nc.request(subjects.poolEvents("race", "default"), `{"n":${i}}`);
    const target = file("race.jsonl");
    const key = await readBackupKey(keyFile);
    const [x, y] = await Promise.allSettled([exportLogToFile(nc, "race", target, { key }), exportLogToFile(nc, "race", target, { key })]);
    const outcomes = [x, y].map((r) => (r.status === "fulfilled" ? "made" : (r.reason as Error).message));
    assert.deepEqual(
      outcomes.filter((o) => o === "made"),
      ["made"],
      JSON.stringify(outcomes),
    );
    assert.match(outcomes.find((o) => o !== "made") as string, /race.jsonl exists: a backup never replaces a file/);
    const lines = (await readFile(target, "utf8")).trimEnd().split("\n");
    assert.equal(lines.length, 52, "header, 50 records, footer");
    assert.match(lines.at(-1) as string, /^\{"end":true,"messages":50,"hmac":/);
  } finally {
    await nc.close();
  }
});
