/**
 * The journal on real nats-server and redis-server with two pools: clones and restores land in
 * their source's pool (whichever it is), and a snapshot's reply shows the same creation time as
 * every later read — also when a crashed writer's snapshot is completed by the next call.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { open, readdir } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type CommandRequest, DriverError, subjects } from "@csi/contracts";
import { JournalClient } from "@csi/runtime";
import { type ServiceProcess, spawnJournal, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const CLUSTER = "pools";
const MiB = 1024 * 1024;
let env: TestServers;
let nc: NatsConnection;
let client: JournalClient;
let clustersFile: string;
let journal: ServiceProcess;

const startJournal = (extra: Record<string, string> = {}) =>
  spawnJournal({ natsUrl: env.nats.url, redisUrl: env.redis.url, clustersFile, cluster: CLUSTER }, extra);
const poolDir = (pool: string) => path.join(env.dir, "pools", CLUSTER, pool);
const imagesIn = async (pool: string) => (await readdir(poolDir(pool))).filter((f) => f.endsWith(".img"));
const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
const create = (name: string, sizeBytes: number, more: Partial<CommandRequest<"volume.create">> = {}) =>
  client.call(CLUSTER, "volume.create", { requestId: randomUUID(), name, sizeBytes, capabilities: cap, ...more });
const snapshot = (name: string, sourceUuid: string, timeoutMs?: number) =>
  client.call(CLUSTER, "snapshot.create", { requestId: randomUUID(), name, sourceUuid }, timeoutMs ? { timeoutMs } : {});
const codeOf = async (p: Promise<unknown>) =>
  p.then(
    () => "OK",
    (e: unknown) => (e instanceof DriverError ? e.code : String(e)),
  );
const pattern = Buffer.from("bytes of the non-default pool ".repeat(64));
async function writeAt(pool: string, image: string, data: Buffer, offset: number) {
  const fh = await open(path.join(poolDir(pool), `${image}.img`), "r+");
  await fh.write(data, 0, data.length, offset);
  await fh.close();
}
async function readAt(pool: string, image: string, len: number, offset: number) {
  const fh = await open(path.join(poolDir(pool), `${image}.img`), "r");
  const b = Buffer.alloc(len);
  await fh.read(b, 0, len, offset);
  await fh.close();
  return b;
}

before(async () => {
  env = await startTestServers();
  clustersFile = await writeClustersFile(env.dir, [{ clusterID: CLUSTER, pools: ["default", "fast"] }]);
  nc = await connect({ servers: env.nats.url });
  client = new JournalClient(nc, 20_000);
  journal = await startJournal();
});

after(async () => {
  await journal?.stop();
  await nc?.close();
  await env?.dispose();
});

describe("clones and restores from a non-default pool", () => {
  test("land in their source's pool with its bytes; repeats answer the same volume; naming another pool is refused", async () => {
    const src = await create("pvc-fast-src", 8 * MiB, { pool: "fast" });
    assert.deepEqual([src.pool, src.poolId], ["fast", 2]);
    await writeAt("fast", src.imageName, pattern, 3 * MiB);
    const snap = await snapshot("snap-fast", src.uuid);
    assert.deepEqual([snap.pool, snap.poolId], ["fast", 2]);

    // The controller places a clone or restore in its source's pool (docs/controller.md); the journal takes the pool as sent.
    const fast = { pool: "fast" };
    const clone = await create("pvc-fast-clone", 8 * MiB, { ...fast, source: { kind: "volume", uuid: src.uuid } });
    const restore = await create("pvc-fast-restore", 12 * MiB, { ...fast, source: { kind: "snapshot", uuid: snap.uuid } });
    for (const v of [clone, restore]) {
      assert.deepEqual([v.pool, v.poolId], ["fast", 2], `${v.name} is in its source's pool`);
      assert.ok((await imagesIn("fast")).includes(`${v.imageName}.img`));
      assert.ok(!(await imagesIn("default")).includes(`${v.imageName}.img`));
      assert.deepEqual(await readAt("fast", v.imageName, pattern.length, 3 * MiB), pattern, `${v.name} carries the source's bytes`);
    }
    assert.equal(restore.sizeBytes, 12 * MiB);

    // Idempotent: the repeat computes the same parameter digest.
    assert.deepEqual(await create("pvc-fast-clone", 8 * MiB, { ...fast, source: { kind: "volume", uuid: src.uuid } }), clone);
    assert.deepEqual(await create("pvc-fast-restore", 12 * MiB, { ...fast, source: { kind: "snapshot", uuid: snap.uuid } }), restore);
    // Without the pool, the journal takes the default pool, and the source is in another: refused.
    assert.equal(await codeOf(create("pvc-fast-clone-unplaced", 8 * MiB, { source: { kind: "volume", uuid: src.uuid } })), "InvalidArgument");
    // Naming another pool is refused, and nothing is made.
    const before = [...(await imagesIn("default")), ...(await imagesIn("fast"))].length;
    await assert.rejects(
      create("pvc-cross", 8 * MiB, { pool: "default", source: { kind: "snapshot", uuid: snap.uuid } }),
      (e: DriverError) => e.code === "InvalidArgument" && /pool fast/.test(e.message),
    );
    assert.equal([...(await imagesIn("default")), ...(await imagesIn("fast"))].length, before);
    assert.equal(await codeOf(client.call(CLUSTER, "volume.get", { uuid: clone.uuid })), "OK");

    // The source gone, a repeat of the clone still answers the clone.
    await client.call(CLUSTER, "snapshot.delete", { requestId: "d", uuid: snap.uuid });
    assert.deepEqual(await create("pvc-fast-restore", 12 * MiB, { ...fast, source: { kind: "snapshot", uuid: snap.uuid } }), restore);
    assert.equal(await codeOf(create("pvc-fast-restore-2", 12 * MiB, { ...fast, source: { kind: "snapshot", uuid: snap.uuid } })), "NotFound");
  });

  test("a volume in the default pool still clones into the default pool", async () => {
    const src = await create("pvc-default-src", 2 * MiB);
    const clone = await create("pvc-default-clone", 2 * MiB, { source: { kind: "volume", uuid: src.uuid } });
    assert.deepEqual([src.pool, clone.pool, clone.poolId], ["default", "default", 1]);
  });
});

describe("a snapshot's creation time is the same in every reply", () => {
  const views = async (uuid: string, sourceUuid: string) => {
    const got = await client.call(CLUSTER, "snapshot.get", { uuid });
    const byId = (await client.call(CLUSTER, "snapshot.list", { snapshotUuid: uuid })).entries;
    const bySource = (await client.call(CLUSTER, "snapshot.list", { sourceUuid })).entries.filter((s) => s.uuid === uuid);
    return [got, ...byId, ...bySource];
  };

  test("create, get and list agree on a snapshot cut in one go", async () => {
    const src = await create("pvc-times", 2 * MiB);
    const s = await snapshot("snap-times", src.uuid);
    const seen = await views(s.uuid, src.uuid);
    assert.equal(seen.length, 3);
    for (const v of seen) assert.deepEqual(v, s);
  });

  test("a snapshot whose one write was stored in part (its SnapshotCreated lost) is completed by the next create, which answers what get and list show", async () => {
    const src = await create("pvc-crash-src", 4 * MiB, { pool: "fast" });
    await writeAt("fast", src.imageName, pattern, 0);
    await journal.stop();
    const crashing = await startJournal({ JOURNAL_CRASH_AFTER: "SnapshotCreated", LOCK_TTL_MS: "1000" });
    const name = "snap-completed";
    // It never answers; the client notices its silence and, with no other replica up, says so at once.
    assert.equal(await codeOf(snapshot(name, src.uuid, 10_000)), "Unavailable", "the crashing writer never answers");
    assert.equal(await crashing.exited, null, "killed by signal");

    // The writer cut the image, then sent the whole reservation in one write and died. What a
    // server that stored only part of that write leaves: the last of the three removed.
    const jsm = await jetstreamManager(nc);
    const stream = subjects.streamName(CLUSTER);
    const nameEv = (await jsm.streams.getMessage(stream, { last_by_subj: subjects.nameEvents(CLUSTER, "snap", "default", name) }))?.json() as { uuid: string };
    const lastOf = () => jsm.streams.getMessage(stream, { last_by_subj: subjects.snapshotEvents(CLUSTER, nameEv.uuid) });
    const createdMsg = await lastOf();
    assert.ok(createdMsg, "the write is in the log");
    assert.equal((createdMsg.json() as { type: string }).type, "SnapshotCreated");
    const createdSeq = createdMsg.seq;
    await jsm.streams.deleteMessage(stream, createdSeq);
    // Right before it in the one write (nats-server 2.9 has no last-by-subject once the last record is removed).
    const reserved = (await jsm.streams.getMessage(stream, { seq: createdSeq - 1 }))?.json() as { type: string; uuid: string; time: string; imageName: string };
    assert.deepEqual([reserved.type, reserved.uuid], ["SnapshotReserved", nameEv.uuid]);
    assert.ok((await imagesIn("fast")).includes(`${reserved.imageName}.img`), "the image was cut before the write");

    journal = await startJournal();
    let s: Awaited<ReturnType<typeof snapshot>> | undefined;
    for (let i = 0; i < 30 && !s; i++) {
      s = await snapshot(name, src.uuid).catch((e: DriverError) => {
        assert.equal(e.code, "Aborted", e.message); // the dead writer's locks, until their TTL
        return undefined;
      });
      if (!s) await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(s, "the retry answered");
    assert.equal(s.uuid, nameEv.uuid, "the crashed writer's snapshot, completed");
    assert.deepEqual([s.readyToUse, s.sizeBytes, s.pool], [true, 4 * MiB, "fast"]);
    assert.ok(s.createdAt > reserved.time, `created ${s.createdAt} is when it was recorded, after the reservation ${reserved.time}`);
    for (const v of await views(s.uuid, src.uuid)) assert.deepEqual(v, s);
    const history = await client.call(CLUSTER, "volume.history", { uuid: s.uuid });
    assert.deepEqual(
      history.events.map((e) => e.event.type),
      ["NameReserved", "SnapshotReserved", "SnapshotCreated"],
    );
    assert.equal(history.events[2]?.event.time, s.createdAt);
  });
});
