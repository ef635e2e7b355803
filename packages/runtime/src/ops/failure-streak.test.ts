import assert from "node:assert/strict";
import { test } from "node:test";
import { failureStreak } from "./failure-streak.js";

test("a streak of failures is one warning, then one line when it works again", () => {
  const lines: [string, string, unknown][] = [];
  const log = {
    warn: (o: unknown, m: string) => lines.push(["warn", m, o]),
    info: (o: unknown, m: string) => lines.push(["info", m, o]),
  } as never;
  let t = 1000;
  const s = failureStreak(log, "heartbeat", () => t);
  s.ok();
  assert.equal(lines.length, 0, "nothing to say while it works");
  for (let i = 0; i < 5; i++) {
    s.failed(new Error("timeout"));
    t += 1000;
  }
  s.ok();
  s.ok();
  s.failed("again");
  assert.deepEqual(lines, [
    ["warn", "heartbeat failed (repeats are not logged until it works again)", { err: "timeout" }],
    ["info", "heartbeat works again", { failures: 5, ms: 5000 }],
    ["warn", "heartbeat failed (repeats are not logged until it works again)", { err: "again" }],
  ]);
});
