/**
 * What an operator's log says, on real servers: a first start (an empty log, no projection) says
 * that it builds its projection without a warning; every line's durations are whole milliseconds.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { type JournalTestEnv, journalTestEnv } from "@csi/testkit";

const CLUSTER = "ln";
let j: JournalTestEnv;
before(async () => {
  j = await journalTestEnv(CLUSTER);
});
after(async () => {
  await j?.dispose();
});

const parsed = (lines: string[]) =>
  lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { level: string; msg: string; ms?: number; reason?: string });

test("a first start builds its projection without a warning; durations in whole milliseconds", async () => {
  const p = await j.spawnJournal({ LOG_LEVEL: "debug" });
  try {
    await j.client.call(CLUSTER, "volume.create", {
      requestId: randomUUID(),
      name: "pvc-noise",
      sizeBytes: 1024 * 1024,
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER" }],
    });
    await p.untilLog((l) => l.includes('"msg":"ok"'), "a command's debug line");
  } finally {
    await p.stop();
  }
  const lines = parsed(p.logs);
  const rebuild = lines.find((l) => l.msg === "projection rebuild started");
  assert.equal(rebuild?.reason, "missing", "a first start builds its projection");
  assert.equal(rebuild?.level, "info", "said, not warned");
  const warned = lines.filter((l) => ["warn", "error", "fatal"].includes(l.level)).map((l) => l.msg);
  assert.deepEqual(warned, [], "nothing to warn about on a first start");
  const timed = lines.filter((l) => l.ms !== undefined);
  assert.ok(timed.length > 0, "some lines carry a duration");
  assert.deepEqual(
    timed.filter((l) => !Number.isInteger(l.ms)).map((l) => `${l.msg}: ${l.ms}`),
    [],
  );
});
