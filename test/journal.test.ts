/**
 * The journal against real nats-server and redis-server, as separate processes: idempotency,
 * concurrency over two replicas, crash recovery, stale reservations, Redis loss, lock expiry,
 * snapshots/clones with real bytes.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { open, readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type CommandRequest, DriverError, subjects } from "@csi/contracts";
import { keysFor } from "@csi/journal";
import { JournalClient } from "@csi/runtime";
import { CSICTL_BIN, ROOT, SharedProcess, spawnService, startTestServers, type TestServers, withOwnProcesses, writeClustersFile } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { Svcm } from "@nats-io/services";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";

const CLUSTER = "c1";
const MiB = 1024 * 1024;
let env: TestServers;
let nc: NatsConnection;
let redis: Redis;
let client: JournalClient;
let clustersFile: string;

function journalEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, CLUSTER_ID: CLUSTER, CATCHUP_EVERY_MS: "0", ...extra };
}
const startJournalProcess = (extra: Record<string, string> = {}) => spawnService("journal", journalEnv(extra));
/** The healthy journal every test can count on. A test that needs it gone takes it down with `journal.whileDown`. */
const journal = new SharedProcess(startJournalProcess);
const poolDir = () => path.join(env.dir, "pools", CLUSTER, "default");
const images = async () => (await readdir(poolDir())).filter((f) => f.endsWith(".img")).sort();
const cap = [{ accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const }];
const create = (name: string, sizeBytes: number, more: Partial<CommandRequest<"volume.create">> = {}) =>
  client.call(CLUSTER, "volume.create", { requestId: randomUUID(), name, sizeBytes, capabilities: cap, ...more });
const codeOf = async (p: Promise<unknown>) =>
  p.then(
    () => "OK",
    (e: unknown) => (e instanceof DriverError ? e.code : String(e)),
  );
/** Repeats `f` while the journal is unreachable (servers restarting), up to ~100 tries. */
const retry = async <T>(f: () => Promise<T>): Promise<T> => {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (i > 100 || !(e instanceof DriverError) || !["Unavailable", "DeadlineExceeded", "Aborted"].includes(e.code)) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
};

before(async () => {
  env = await startTestServers();
  clustersFile = await writeClustersFile(env.dir, [{ clusterID: CLUSTER, pools: ["default"] }]);
  nc = await connect({ servers: env.nats.url });
  redis = new Redis(env.redis.url);
  redis.on("error", () => {}); // the restart test kills it on purpose
  client = new JournalClient(nc, 20_000);
  await journal.start();
});

after(async () => {
  await journal.stop();
  await nc?.close();
  redis?.disconnect();
  await env?.dispose();
});

describe("volumes", () => {
  test("create is idempotent by name; an incompatible repeat is AlreadyExists", async () => {
    // Sizes come decided by the controller (whole MiB): the journal refuses to round.
    assert.equal(await codeOf(create("pvc-idem", 5 * MiB + 1)), "InvalidArgument");
    const a = await create("pvc-idem", 6 * MiB);
    assert.equal(a.sizeBytes, 6 * MiB);
    const b = await create("pvc-idem", 6 * MiB);
    assert.deepEqual(b, a);
    assert.equal(await codeOf(create("pvc-idem", 20 * MiB)), "AlreadyExists");
    assert.equal(await codeOf(create("pvc-idem", 6 * MiB, { parameters: { fs: "xfs" } })), "AlreadyExists");
    const snap = await client.call(CLUSTER, "snapshot.create", { requestId: "r", name: "snap-for-idem", sourceUuid: a.uuid });
    assert.equal(await codeOf(create("pvc-idem", 6 * MiB, { source: { kind: "snapshot", uuid: snap.uuid } })), "AlreadyExists");
    assert.ok((await images()).includes(`${a.imageName}.img`));
  });

  test("delete twice succeeds; expand to a smaller size answers the current size", async () => {
    const v = await create("pvc-del", 8 * MiB);
    const grown = await client.call(CLUSTER, "volume.expand", { requestId: "e1", uuid: v.uuid, sizeBytes: 12 * MiB });
    assert.equal(grown.sizeBytes, 12 * MiB);
    const same = await client.call(CLUSTER, "volume.expand", { requestId: "e2", uuid: v.uuid, sizeBytes: 4 * MiB });
    assert.equal(same.sizeBytes, 12 * MiB);
    assert.deepEqual(await client.call(CLUSTER, "volume.delete", { requestId: "d1", uuid: v.uuid }), { deleted: true });
    assert.deepEqual(await client.call(CLUSTER, "volume.delete", { requestId: "d2", uuid: v.uuid }), { deleted: false });
    assert.ok(!(await images()).includes(`${v.imageName}.img`));
    assert.equal(await codeOf(client.call(CLUSTER, "volume.get", { uuid: v.uuid })), "NotFound");
    // The name is free again: a new create makes a new volume.
    const again = await create("pvc-del", 8 * MiB);
    assert.notEqual(again.uuid, v.uuid);
  });

  test("bad requests are InvalidArgument with a readable reason", async () => {
    await assert.rejects(create("", 1), (e: DriverError) => e.code === "InvalidArgument" && /name/.test(e.message));
    await assert.rejects(create("x".repeat(129), MiB), (e: DriverError) => e.code === "InvalidArgument" && /128 bytes/.test(e.message));
    await assert.rejects(create("ok", MiB, { pool: "nope" }), (e: DriverError) => e.code === "InvalidArgument" && /unknown pool/.test(e.message));
    // A raw malformed message straight on the subject.
    const raw = await nc.request(`csi.${CLUSTER}.journal.volume.create`, "{not json", { timeout: 5000 });
    assert.deepEqual(raw.json(), { ok: false, error: { code: "InvalidArgument", message: "request is not JSON" } });
  });

  test("200 concurrent creates of one name over 2 replicas → one volume, one image, one reservation", async () => {
    await withOwnProcesses(startJournalProcess, async (own) => {
      await own(); // the second replica, next to the shared one
      const name = "pvc-storm";
      const imagesBefore = (await images()).length;
      const results = await Promise.allSettled(Array.from({ length: 200 }, () => create(name, 10 * MiB)));
      const ok = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
      const errs = results.flatMap((r) => (r.status === "rejected" ? [r.reason as DriverError] : []));
      assert.ok(ok.length > 0, "some create succeeded");
      assert.equal(new Set(ok.map((v) => v.uuid)).size, 1, "every success names the same volume");
      for (const e of errs) assert.equal(e.code, "Aborted", `unexpected error ${e.code}: ${e.message}`);
      const uuid = ok[0]?.uuid as string;
      assert.deepEqual(
        (await images()).filter((f) => f.includes(uuid)),
        [`csi-vol-${uuid}.img`],
      );
      assert.equal((await images()).length, imagesBefore + 1, "exactly one image was made");
      const keys = keysFor(CLUSTER, "default");
      assert.equal(await redis.hget(keys.dir("volume"), keys.dirField("volume", name)), uuid);
      const reservations = (await client.call(CLUSTER, "volume.list", {})).entries.filter((v) => v.name === name);
      assert.equal(reservations.length, 1);
      // Both replicas took part: the queue group spread the requests (their service stats say so).
      const perReplica: number[] = [];
      for await (const st of await new Svcm(nc as unknown as ConstructorParameters<typeof Svcm>[0]).client().stats(`csi-journal-${CLUSTER}`)) {
        perReplica.push(st.endpoints?.find((e) => e.name === "volume-create")?.num_requests ?? 0);
      }
      assert.equal(perReplica.length, 2, "two replicas answer");
      assert.ok(
        perReplica.every((n) => n > 0),
        `requests per replica: ${perReplica}`,
      );
    });
  });
});

describe("crashes and lost state", () => {
  /** A create of `name` on a replica that SIGKILLs itself at `point`; the images the dead writer left made (pool files new since). */
  async function createAndDie(point: string, name: string): Promise<string[]> {
    const before = await images();
    // The healthy replica is down, so the crashing one takes the request.
    await journal.whileDown(async (own) => {
      const crashing = await own({ JOURNAL_CRASH_AFTER: point, LOCK_TTL_MS: "1000" });
      const dying = client.call(CLUSTER, "volume.create", { requestId: `crash-${point}`, name, sizeBytes: 4 * MiB, capabilities: cap }, { timeoutMs: 10_000 });
      // It never answers; the client notices its silence and, with no other replica up, says so at once.
      assert.equal(await codeOf(dying), "Unavailable", "the crashing replica never answers");
      assert.equal(await crashing.exited, null, "killed by signal");
    });
    return (await images()).filter((f) => !before.includes(f));
  }

  /** The CO's retry of `name` (the dead holder's lock expires by its TTL, 1 s: Aborted until then). */
  async function retryCreate(name: string) {
    for (let i = 0; ; i++) {
      const v = await create(name, 4 * MiB).catch((e: DriverError) => {
        assert.equal(e.code, "Aborted");
        if (i > 20) throw e;
        return undefined;
      });
      if (v) return v;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Images of the pool no listed volume owns. */
  const orphans = async () => {
    const live = (await client.call(CLUSTER, "volume.list", {})).entries.map((x) => `${x.imageName}.img`);
    return (await images()).filter((f) => f.startsWith("csi-vol-") && !live.includes(f));
  };

  test("SIGKILL between the image and the reservation's one write: no event of the name; verify finds the image, gc removes it; the retry makes one volume", async () => {
    const name = "pvc-crash-image";
    const [left, ...more] = await createAndDie("image:create", name);
    assert.ok(left && more.length === 0, "the dead writer made one image");
    const jsm = await jetstreamManager(nc);
    const last = await jsm.streams
      .getMessage(subjects.streamName(CLUSTER), { last_by_subj: subjects.nameEvents(CLUSTER, "vol", "default", name) })
      .catch(() => null);
    assert.equal(last, null, "nothing of the name is in the log");
    await journal.start(); // the healthy replica is back
    const v = await retryCreate(name);
    assert.notEqual(`${v.imageName}.img`, left, "the retry made a volume of its own");
    assert.equal((await client.call(CLUSTER, "volume.get", { uuid: v.uuid })).sizeBytes, 4 * MiB);
    assert.deepEqual(await orphans(), [left], "the dead writer's image is the one image no volume owns");
    const csictl = (...args: string[]) =>
      execFileSync(process.execPath, [CSICTL_BIN, "--json", "--cluster", CLUSTER, ...args], {
        cwd: ROOT,
        env: { ...process.env, ...journalEnv(), RUN_DIR: env.dir },
        encoding: "utf8",
      });
    const verify = JSON.parse(
      (() => {
        try {
          return csictl("verify", "--older-than", "0");
        } catch (e) {
          return String((e as { stdout?: string }).stdout); // exit 1: findings
        }
      })(),
    ) as { findings: { type: string; imageName?: string }[] };
    assert.ok(
      verify.findings.some((f) => f.type === "leakedImage" && `${f.imageName}.img` === left),
      `verify reports the image as leaked: ${JSON.stringify(verify.findings)}`,
    );
    const gc = JSON.parse(csictl("gc", "--apply", "--older-than", "0", "--request-id", "gc-crash-image")) as {
      actions: { imageName?: string; outcome: string }[];
    };
    assert.equal(gc.actions.find((a) => `${a.imageName}.img` === left)?.outcome, "done", JSON.stringify(gc.actions));
    assert.deepEqual(await orphans(), [], "no orphan image");
  });

  test("SIGKILL after the reservation's one write, before the projection: the retry answers the dead writer's volume, no orphan", async () => {
    const name = "pvc-crash-written";
    const [left] = await createAndDie("VolumeCreated", name);
    const jsm = await jetstreamManager(nc);
    const last = await jsm.streams.getMessage(subjects.streamName(CLUSTER), { last_by_subj: subjects.nameEvents(CLUSTER, "vol", "default", name) });
    const reserved = last?.json() as { type: string; uuid: string };
    assert.equal(reserved.type, "NameReserved", "the reservation was journaled before the crash");
    assert.equal(left, `csi-vol-${reserved.uuid}.img`, "its image was made first");
    await journal.start();
    const v = await retryCreate(name);
    assert.equal(v.uuid, reserved.uuid, "the volume the log holds is answered");
    assert.equal((await client.call(CLUSTER, "volume.get", { uuid: v.uuid })).sizeBytes, 4 * MiB);
    assert.deepEqual(await orphans(), [], "no orphan image");
  });

  test("a lock whose holder was killed is free again after its TTL, without restarting anything", async () => {
    await journal.whileDown(async (own) => {
      const crashing = await own({ JOURNAL_CRASH_AFTER: "NameReserved", LOCK_TTL_MS: "10000" });
      // The replica that answers afterwards runs before the holder dies: how long a replica takes
      // to start (long on a busy machine) is no part of the TTL.
      await own({ LOCK_WAIT_MS: "50" });
      // Either replica may take a create; one for a fresh name each time until the crashing one
      // took one (and died holding its name's lock). No resend: each try goes to one replica.
      const once = new JournalClient(nc, 60_000, { silenceMs: 0 });
      let name: string | undefined;
      for (let i = 0; i < 30 && !name; i++) {
        const n = `pvc-lock-${i}`;
        const call = once.call(CLUSTER, "volume.create", { requestId: `crash-${i}`, name: n, sizeBytes: MiB, capabilities: cap });
        const outcome = await Promise.race([
          call.then(
            () => "answered",
            (e: unknown) => `failed: ${e}`,
          ),
          crashing.exited.then(() => "crashed"),
        ]);
        if (outcome === "crashed") name = n;
        else assert.equal(outcome, "answered", `create ${n}`);
      }
      assert.ok(name, "the crashing replica took one of the creates");
      assert.equal(await crashing.exited, null, "killed by signal");
      const keys = keysFor(CLUSTER, "default");
      const lockKey = keys.lock(`name.volume.${name}`);
      const ttl = await redis.pttl(lockKey);
      assert.ok(ttl > 0, `the dead holder's lock is still there (pttl ${ttl})`);
      assert.equal(await codeOf(create(name, MiB)), "Aborted");
      await new Promise((r) => setTimeout(r, ttl + 100));
      assert.equal(await redis.exists(lockKey), 0);
      const v = await create(name, MiB);
      assert.equal(v.name, name);
    });
  });

  test("a writer whose lock expired mid-operation is fenced off by the sequence check, catches up and answers what won", async () => {
    await journal.whileDown(async (own) => {
      const frozen = await own({ JOURNAL_FREEZE_AFTER: "VolumeReserved", LOCK_TTL_MS: "1000" });
      const name = "pvc-fenced";
      // This caller does not fail over (no resend): its answer comes from the frozen writer itself.
      const patient = new JournalClient(nc, 30_000, { silenceMs: 0 });
      const first = patient.call(CLUSTER, "volume.create", { requestId: "frozen", name, sizeBytes: MiB, capabilities: cap }).then(
        (x) => x.uuid,
        (e: DriverError) => e.code,
      );
      const pid = frozen.child.pid as number;
      const state = async () => (await readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]?.[0];
      // Until it has taken the request and frozen (a replica just started on a busy machine may take a while).
      for (const end = Date.now() + 60_000; (await state()) !== "T" && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
      assert.equal(await state(), "T", "the writer froze right after its reservation");
      // Its lock expires (no renewals while frozen); another replica takes over the name. The
      // frozen one is still in the queue group: a request it gets waits until it wakes up, so
      // tries time out quickly and are repeated (what a CO does).
      let v: Awaited<ReturnType<typeof create>> | undefined;
      try {
        await own(); // another replica
        for (let i = 0; i < 60 && !v; i++) {
          v = await client
            .call(CLUSTER, "volume.create", { requestId: `retry-${i}`, name, sizeBytes: MiB, capabilities: cap }, { timeoutMs: 1000 })
            .catch((e: DriverError) => {
              assert.ok(["Aborted", "DeadlineExceeded"].includes(e.code), e.message);
              return undefined;
            });
        }
        assert.ok(v, "the other replica created the volume");
      } finally {
        process.kill(pid, "SIGCONT"); // the old writer wakes up and carries on
      }
      assert.equal(await first, v.uuid, "the old writer's append was fenced off; it caught up and answered the volume that won");
      await frozen.stop();
      const mine = (await images()).filter((f) => f.startsWith("csi-vol-"));
      const listed = (await client.call(CLUSTER, "volume.list", {})).entries;
      assert.deepEqual(
        listed.filter((x) => x.name === name).map((x) => x.uuid),
        [v.uuid],
        "one volume of that name",
      );
      assert.deepEqual(
        mine.filter((f) => !listed.some((x) => f === `${x.imageName}.img`)),
        [],
        "the old writer left no image",
      );
      const again = await create(name, MiB);
      assert.equal(again.uuid, v.uuid);
    });
  });

  test("a record removed from the projection behind the journal's back: the log still has it, so a repeat answers the same volume", async () => {
    // The log is the truth (docs/operations.md, "The extra snapshot"): a record the projection lost
    // is read from the log, not taken for a stale reservation (whose undo would remove a live volume's image).
    const v = await create("pvc-stale", 2 * MiB);
    const keys = keysFor(CLUSTER, "default");
    await redis.del(keys.record("volume", v.uuid));
    const again = await create("pvc-stale", 2 * MiB);
    assert.equal(again.uuid, v.uuid);
    assert.ok((await images()).includes(`${v.imageName}.img`), "its image kept");
  });

  test("nats-server and redis-server restarts: the journal reconnects and serves the same volumes", async () => {
    const v = await create("pvc-restarts", 2 * MiB);
    try {
      await env.nats.kill();
      await env.nats.restart();
      assert.equal((await retry(() => client.call(CLUSTER, "volume.get", { uuid: v.uuid }, { timeoutMs: 1000 }))).uuid, v.uuid);
      await env.redis.kill();
      assert.equal(await codeOf(client.call(CLUSTER, "volume.get", { uuid: v.uuid }, { timeoutMs: 5000 })), "Unavailable", "no Redis: a clear Unavailable");
      await env.redis.restart();
      assert.equal((await retry(() => create("pvc-restarts", 2 * MiB))).uuid, v.uuid, "same volume after both restarts");
      const w = await retry(() => create("pvc-after-restarts", MiB));
      assert.equal((await client.call(CLUSTER, "volume.get", { uuid: w.uuid })).name, "pvc-after-restarts");
    } finally {
      // The servers are shared: up again, and the journal answering, even if this test failed halfway.
      await env.restartStopped();
      await retry(() => client.call(CLUSTER, "volume.list", {}, { timeoutMs: 1000 })).catch((e) =>
        console.error("# the journal does not answer after the restarts:", e),
      );
    }
  });

  test("Redis FLUSHALL: the projection is rebuilt from the log, every volume keeps its id and size", async () => {
    // Volumes of its own, of each kind: plain, with parameters, restored from a snapshot.
    const plain = await create("pvc-flush-plain", 2 * MiB);
    const withParams = await create("pvc-flush-params", 3 * MiB, { parameters: { fs: "xfs" } });
    const snap = await client.call(CLUSTER, "snapshot.create", { requestId: "flush", name: "snap-flush", sourceUuid: plain.uuid });
    const restored = await create("pvc-flush-restored", 4 * MiB, { source: { kind: "snapshot", uuid: snap.uuid } });
    const mine = [plain.uuid, withParams.uuid, restored.uuid];
    const before = (await client.call(CLUSTER, "volume.list", {})).entries;
    assert.ok(before.length >= 3, `${before.length} volumes before the flush`);
    await redis.flushall();
    const afterList = (await client.call(CLUSTER, "volume.list", {})).entries;
    const pick = (l: typeof before) => l.map((v) => [v.uuid, v.name, v.sizeBytes, v.imageId]).sort();
    assert.deepEqual(pick(afterList), pick(before));
    // And writes keep working: the name directory came back too.
    const ours = before.filter((v) => mine.includes(v.uuid));
    assert.equal(ours.length, mine.length, "the test's own volumes were listed");
    for (const first of ours) {
      const again = await create(first.name, first.sizeBytes, { parameters: first.parameters, ...(first.source ? { source: first.source } : {}) });
      assert.equal(again.uuid, first.uuid, `re-create of ${first.name} after the rebuild`);
    }
  });
});

describe("operator commands (csictl against one journal)", () => {
  /** csictl with this journal's servers and clusters file from the environment, as an operator of one cluster runs it. */
  const csictl = (...args: string[]) =>
    JSON.parse(
      execFileSync(process.execPath, [CSICTL_BIN, "--json", "--cluster", CLUSTER, ...args], {
        cwd: ROOT,
        env: { ...process.env, ...journalEnv(), RUN_DIR: env.dir },
        encoding: "utf8",
      }),
    );

  test("rebuild drops the projection and replays the log; history tells a volume's story, by uuid and by name", async () => {
    const v = await create("pvc-admin", 3 * MiB);
    await client.call(CLUSTER, "volume.expand", { requestId: "grow", uuid: v.uuid, sizeBytes: 5 * MiB });
    const before = (await client.call(CLUSTER, "volume.list", {})).entries.map((x) => [x.uuid, x.sizeBytes]).sort();
    // What the rebuild counts: every indexed volume, reservations without an image (left by other
    // tests' crashes) included, which volume.list leaves out.
    const volumeIndex = keysFor(CLUSTER, "default").index("volume");
    const indexedBefore = (await redis.zrange(volumeIndex, "0", "-1")).sort();
    assert.ok(
      before.some(([uuid]) => uuid === v.uuid),
      "its volume is listed",
    );
    const out = csictl("rebuild");
    assert.ok(out.dropped > 0 && out.replayedTo > 0, JSON.stringify(out));
    assert.equal(out.volumes, indexedBefore.length, "the rebuild indexed as many volumes as there were");
    assert.deepEqual((await redis.zrange(volumeIndex, "0", "-1")).sort(), indexedBefore, "the same ones");
    const after = (await client.call(CLUSTER, "volume.list", {})).entries.map((x) => [x.uuid, x.sizeBytes]).sort();
    assert.deepEqual(after, before);
    const byUuid = (csictl("history", v.uuid) as { items: { events: { type: string; requestId: string; actor: string }[] }[] }).items;
    assert.deepEqual(
      byUuid[0]?.events.map((e) => e.type),
      ["NameReserved", "VolumeReserved", "VolumeCreated", "VolumeExpanded"],
    );
    assert.equal(byUuid[0]?.events[3]?.requestId, "grow");
    assert.ok(byUuid[0]?.events.every((e) => e.actor.startsWith("journal ")));
    const byName = (csictl("history", "--name", "pvc-admin") as { items: { uuids: string[]; events: unknown[] }[] }).items;
    assert.deepEqual(byName[0]?.uuids, [v.uuid]);
    assert.deepEqual(byName[0]?.events, byUuid[0]?.events);
  });
});

describe("snapshots and clones", () => {
  test("snapshot create/list/delete with filters and paging; clone and restore carry the bytes", async () => {
    const src = await create("pvc-src", 16 * MiB);
    const other = await create("pvc-other", 4 * MiB);
    const pattern = Buffer.from("event-sourced bytes ".repeat(100));
    const fh = await open(path.join(poolDir(), `${src.imageName}.img`), "r+");
    await fh.write(pattern, 0, pattern.length, 5 * MiB);
    await fh.close();

    const s1 = await client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-1", sourceUuid: src.uuid });
    assert.equal(s1.readyToUse, true);
    assert.equal(s1.sizeBytes, 16 * MiB);
    assert.deepEqual(await client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-1", sourceUuid: src.uuid }), s1);
    assert.equal(await codeOf(client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-1", sourceUuid: other.uuid })), "AlreadyExists");
    assert.equal(await codeOf(client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-x", sourceUuid: randomUUID() })), "NotFound");
    const s2 = await client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-2", sourceUuid: src.uuid });
    const s3 = await client.call(CLUSTER, "snapshot.create", { requestId: "s", name: "snap-3", sourceUuid: other.uuid });

    const bySource = await client.call(CLUSTER, "snapshot.list", { sourceUuid: src.uuid });
    assert.deepEqual(bySource.entries.map((s) => s.uuid).sort(), [s1.uuid, s2.uuid].sort());
    const byId = await client.call(CLUSTER, "snapshot.list", { snapshotUuid: s3.uuid });
    assert.deepEqual(
      byId.entries.map((s) => s.uuid),
      [s3.uuid],
    );
    assert.deepEqual((await client.call(CLUSTER, "snapshot.list", { snapshotUuid: randomUUID() })).entries, []);
    const seen: string[] = [];
    let token: string | undefined;
    do {
      const page: Awaited<ReturnType<typeof client.call<"snapshot.list">>> = await client.call(CLUSTER, "snapshot.list", {
        maxEntries: 2,
        ...(token ? { startingToken: token } : {}),
      });
      assert.ok(page.entries.length <= 2);
      seen.push(...page.entries.map((s) => s.uuid));
      token = page.nextToken;
    } while (token);
    assert.ok([s1.uuid, s2.uuid, s3.uuid].every((u) => seen.includes(u)));
    assert.equal(new Set(seen).size, seen.length, "no duplicates across pages");
    assert.equal(await codeOf(client.call(CLUSTER, "snapshot.list", { startingToken: "garbage" })), "Aborted");

    // Overwrite the source after the snapshot: the restore must have the old bytes.
    const fh2 = await open(path.join(poolDir(), `${src.imageName}.img`), "r+");
    await fh2.write(Buffer.alloc(pattern.length, 0x7a), 0, pattern.length, 5 * MiB);
    await fh2.close();
    const restored = await create("pvc-restored", 20 * MiB, { source: { kind: "snapshot", uuid: s1.uuid } });
    const cloned = await create("pvc-cloned", 16 * MiB, { source: { kind: "volume", uuid: src.uuid } });
    assert.equal(restored.sizeBytes, 20 * MiB);
    const readAt = async (img: string, len: number) => {
      const h = await open(path.join(poolDir(), `${img}.img`), "r");
      const b = Buffer.alloc(len);
      await h.read(b, 0, len, 5 * MiB);
      await h.close();
      return b;
    };
    assert.deepEqual(await readAt(restored.imageName, pattern.length), pattern);
    assert.deepEqual(await readAt(cloned.imageName, pattern.length), Buffer.alloc(pattern.length, 0x7a));
    assert.equal(await codeOf(create("pvc-small-restore", 4 * MiB, { source: { kind: "snapshot", uuid: s1.uuid } })), "OutOfRange");
    assert.equal(await codeOf(create("pvc-missing-src", 4 * MiB, { source: { kind: "volume", uuid: randomUUID() } })), "NotFound");

    assert.deepEqual(await client.call(CLUSTER, "snapshot.delete", { requestId: "sd", uuid: s1.uuid }), { deleted: true });
    assert.deepEqual(await client.call(CLUSTER, "snapshot.delete", { requestId: "sd", uuid: s1.uuid }), { deleted: false });
    assert.deepEqual(
      (await client.call(CLUSTER, "snapshot.list", { sourceUuid: src.uuid })).entries.map((s) => s.uuid),
      [s2.uuid],
    );
  });
});
