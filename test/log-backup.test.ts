/**
 * Backup and restore of a cluster's event log with `csictl log export` / `log import`, on real
 * nats-server, redis-server and journal processes: a cluster's history is exported while its
 * journal serves; the stream and the Redis projection are then lost (stream deleted, FLUSHALL);
 * the import puts every event back on its old sequence; a journal started over it rebuilds the
 * projection, which equals the one before key by key, and the volumes' histories are the same.
 * A restore into a stream that is not empty, and a truncated or edited file, are refused with
 * exit 1 and write nothing. The backup here is unkeyed (no --key-file): the export says it is not
 * authenticated, and the import takes it only with --insecure-no-mac (test/restore.test.ts has the
 * keyed procedure).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { subjects } from "@csi/contracts";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { csictlOf, type JournalTestEnv, journalPerFile } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";

const CLUSTER = "bk";
const STREAM = subjects.streamName(CLUSTER);
const MiB = 1024 * 1024;
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
let j: JournalTestEnv;
const journal = journalPerFile(CLUSTER, { timeoutMs: 30_000 }, (env) => {
  j = env;
});

const csictl = csictlOf(() => j, CLUSTER);

const streamState = async () =>
  (await jetstreamManager(j.nc)).streams.info(STREAM).then(
    (i) => i.state,
    () => undefined,
  );
const store = () => new RedisStore(j.redis, keysFor(CLUSTER, "default"));
const dump = async () => store().dumpProjection(await store().projectionKeys());
const histories = (uuids: string[]) => Promise.all(uuids.map((uuid) => j.client.call(CLUSTER, "volume.history", { uuid })));

test("export, lose the stream and the projection, import: the same log on the same sequences, the same projection and histories", async () => {
  const c = j.client;
  const vols = [];
  for (let i = 0; i < 6; i++)
    vols.push(await c.call(CLUSTER, "volume.create", { requestId: `c-${i}`, name: `pvc-bk-${i}`, sizeBytes: MiB, capabilities: [cap] }));
  const [a, b, gone] = vols as [(typeof vols)[0], (typeof vols)[0], (typeof vols)[0]];
  await c.call(CLUSTER, "volume.expand", { requestId: "x", uuid: a.uuid, sizeBytes: 2 * MiB });
  await c.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-bk", sourceUuid: a.uuid });
  await c.call(CLUSTER, "volume.publish", { requestId: "p", uuid: b.uuid, nodeId: "node-bk", capability: cap, readOnly: false });
  await c.call(CLUSTER, "volume.delete", { requestId: "d", uuid: gone.uuid });
  const uuids = vols.map((v) => v.uuid);
  const before = { state: await streamState(), projection: await dump(), histories: await histories(uuids) };
  assert.ok(before.state && before.state.last_seq > 20, `a log of some length: ${before.state?.last_seq}`);

  const file = path.join(j.servers.dir, `bk-${randomUUID()}.jsonl`);
  const exported = await csictl("log", "export", file);
  assert.equal(exported.code, 0, exported.stderr);
  assert.match(exported.stderr, /not authenticated: the backup is sealed with an unkeyed SHA-256/);
  assert.match(exported.stdout, /SEAL\s+SHA-256 \(unkeyed: not authenticated\)/);
  await rm(file);
  const json = await csictl("--json", "log", "export", file);
  assert.equal(json.code, 0, json.stderr);
  assert.deepEqual([JSON.parse(json.stdout).messages, JSON.parse(json.stdout).lastSeq], [before.state?.messages, before.state?.last_seq]);

  // Unkeyed: taken only with --insecure-no-mac (a usage error without, before anything is read or sent).
  const unkeyed = await csictl("log", "import", file);
  assert.equal(unkeyed.code, 2, unkeyed.stderr);
  assert.match(unkeyed.stderr, /not authenticated .* restore it only with --insecure-no-mac/);

  // A restore over the live log is refused and changes nothing.
  const over = await csictl("log", "import", file, "--insecure-no-mac");
  assert.equal(over.code, 1, over.stderr);
  assert.match(over.stderr, /is not empty .*: log import restores only into an empty stream; log restore replaces it/);
  assert.equal((await streamState())?.last_seq, before.state?.last_seq);

  // Disaster: the journal stops, the stream and the projection are lost.
  await journal.stop();
  await (await jetstreamManager(j.nc)).streams.delete(STREAM);
  await j.redis.flushall();

  // A truncated and an edited file are refused before anything is written: no stream appears.
  const text = await readFile(file, "utf8");
  const lines = text.trimEnd().split("\n");
  const truncated = `${file}.truncated`;
  await writeFile(truncated, `${lines.slice(0, -3).join("\n")}\n`);
  const t = await csictl("log", "import", truncated, "--insecure-no-mac");
  assert.equal(t.code, 1);
  assert.match(t.stderr, /without its footer \(truncated\?\); nothing was written/);
  const edited = `${file}.edited`;
  await writeFile(edited, text.replace(/pvc-bk-3/g, "pvc-bk-X"));
  const e = await csictl("log", "import", edited, "--insecure-no-mac");
  assert.equal(e.code, 1);
  assert.match(e.stderr, /SHA-256|not a journal event/);
  assert.equal(await streamState(), undefined, "nothing was written");

  const imported = await csictl("--json", "log", "import", file, "--insecure-no-mac");
  assert.equal(imported.code, 0, imported.stderr);
  const restored = await streamState();
  assert.deepEqual([restored?.messages, restored?.first_seq, restored?.last_seq], [before.state?.messages, before.state?.first_seq, before.state?.last_seq]);

  // A journal started over the restored log rebuilds the projection from it.
  await journal.start();
  await c.call(CLUSTER, "volume.get", { uuid: a.uuid });
  assert.deepEqual(await dump(), before.projection, "the projection rebuilt from the restored log equals the one before, key by key");
  assert.deepEqual(await histories(uuids), before.histories, "every volume's history (events, sequences, times, request ids) is the same");

  // And the restored cluster goes on: the next event follows the old last sequence.
  await c.call(CLUSTER, "volume.delete", { requestId: "d2", uuid: vols[4]?.uuid as string });
  assert.ok(((await streamState())?.last_seq ?? 0) > (before.state?.last_seq ?? 0));
});
