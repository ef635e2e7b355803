/**
 * The CSI gRPC server's graceful stop on a real unix socket: a call in flight when the drain
 * starts gets its reply, a new call is refused UNAVAILABLE (the code a CO retries), the socket
 * is removed; a call still running at the grace bound is cut and the drain returns.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { GrpcCode } from "@csi/contracts";
import { pino } from "pino";
import { drainAll } from "../drain.js";
import { csiClient } from "./client.js";
import { csiIdentity, type RunningServer, startCsiServer } from "./server.js";

const quiet = pino({ level: "silent" });
let dir: string;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "csi-drain-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A server whose Probe waits for `gate` (the call in flight the test controls), and a client of it. */
async function serverWithSlowProbe(name: string, gate: Promise<void>) {
  const socket = path.join(dir, `${name}.sock`);
  const identity = csiIdentity({ version: "t", ready: async () => true });
  const server: RunningServer = await startCsiServer({
    endpoint: `unix://${socket}`,
    log: quiet,
    services: {
      Identity: {
        ...identity,
        Probe: async () => {
          await gate;
          return { ready: { value: true } };
        },
      },
    },
  });
  const client = csiClient(`unix://${socket}`, "Identity");
  return { socket, server, client };
}

/** Resolves once the server counts `n` calls in flight (bounded). */
async function inFlight(server: RunningServer, n: number): Promise<void> {
  for (let i = 0; i < 500 && server.inFlight() < n; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(server.inFlight(), n, "calls in flight");
}

describe("CSI gRPC server drain", () => {
  it("given a call in flight, when drained, then it gets its reply, a new call is refused UNAVAILABLE and the socket is removed", async () => {
    let release: () => void = () => {};
    const { socket, server, client } = await serverWithSlowProbe(
      "finish",
      new Promise<void>((r) => {
        release = r;
      }),
    );
    try {
      const slow = client.Probe({});
      await inFlight(server, 1);
      const draining = drainAll(quiet, 30_000, [server]);
      const refused = await client.GetPluginInfo({}).then(
        () => undefined,
        (e: { code?: number }) => e.code,
      );
      assert.equal(refused, GrpcCode.UNAVAILABLE, "a call after the drain started is refused with a code a CO retries");
      release();
      assert.deepEqual(await slow, { ready: { value: true } }, "the call in flight got its reply");
      const report = await draining;
      assert.deepEqual(report.waitedFor, { "gRPC calls": 1 });
      assert.deepEqual(report.cut, {});
      assert.equal(existsSync(socket), false, "socket removed");
    } finally {
      client.close();
    }
  });

  it("given a call that outlives the grace period, when drained, then it is cut (the caller gets an error) and the drain returns", async () => {
    const { socket, server, client } = await serverWithSlowProbe("cut", new Promise<void>(() => {}));
    try {
      const stuck = client.Probe({}).then(
        () => "answered",
        (e: { code?: number }) => e.code,
      );
      await inFlight(server, 1);
      const report = await drainAll(quiet, 200, [server]);
      assert.deepEqual(report.cut, { "gRPC calls": 1 });
      const code = await stuck;
      assert.ok(code === GrpcCode.UNAVAILABLE || code === GrpcCode.CANCELLED, `the cut call failed with a retryable code, got ${code}`);
      for (let i = 0; i < 100 && existsSync(socket); i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(existsSync(socket), false, "socket removed");
    } finally {
      client.close();
    }
  });
});
