/**
 * The runner reads a volume's device reports beside its lock + read (a DeleteVolume's first read).
 * When the log fails that device read while the lock + read is still going — JetStream "temporarily
 * unavailable" during a partition, as `npm run chaos -- --ha --hosts` found: every journal of the
 * three hosts died of it — the failure must reach the command, never become an unhandled rejection
 * (which ends the process). In-memory adapters, a log whose history of device subjects fails at
 * once, a store whose lock + read answers a few turns later.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DriverError, resolveClusters, subjects } from "@csi/contracts";
import { MemoryLog } from "@csi/journal/log";
import { FilePool } from "@csi/journal/pools";
import { MemoryStore, Projector } from "@csi/journal/projection";
import { createLogger } from "@csi/runtime";
import { testJournal } from "@csi/testkit";

const CLUSTER = "dr";
const cap = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };

test("a device read that fails while the lock + read goes on fails the command, with no unhandled rejection", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-device-read-"));
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => void unhandled.push(err);
  process.on("unhandledRejection", onUnhandled);
  try {
    const root = path.join(dir, "pool");
    const cluster = resolveClusters({ clusters: [{ clusterID: CLUSTER, pools: [{ name: "default", id: 1, root }] }] }, dir).get(CLUSTER);
    assert.ok(cluster);
    let failDevices = false;
    const log = new (class extends MemoryLog {
      override history(list: string[]) {
        const devices = list.some((s) => s.startsWith(subjects.deviceEvents(CLUSTER, "x").slice(0, -1)));
        return failDevices && devices ? Promise.reject(new DriverError("Unavailable", "stream unavailable")) : super.history(list);
      }
    })({ cluster: CLUSTER, instance: cluster.instance });
    const store = new (class extends MemoryStore {
      override async lockAndRead(...args: Parameters<MemoryStore["lockAndRead"]>) {
        if (failDevices) for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r)); // the device read fails first
        return super.lockAndRead(...args);
      }
    })();
    const logger = createLogger("device-read-test", "silent");
    const projector = new Projector(log, store, logger, { waitMs: 2000 });
    const journal = testJournal({ cluster, pools: new Map([["default", new FilePool({ name: "default", id: 1, root })]]), log, store, projector, logger });
    await projector.start();
    const v = await journal.createVolume({ requestId: "c1", name: "pvc-d", sizeBytes: 1024 * 1024, limitBytes: 0, parameters: {}, capabilities: [cap] });
    failDevices = true;
    const err = await journal.deleteVolume({ requestId: "d1", uuid: v.uuid }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(unhandled, [], "no rejection went unhandled");
    assert.ok(err instanceof DriverError && err.code === "Unavailable", `the delete failed Unavailable: ${String(err)}`);
  } finally {
    process.off("unhandledRejection", onUnhandled);
    await rm(dir, { recursive: true, force: true });
  }
});
