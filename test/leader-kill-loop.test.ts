/** scripts/loop-leader-kill.ts's reading of one run of test/ha.test.ts (pure). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { summariseLeaderKill } from "../scripts/lib/leader-kill.js";

test("a clean run: passed, no extra object, its window", () => {
  const out = [
    "✔ (a) SIGKILL the NATS node leading the event stream, restart it later (61234ms)",
    "HA figures (this machine):",
    "NATS stream leader kill  longest failure window   5512 ms,  12 failed attempts, slowest op 6100 ms; ops/s before 60.0",
    "ℹ fail 0",
  ].join("\n");
  assert.deepEqual(summariseLeaderKill(out, 0), { passed: true, extra: { volumes: [], snapshots: [] }, windowMs: 5512 });
});

test("a run that found a snapshot the CO was never told of: failed, the id counted", () => {
  const id = "0001-0005-local-0000000000000001-6b131693-8210-4b03-acc4-9acebba04e87";
  const out = [
    "✖ (a) SIGKILL the NATS node leading the event stream, restart it later (70000ms)",
    "  AssertionError [ERR_ASSERTION]: NATS stream leader kill: snapshots the CO was not told of:",
    `  ${id}: {"events":[]}`,
    "      at checkState (test/ha.test.ts:172:7)",
    "ℹ fail 1",
  ].join("\n");
  const r = summariseLeaderKill(out, 1);
  assert.equal(r.passed, false);
  assert.deepEqual(r.extra, { volumes: [], snapshots: [id] });
  assert.match(r.failure ?? "", /snapshots the CO was not told of/);
  // A zero exit code with a failure counted is still a failure.
  assert.equal(summariseLeaderKill("ℹ fail 1", 0).passed, false);
});

test("the election and the first success after it, when the run printed them", () => {
  const out = [
    "NATS stream leader kill  longest failure window   5512 ms,  12 failed attempts, slowest op 6100 ms; ops/s before 60.0, during 3.0, after 50.0 (10/2/30 ops); new leader elected 5123 ms after the kill; first success 210 ms after it",
    "Redis primary kill       longest failure window   1800 ms,   4 failed attempts, slowest op 2100 ms; ops/s before 60.0; +switch-master 1500 ms after the kill; first success 90 ms after it",
    "ℹ fail 0",
  ].join("\n");
  assert.deepEqual(summariseLeaderKill(out, 0), { passed: true, extra: { volumes: [], snapshots: [] }, windowMs: 5512, electedMs: 5123, firstOkMs: 210 });
});
