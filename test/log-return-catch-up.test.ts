/**
 * A projection distrusted while the log was down (an append got no answer) is caught up the moment
 * the log answers again, before any command asks (projection/projector.ts catchUpWhenLogAnswers):
 * the CO's retry after a failover then finds it caught up instead of starting the catch-up itself.
 * The journal's own LogReachability, told the log is down, probing until the probe answers; an
 * in-memory log and store; a second journal writes while the first one's projector waits.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { resolveClusters } from "@csi/contracts";
import { LogReachability, MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { catchUpWhenLogAnswers, MemoryStore, Projector } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { testJournal } from "@csi/testkit";

const CLUSTER = "lr";

let reach: LogReachability | undefined;

test("a distrusted projection is caught up when the log answers again, with no command asking", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-log-return-"));
  try {
    const root = path.join(dir, "pool");
    const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root }] }] }, dir).get(CLUSTER);
    assert.ok(cluster);
    const pools = new Map([["default", new FilePool({ name: "default", id: 1, root })]]);
    const log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
    const store = new MemoryStore();
    const logger = createLogger("log-return-test", "silent");
    const mine = new Projector(log, store, logger, { waitMs: 2000 });
    await mine.start();

    let answers = false;
    let probes = 0;
    const r = new LogReachability(async () => {
      probes++;
      if (!answers) throw new Error("no stream leader");
    }, logger);
    reach = r;
    catchUpWhenLogAnswers(r, mine, logger);
    r.failed("not connected to NATS");
    mine.distrust();

    // Another journal writes meanwhile: records past the projection's watermark (runs write their
    // states, only a catch-up moves the watermark).
    const other = testJournal({ cluster, pools, log, store, projector: new Projector(log, store, logger, { waitMs: 2000 }), logger });
    const v = await other.createVolume({
      requestId: "c1",
      name: "pvc-lr",
      sizeBytes: 1024 * 1024,
      limitBytes: 0,
      parameters: {},
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER" }],
    });
    const last = (await log.info()).last;
    assert.ok(((await store.projectionMeta())?.applied ?? 0) < last, "the watermark is behind the log");
    const up = new Promise<void>((resolve) => {
      const off = r.onUp(() => {
        off();
        resolve();
      });
    });
    assert.ok(probes > 0, "probed while down");
    answers = true;
    await up;
    assert.equal(r.down(), undefined, "the log answers again");
    // The catch-up began as the log answered (the journal's listener runs before ours); waiting for
    // the one under way (current() joins it, it does not start another): the watermark at the end.
    assert.equal(mine.distrusted, false, "a catch-up began when the log answered again");
    await mine.current();
    assert.equal((await store.projectionMeta())?.applied, last, "caught up with no command");
    assert.ok(v.uuid);
  } finally {
    reach?.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
