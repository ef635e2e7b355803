/**
 * audit.images (a restore's dry run reads the pools through it): every image of every pool, page
 * by page, none twice and none skipped, also across pools whose names sort around the token's
 * separator ("a-b" before "a/…"). Real nats-server, redis-server and a journal process.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type JournalTestEnv, journalTestEnv, type ServiceProcess } from "@csi/testkit";

const CLUSTER = "ai";
const MiB = 1024 * 1024;
let j: JournalTestEnv;
let journal: ServiceProcess;
before(async () => {
  j = await journalTestEnv(CLUSTER, { pools: ["a", "a-b"] });
  journal = await j.spawnJournal();
});
after(async () => {
  await journal?.stop();
  await j?.dispose();
});

test("every image of every pool once, in pages of two", async () => {
  const made: string[] = [];
  for (const pool of ["a", "a-b"])
    for (let i = 0; i < 3; i++) {
      const v = await j.client.call(CLUSTER, "volume.create", {
        requestId: `ai-${pool}-${i}`,
        name: `pvc-${pool}-${i}`,
        sizeBytes: MiB,
        pool,
        capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER" }],
      });
      made.push(`${pool}/${v.imageName}`);
    }
  const seen: string[] = [];
  let token: string | undefined;
  do {
    const page = await j.client.call(CLUSTER, "audit.images", { maxEntries: 2, ...(token ? { startingToken: token } : {}) });
    assert.ok(page.entries.length <= 2);
    seen.push(...page.entries.map((e) => `${e.pool}/${e.name}`));
    token = page.nextToken;
  } while (token);
  assert.deepEqual(seen.sort(), made.sort());
});
