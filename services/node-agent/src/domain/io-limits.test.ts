import assert from "node:assert/strict";
import { test } from "node:test";
import { describeLimits, hear, type LimitsEntry, planSync, prunePending, v1Lines, v1Value, v2Limits, v2Line } from "./io-limits.js";

const entry = (more: Partial<LimitsEntry> = {}): LimitsEntry => ({ seq: 10, limits: { writeIOPS: "100" }, at: "2026-01-01T00:00:00Z", ...more });

test("cgroup v1: one line per throttle file, 0 where there is no limit (which removes the rule)", () => {
  assert.deepEqual(v1Lines("7:3", { readBytesPerSecond: "1048576", writeIOPS: "100" }), [
    { file: "blkio.throttle.read_bps_device", line: "7:3 1048576" },
    { file: "blkio.throttle.write_bps_device", line: "7:3 0" },
    { file: "blkio.throttle.read_iops_device", line: "7:3 0" },
    { file: "blkio.throttle.write_iops_device", line: "7:3 100" },
  ]);
  assert.equal(v1Value("7:1 5\n7:3 1048576\n", "7:3"), "1048576");
  assert.equal(v1Value("7:13 5\n", "7:1"), undefined, "7:1 is not 7:13");
  assert.equal(v1Value("", "7:3"), undefined);
});

test("cgroup v2: one io.max line, max where there is no limit; read back", () => {
  const line = v2Line("7:3", { readBytesPerSecond: "1048576", writeIOPS: "100", readIOPS: "0" });
  assert.equal(line, "7:3 rbps=1048576 wbps=max riops=max wiops=100");
  assert.deepEqual(v2Limits(`8:0 rbps=1 wbps=max riops=max wiops=max\n${line}\n`, "7:3"), { readBytesPerSecond: "1048576", writeIOPS: "100" });
  assert.deepEqual(v2Limits("8:0 rbps=1\n", "7:3"), {});
  assert.equal(v2Line("7:3", {}), "7:3 rbps=max wbps=max riops=max wiops=max");
});

test("the newest limits heard win, whatever the order of arrival", () => {
  const first = hear(undefined, { limits: { readIOPS: "5", writeIOPS: "0" }, seq: 10 }, "t1");
  assert.deepEqual(first, { seq: 10, limits: { readIOPS: "5" }, at: "t1" });
  assert.equal(hear(first, { limits: { readIOPS: "9" }, seq: 9 }, "t2"), first, "older: ignored");
  assert.equal(hear(first, { limits: { readIOPS: "9" }, seq: 10 }, "t2"), first, "same sequence: ignored");
  const applied = { seq: 10, device: "/dev/loop3", majMin: "7:3", written: true };
  assert.deepEqual(
    hear({ ...first, applied }, { limits: {}, seq: 12 }, "t3"),
    { seq: 12, limits: {}, at: "t3", applied },
    "newer: taken, what was done is kept",
  );
});

test("sync plan: write what is new, nothing twice, nothing when there is nothing to set or remove", () => {
  assert.deepEqual(planSync(entry(), "7:3"), { kind: "write", limits: { writeIOPS: "100" } }, "never applied");
  const done = { seq: 10, device: "/dev/loop3", majMin: "7:3", written: true };
  assert.deepEqual(planSync(entry({ applied: done }), "7:3"), { kind: "none" }, "this sequence is on this device already");
  assert.deepEqual(planSync(entry({ seq: 11, limits: {}, applied: done }), "7:3"), { kind: "write", limits: {} }, "limits dropped: remove ours");
  assert.deepEqual(planSync(entry({ limits: {} }), "7:3"), { kind: "none" }, "no limits and nothing of ours there");
  assert.deepEqual(planSync(entry({ seq: 11, limits: {}, applied: { ...done, written: false } }), "7:3"), { kind: "none" });
  assert.deepEqual(
    planSync(entry({ applied: done }), "7:5"),
    { kind: "write", limits: { writeIOPS: "100" }, clearFirst: { device: "/dev/loop3", majMin: "7:3" } },
    "the volume moved to another device: remove our rules from the old one first",
  );
});

test("pending limits of volumes never staged here are bounded, oldest dropped first", () => {
  const volumes = {
    a: entry({ at: "2026-01-03" }),
    b: entry({ at: "2026-01-01" }),
    c: entry({ at: "2026-01-02" }),
    staged: entry({ at: "2025-01-01", applied: { seq: 10, device: "/dev/loop1", majMin: "7:1", written: true } }),
  };
  assert.deepEqual(prunePending(volumes, 1), ["b", "c"]);
  assert.deepEqual(prunePending(volumes, 3), []);
});

test("limits are described for reports", () => {
  assert.equal(describeLimits({ readBytesPerSecond: "1048576", writeIOPS: "100", readIOPS: "0" }), "readBytesPerSecond=1048576 writeIOPS=100");
  assert.equal(describeLimits({}), "no limits");
});
