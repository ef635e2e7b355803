/**
 * An append that landed without an answer (the stream leader lost mid-ack: JetStream after a
 * lame-duck eviction or a leader kill), then found in the log by the decider, which answers the
 * command with success: whoever reads after that answer must see what it told. Another journal
 * replica, with its own projector on the same projection, took the CO's next call (a
 * CreateSnapshot of the volume just created) and answered NOT_FOUND "source volume … does not
 * exist" (ha.test's rolling restart; `npm run chaos -- --ha --hosts` saw a publish NOT_FOUND and a
 * delete answered as done while its volume lived on). In-memory log and store, shared by two journals.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { resolveClusters } from "@csi/contracts";
import { AppendUncertain, MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { MemoryStore, Projector } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { testJournal } from "@csi/testkit";

const CLUSTER = "ua";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

test("a create acknowledged after an append without an answer is seen by the next command on another journal", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-uncertain-ack-"));
  try {
    const root = path.join(dir, "pool");
    const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root }] }] }, dir).get(CLUSTER);
    assert.ok(cluster);
    const pools = new Map([["default", new FilePool({ name: "default", id: 1, root })]]);
    let lose = 0;
    /** One log; journal 1 reaches it through `lossy`: the next `lose` appends land, and their answer is lost. */
    const log = new MemoryLog({ cluster: CLUSTER, instance: cluster.instance });
    const lossy = new Proxy(log, {
      get(target, prop) {
        if (prop === "appendAll")
          return async (...args: Parameters<MemoryLog["appendAll"]>) => {
            const landed = await target.appendAll(...args);
            if (lose > 0) {
              lose--;
              throw new AppendUncertain();
            }
            return landed;
          };
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const store = new MemoryStore();
    const logger = createLogger("uncertain-ack-test", "silent");
    const p1 = new Projector(lossy, store, logger, { waitMs: 2000 });
    const p2 = new Projector(log, store, logger, { waitMs: 2000 });
    const j1 = testJournal({ cluster, pools, log: lossy, store, projector: p1, logger });
    const j2 = testJournal({ cluster, pools, log, store, projector: p2, logger });
    await p1.start();
    await p2.start();

    lose = 1;
    const v = await j1.createVolume({ requestId: "c1", name: "pvc-ua", sizeBytes: 1024 * 1024, limitBytes: 0, parameters: {}, capabilities: [cap] });
    assert.equal(lose, 0, "the create's append landed without an answer");

    const got = await j2.getVolume({ uuid: v.uuid });
    assert.equal(got.uuid, v.uuid, "another journal finds the acknowledged volume");
    const s = await j2.createSnapshot({ requestId: "s1", name: "snap-ua", sourceUuid: v.uuid, parameters: {} });
    assert.equal(s.sourceUuid, v.uuid, "a snapshot of it is made on another journal");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
