import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { DriverError, GrpcCode } from "@csi/contracts";
import { pino } from "pino";
import { opsShape } from "../src/config.js";
import { localUrl, parseListenAddr } from "../src/ops/listen-addr.js";
import { startOpsListener } from "../src/ops/listener.js";
import { grpcCodeName, grpcServerMetrics, Ops, outcomeOf } from "../src/ops/metrics.js";
import { Readiness, shortReason } from "../src/ops/readiness.js";

const quiet = pino({ level: "silent" });

describe("METRICS_ADDR", () => {
  const cases: [string, ReturnType<typeof parseListenAddr>][] = [
    ["0.0.0.0:9810", { off: false, host: "0.0.0.0", port: 9810 }],
    ["127.0.0.1:0", { off: false, host: "127.0.0.1", port: 0 }],
    [":9812", { off: false, host: "0.0.0.0", port: 9812 }],
    ["[::]:9811", { off: false, host: "::", port: 9811 }],
    ["metrics.local:80", { off: false, host: "metrics.local", port: 80 }],
    ["10.244.1.7:9812", { off: false, host: "10.244.1.7", port: 9812 }],
    ["[fd00::7]:9812", { off: false, host: "fd00::7", port: 9812 }],
    ["off", { off: true }],
  ];
  for (const [text, want] of cases) it(`${JSON.stringify(text)} is ${JSON.stringify(want)}`, () => assert.deepEqual(parseListenAddr(text), want));

  for (const bad of ["9810", "host:", "host:port", "0.0.0.0:70000", "http://x:1", "a b:1", ""]) {
    it(`${JSON.stringify(bad)} is refused with a reason`, () => assert.ok("error" in parseListenAddr(bad)));
  }

  it("the default is loopback; a bad METRICS_ADDR is a config problem (one line, exit 2 at start)", () => {
    const schema = opsShape(9810).metricsAddr;
    assert.equal(schema.parse(undefined), "127.0.0.1:9810");
    assert.equal(schema.parse("0.0.0.0:9810"), "0.0.0.0:9810", "an explicit wildcard is kept");
    assert.equal(schema.safeParse("nope").success, false);
  });

  it("a wildcard bind is reached on loopback", () => {
    assert.equal(localUrl("0.0.0.0", 9810), "http://127.0.0.1:9810");
    assert.equal(localUrl("::", 9811), "http://[::1]:9811");
    assert.equal(localUrl("10.0.0.5", 1), "http://10.0.0.5:1");
  });
});

describe("Readiness", () => {
  it("is not ready while starting or stopping, whatever the checks say", async () => {
    const r = new Readiness({ reuseMs: 0 });
    r.add("nats", () => true);
    assert.deepEqual(await r.report(), { ready: false, failing: "starting", reason: "the service is starting", checks: {} });
    r.started();
    assert.equal((await r.report()).ready, true);
    r.stopping();
    assert.equal((await r.report()).failing, "stopping");
  });

  it("names the first failing check and says why for each", async () => {
    const r = new Readiness({ reuseMs: 0 });
    r.add("nats", () => true);
    r.add("redis", async () => "Redis connection is reconnecting");
    r.add("commands", () => {
      throw new Error("boom\nwith a newline");
    });
    r.started();
    const got = await r.report();
    assert.equal(got.ready, false);
    assert.equal(got.failing, "redis");
    assert.equal(got.reason, "Redis connection is reconnecting");
    assert.deepEqual(got.checks, { nats: "ok", redis: "Redis connection is reconnecting", commands: "boom with a newline" });
  });

  it("a check that does not answer in time fails with that as its reason", async () => {
    const r = new Readiness({ reuseMs: 0, timeoutMs: 20 });
    r.add("journals", () => new Promise<true>(() => {}));
    r.started();
    const got = await r.report();
    assert.equal(got.failing, "journals");
    assert.equal(got.reason, "no answer within 20 ms");
  });

  it("callers within the reuse window share one run of the checks", async () => {
    let now = 1000;
    let runs = 0;
    const r = new Readiness({ reuseMs: 250, now: () => now });
    r.add("x", () => {
      runs++;
      return true;
    });
    r.started();
    await Promise.all([r.report(), r.report(), r.report()]);
    assert.equal(runs, 1);
    now += 249;
    await r.report();
    assert.equal(runs, 1);
    now += 1;
    await r.report();
    assert.equal(runs, 2);
  });

  it("a reason is short printable text", () => {
    const s = shortReason(`${"x".repeat(300)}\u0000`);
    assert.ok(s.length <= 160 && s.endsWith("..."));
    assert.equal(shortReason(new Error("\u001b[31mred\u001b[0m")), "[31mred [0m");
  });
});

describe("labels", () => {
  it("an outcome is ok, the error's name, or Internal", () => {
    assert.equal(outcomeOf(), "ok");
    assert.equal(outcomeOf(new DriverError("Aborted", "busy")), "Aborted");
    assert.equal(outcomeOf(new Error("whatever the text")), "Internal");
  });

  it("a gRPC code is named from the table", () => {
    assert.equal(grpcCodeName(GrpcCode.OK), "OK");
    assert.equal(grpcCodeName(GrpcCode.ABORTED), "ABORTED");
    assert.equal(grpcCodeName(99), "UNKNOWN");
  });

  it("the RPC observer splits service and method and counts by code", async () => {
    const ops = new Ops("test");
    const observe = grpcServerMetrics(ops.registry);
    observe("Controller.CreateVolume", GrpcCode.OK, 0.01);
    observe("Controller.CreateVolume", GrpcCode.OK, 0.02);
    observe("Controller.CreateVolume", GrpcCode.ALREADY_EXISTS, 0.01);
    const text = await ops.registry.metrics();
    assert.match(text, /^csi_grpc_server_handled_total\{service="Controller",method="CreateVolume",code="OK"\} 2$/m);
    assert.match(text, /^csi_grpc_server_handled_total\{service="Controller",method="CreateVolume",code="ALREADY_EXISTS"\} 1$/m);
    assert.match(text, /^csi_grpc_server_handling_seconds_count\{service="Controller",method="CreateVolume",code="OK"\} 2$/m);
  });
});

describe("the ops listener", () => {
  it("serves the three paths to GET (and HEAD) only, and writes the READY_FILE once the checks pass; removes it on close", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "csi-ops-"));
    const readyFile = path.join(dir, "ready.json");
    const ops = new Ops("test");
    let redisUp = false;
    ops.readiness.add("redis", () => redisUp || "Redis connection is connecting");
    const l = await startOpsListener(ops, { metricsAddr: "127.0.0.1:0", readyFile }, quiet);
    try {
      const url = l.url as string;
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const get = (p: string, init?: RequestInit) => fetch(`${url}${p}`, init);
      assert.equal((await get("/healthz")).status, 200);
      const starting = await get("/readyz");
      assert.equal(starting.status, 503);
      assert.equal(((await starting.json()) as { failing: string }).failing, "starting");
      assert.equal((await get("/nothing")).status, 404);
      assert.equal((await get("/metrics", { method: "POST", body: "x" })).status, 405);
      const metrics = await get("/metrics?x=1");
      assert.equal(metrics.status, 200);
      assert.match(await metrics.text(), /^process_cpu_user_seconds_total /m);

      l.started();
      await new Promise((r) => setTimeout(r, 300));
      const notReady = await get("/readyz");
      assert.equal(notReady.status, 503);
      assert.equal(((await notReady.json()) as { failing: string }).failing, "redis");
      assert.equal(existsSync(readyFile), false, "no READY_FILE while a check fails");

      redisUp = true;
      for (let i = 0; i < 100 && !existsSync(readyFile); i++) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(JSON.parse(readFileSync(readyFile, "utf8")), { service: "test", pid: process.pid, metrics: url });
      assert.equal((await get("/readyz")).status, 200);

      l.stopping();
      assert.equal((await get("/readyz")).status, 503);
      assert.equal(existsSync(readyFile), false, "a stopping service takes its READY_FILE away");
    } finally {
      await l.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("METRICS_ADDR=off: no listener, the READY_FILE has no metrics URL", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "csi-ops-"));
    const readyFile = path.join(dir, "ready.json");
    const l = await startOpsListener(new Ops("quiet"), { metricsAddr: "off", readyFile }, quiet);
    try {
      assert.equal(l.url, undefined);
      l.started();
      for (let i = 0; i < 100 && !existsSync(readyFile); i++) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(JSON.parse(readFileSync(readyFile, "utf8")), { service: "quiet", pid: process.pid });
    } finally {
      await l.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("an address in use fails the start", async () => {
    const first = await startOpsListener(new Ops("a"), { metricsAddr: "127.0.0.1:0" }, quiet);
    try {
      const port = (first.url as string).split(":").at(-1);
      await assert.rejects(startOpsListener(new Ops("b"), { metricsAddr: `127.0.0.1:${port}` }, quiet), /EADDRINUSE/);
    } finally {
      await first.close();
    }
  });
});
