/**
 * A pool knows its log (docs/operations.md): a journal refuses to start on a pool bound to another
 * event log (the log lost and made anew, another stack's), and on a pool that holds images while
 * its log is empty; POOL_REBIND=1 binds it, and gc then never removes the images made before. Two
 * pools on one directory are refused. Real nats-server and redis-server, journal processes.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { subjects } from "@csi/contracts";
import { FilePool } from "@csi/journal/pools";
import { type JournalTestEnv, journalTestEnv, tempDir } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";

const MiB = 1024 * 1024;
const CLUSTER = "pb";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

describe("a pool knows its log", () => {
  let j: JournalTestEnv;
  before(async () => {
    j = await journalTestEnv(CLUSTER);
  });
  after(async () => {
    await j?.dispose();
  });
  const poolDir = () => path.join(j.servers.dir, "pools", CLUSTER, "default");
  const refusal = (extra: Record<string, string> = {}) =>
    j.spawnJournal(extra).then(
      async (p) => {
        await p.stop();
        return "started";
      },
      (err: Error) => err.message,
    );

  it("refuses a log made anew over a bound pool, naming both logs; POOL_REBIND=1 binds it and gc keeps the older images", async () => {
    const journal = await j.spawnJournal();
    const v = await j.client.call(CLUSTER, "volume.create", { requestId: "c1", name: "pvc-bound", sizeBytes: MiB, capabilities: [cap] });
    await journal.stop();
    const binding = JSON.parse(readFileSync(path.join(poolDir(), ".csi-pool.json"), "utf8")) as { log: string; cluster: string; pool: string };
    assert.deepEqual([binding.cluster, binding.pool], [CLUSTER, "default"]);

    // The log lost: its stream deleted (as a wiped NATS store, or another NATS given by NATS_URL, leaves it).
    await (await jetstreamManager(j.nc)).streams.delete(subjects.streamName(CLUSTER));
    const why = await refusal();
    assert.match(why, new RegExp(`belongs to event log ${binding.log}, and this journal's log is [^ :]+: the log was lost`));
    assert.ok(existsSync(path.join(poolDir(), `${v.imageName}.img`)), "nothing touched");

    const rebound = await j.spawnJournal({ POOL_REBIND: "1" });
    try {
      const gc = await j.client.call(CLUSTER, "audit.gc", { requestId: "gc-rebound", apply: true, olderThanMs: 0 });
      assert.deepEqual(
        gc.actions.map((a) => [a.imageName, a.outcome]),
        [[v.imageName, "skipped"]],
      );
      assert.match(gc.actions[0]?.reason ?? "", /made before .* bound to this log/);
      assert.ok(existsSync(path.join(poolDir(), `${v.imageName}.img`)), "kept: it may be a volume a CO holds");
      const after = JSON.parse(readFileSync(path.join(poolDir(), ".csi-pool.json"), "utf8")) as { log: string; previous?: string };
      assert.equal(after.previous, binding.log);
    } finally {
      await rebound.stop();
    }
    assert.equal(await refusal(), "started", "bound now: the next start goes");
  });

  it("refuses a pool that holds images and no binding while the log is empty (another log's pool)", async () => {
    await (await jetstreamManager(j.nc)).streams.delete(subjects.streamName(CLUSTER));
    const dir = poolDir();
    const moved = path.join(dir, ".csi-pool.json");
    writeFileSync(moved, ""); // unreadable: refused, never overwritten
    assert.match(await refusal(), /is not a pool binding this driver wrote/);
    await rm(moved);
    assert.match(await refusal(), /holds \d+ images and belongs to no log, and this journal's log is empty/);
  });
});

describe("two pools on one directory", () => {
  it("the second binding of a directory to another pool or cluster is refused", async () => {
    const dir = await tempDir("csi-pool-bind-");
    const root = path.join(dir, "shared");
    await mkdir(root);
    const pool = (name: string) => new FilePool({ name, id: 1, root });
    await pool("a").bind({ cluster: "c1", pool: "a", log: "L1" }, { logRecords: 0, rebind: false });
    await assert.rejects(pool("b").bind({ cluster: "c1", pool: "b", log: "L1" }, { logRecords: 0, rebind: false }), /already pool "a" of cluster c1/);
    await assert.rejects(pool("a").bind({ cluster: "c2", pool: "a", log: "L2" }, { logRecords: 0, rebind: true }), /two pools cannot share one directory/);
    assert.equal((await pool("a").bind({ cluster: "c1", pool: "a", log: "L1" }, { logRecords: 5, rebind: false })).log, "L1");
    await rm(dir, { recursive: true, force: true });
  });
});
