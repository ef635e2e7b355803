/** Exit statuses, where csictl finds the stack (flags, environment, run/stack.json), and the stack file itself. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { DriverError } from "@csi/contracts";
import * as grpc from "@grpc/grpc-js";
import { CliError, EXIT, explain } from "./errors.js";
import { readStackFile, removeStackFile, type StackFile, stackFilePath, writeStackFile } from "./stack-file.js";
import { resolveTargets } from "./targets.js";

const grpcError = (code: number, details: string) => Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() });

describe("explain: one line and an exit status for anything thrown", () => {
  test("CSI errors as CODE: message; UNAVAILABLE and DEADLINE_EXCEEDED are unreachable (3)", () => {
    assert.deepEqual(explain(grpcError(grpc.status.NOT_FOUND, "volume x does not exist")), {
      exitCode: EXIT.failed,
      message: "NOT_FOUND: volume x does not exist",
    });
    assert.deepEqual(explain(grpcError(grpc.status.UNAVAILABLE, "no journal")), { exitCode: EXIT.unreachable, message: "UNAVAILABLE: no journal" });
    assert.equal(explain(grpcError(grpc.status.DEADLINE_EXCEEDED, "late")).exitCode, EXIT.unreachable);
    assert.deepEqual(explain(new DriverError("FailedPrecondition", "claimed")), { exitCode: EXIT.failed, message: "FAILED_PRECONDITION: claimed" });
    assert.equal(explain(new DriverError("Unavailable", "x")).exitCode, EXIT.unreachable);
  });
  test("our own errors as they are; anything else is an internal error on one line", () => {
    assert.deepEqual(explain(new CliError(EXIT.usage, "bad")), { exitCode: EXIT.usage, message: "bad" });
    const e = explain(new TypeError("x is undefined\n    at somewhere"));
    assert.equal(e.exitCode, EXIT.failed);
    assert.match(e.message, /^internal error: x is undefined \(CSICTL_DEBUG=1 shows the stack\)$/);
  });
});

describe("where the stack is", () => {
  const stack: StackFile = {
    pid: process.pid,
    startedAt: "2026-01-01T00:00:00.000Z",
    controllerEndpoint: "unix:///run/c.sock",
    nodeEndpoint: "unix:///run/n.sock",
    nodeId: "n1",
    natsUrl: "nats://127.0.0.1:4222",
    redisUrl: "redis://127.0.0.1:6379",
    clustersFile: "/run/clusters.json",
    dataDir: "/data",
  };
  const found = { found: true as const, stack, file: "/run/stack.json" };
  const missing = { found: false as const, file: "/run/stack.json", why: "no /run/stack.json" };

  test("flags, then the services' environment, then the stack file", () => {
    assert.deepEqual(resolveTargets({}, {}, found, "/cwd"), {
      natsUrl: stack.natsUrl,
      redisUrl: stack.redisUrl,
      controllerEndpoint: stack.controllerEndpoint,
      nodeEndpoint: stack.nodeEndpoint,
      clustersFile: stack.clustersFile,
      dataDir: "/data",
    });
    const t = resolveTargets({ nats: "nats://flag:1" }, { NATS_URL: "nats://env:1", REDIS_URL: "redis://env:1", CSI_ENDPOINT: "" }, found, "/cwd");
    assert.equal(t.natsUrl, "nats://flag:1");
    assert.equal(t.redisUrl, "redis://env:1");
    assert.equal(t.controllerEndpoint, stack.controllerEndpoint, "an empty variable is no setting");
  });
  test("without a stack file: only what is given, and why there is no stack", () => {
    assert.deepEqual(resolveTargets({ endpoint: "tcp://h:1" }, {}, missing, "/cwd"), {
      controllerEndpoint: "tcp://h:1",
      dataDir: "/cwd",
      noStack: "no /run/stack.json",
    });
  });

  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });
  const dir = async () => {
    const d = await mkdtemp(path.join(os.tmpdir(), "csictl-stackfile-"));
    dirs.push(d);
    return d;
  };

  test("written and read back; removed only by the process that wrote it", async () => {
    const d = await dir();
    assert.equal(readStackFile(stackFilePath(d)).found, false);
    writeStackFile(d, stack);
    assert.deepEqual(readStackFile(stackFilePath(d)), { found: true, stack, file: stackFilePath(d) });
    removeStackFile(d, process.pid + 1);
    assert.ok(existsSync(stackFilePath(d)), "another process's stack file stays");
    removeStackFile(d);
    assert.ok(!existsSync(stackFilePath(d)));
  });
  test("a stack file whose process is gone (npm start was killed) is no stack", async () => {
    const d = await dir();
    const gone = spawn("true");
    await new Promise((r) => gone.once("exit", r));
    writeStackFile(d, { ...stack, pid: gone.pid as number });
    const r = readStackFile(stackFilePath(d));
    assert.equal(r.found, false);
    assert.match(r.found ? "" : r.why, new RegExp(`left from a stack that is gone \\(pid ${gone.pid}\\)`));
  });
});
