import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Counter, Histogram, Ops } from "@csi/runtime";
import { has, metricNames, parseMetrics, sampleValue } from "./metrics.js";

describe("parseMetrics reads what prom-client writes", () => {
  it("labels (escaped values too), counters, histogram buckets with +Inf", async () => {
    const ops = new Ops("parse");
    const c = new Counter({ name: "t_total", help: "h", labelNames: ["a", "b"], registers: [ops.registry] });
    c.inc({ a: 'x"y\\z\nw', b: "2" }, 3);
    const h = new Histogram({ name: "t_seconds", help: "h", labelNames: ["m"], buckets: [0.1, 1], registers: [ops.registry] });
    h.observe({ m: "get" }, 0.5);
    const samples = parseMetrics(await ops.registry.metrics());
    assert.equal(sampleValue(samples, "t_total", { a: 'x"y\\z\nw', b: "2" }), 3);
    assert.equal(sampleValue(samples, "t_seconds_bucket", { m: "get", le: "0.1" }), 0);
    assert.equal(sampleValue(samples, "t_seconds_bucket", { m: "get", le: "+Inf" }), 1);
    assert.equal(sampleValue(samples, "t_seconds_count", { m: "get" }), 1);
    assert.equal(sampleValue(samples, "t_total", { a: "other" }), 0, "absent: 0");
    assert.ok(has(samples, "process_cpu_user_seconds_total"));
    assert.ok(metricNames(samples).has("t_seconds"), "a histogram's base name");
  });

  it("refuses a line that is not a sample", () => {
    assert.throws(() => parseMetrics("what is this {"), /not a sample line/);
  });
});
