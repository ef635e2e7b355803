/**
 * csictl never hangs (issue 37): when NATS accepts TCP but does not answer, every NATS command
 * exits with 3 within its --timeout plus 1 s (more on a loaded machine: SLACK_MS) — a frozen nats-server (SIGSTOP: the kernel still
 * accepts), a listener that never writes, a --timeout shorter than the handshake on a live server
 * — and a --timeout Node's timers cannot hold (above 2^31−1 ms) is refused as the options are
 * parsed (2). Before the fix each of these ran for minutes (nats.js kept the socket of its
 * timed-out connect open) or, past 2^31−1, said "cannot reach NATS" at once and never exited.
 *
 * The clock: from the listener's `connection` event where there is one; else csictl's run minus
 * the same command's run, started at the same moment, against a port that refuses at once (what
 * starting and ending costs on this machine now). Each test waits for the child's exit event; the outer bound only kills a
 * child that hangs, so that the failure is reported.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { rm } from "node:fs/promises";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import { CSICTL_BIN, freePort, ROOT, startTestServers, type TestServers, tempDir, withoutServerEnv } from "@csi/testkit";

const TIMEOUT_MS = 2000;
/**
 * What csictl may take past its --timeout: 1 s, or as long as a whole run against a refusing port
 * takes now where that is longer — two processes started together drift apart by about that much
 * on a loaded machine (load 12 on 2 cores: 3.1–3.4 s, on a different command each time). Both are
 * seconds; the hang this guards against ran for minutes.
 */
const SLACK_MS = 1000;
const slackFor = (baselineMs: number) => Math.max(SLACK_MS, baselineMs);
/** Only a child that hangs meets this: it is killed so that the test can fail. */
const HANG_GUARD_MS = 120_000;

let servers: TestServers;
let runDir = "";
before(async () => {
  servers = await startTestServers();
  runDir = await tempDir("csictl-hang-"); // no stack.json: only the servers given are used
});
after(async () => {
  await servers?.dispose();
  await rm(runDir, { recursive: true, force: true });
});

interface Exit {
  code: number | null;
  stderr: string;
  /** performance.now() at the exit event. */
  exitedAt: number;
  ms: number;
}

/** csictl with `args`, waited for until its exit event (killed only past HANG_GUARD_MS). */
async function run(args: string[]): Promise<Exit> {
  const started = performance.now();
  const child = spawn(process.execPath, [CSICTL_BIN, ...args], {
    cwd: ROOT,
    env: { ...withoutServerEnv(process.env), RUN_DIR: runDir },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  const guard = setTimeout(() => child.kill("SIGKILL"), HANG_GUARD_MS);
  const [code] = (await once(child, "exit")) as [number | null];
  clearTimeout(guard);
  const exitedAt = performance.now();
  return { code, stderr, exitedAt, ms: exitedAt - started };
}

/** The NATS commands, each with what it needs to get as far as connecting. */
const COMMANDS: string[][] = [
  ["history", "pvc-1"],
  ["nodes"],
  ["clusters"],
  ["verify"],
  ["gc"],
  ["replay", "--at", "1"],
  ["rebuild"],
  ["log", "purge-foreign"],
];

/** `args` against NATS at `natsUrl`: its exit, and what the same run costs against a port that refuses. */
async function againstNats(natsUrl: string, args: string[], timeout = String(TIMEOUT_MS)) {
  // Both at once: a load that slows one starting (another test file's stack) slows the other too.
  const [refused, exit] = await Promise.all([
    run(["--nats", `nats://127.0.0.1:${await freePort()}`, "--redis", servers.redis.url, ...args]),
    run(["--nats", natsUrl, "--redis", servers.redis.url, "--timeout", timeout, ...args]),
  ]);
  assert.equal(refused.code, 3, `refused ${args.join(" ")}: ${refused.stderr}`);
  return { exit, baselineMs: refused.ms };
}

describe("csictl exits within --timeout + 1 s when NATS accepts TCP but does not answer", () => {
  test("a listener that accepts and never writes", async (t) => {
    const silent = net.createServer(() => {});
    const sockets: net.Socket[] = [];
    let acceptedAt = 0;
    silent.on("connection", (s) => {
      acceptedAt ||= performance.now();
      sockets.push(s);
    });
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    t.after(() => {
      for (const s of sockets) s.destroy();
      silent.close();
    });
    const port = (silent.address() as net.AddressInfo).port;
    const r = await run(["--nats", `nats://127.0.0.1:${port}`, "--timeout", String(TIMEOUT_MS), "nodes"]);
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, new RegExp(`^csictl: cannot reach NATS at nats://127\\.0\\.0\\.1:${port}: no answer within ${TIMEOUT_MS} ms \\(--timeout\\)\n$`));
    assert.ok(acceptedAt > 0, "csictl connected");
    assert.ok(r.exitedAt - acceptedAt < TIMEOUT_MS + SLACK_MS, `exited ${Math.round(r.exitedAt - acceptedAt)} ms after connecting`);
  });

  test("a frozen nats-server (SIGSTOP): every NATS command", async (t) => {
    const pid = servers.nats.pid as number;
    process.kill(pid, "SIGSTOP");
    t.after(() => process.kill(pid, "SIGCONT"));
    for (const args of COMMANDS) {
      const { exit, baselineMs } = await againstNats(servers.nats.url, args);
      const name = args.join(" ");
      assert.equal(exit.code, 3, `${name}: ${exit.stderr}`);
      assert.match(exit.stderr, /cannot reach NATS at .*: no answer within 2000 ms \(--timeout\)/, name);
      const over = exit.ms - baselineMs;
      assert.ok(over < TIMEOUT_MS + slackFor(baselineMs), `${name}: ${Math.round(exit.ms)} ms, ${Math.round(over)} ms more than a refused connect`);
    }
  });

  test("a --timeout shorter than the handshake, on a live nats-server", async () => {
    const { exit, baselineMs } = await againstNats(servers.nats.url, ["nodes"], "1");
    assert.equal(exit.code, 3, exit.stderr);
    assert.match(exit.stderr, /cannot reach NATS at .*: no answer within 1 ms \(--timeout\)/);
    assert.ok(exit.ms - baselineMs < 1 + slackFor(baselineMs), `${Math.round(exit.ms)} ms, ${Math.round(exit.ms - baselineMs)} ms more than a refused connect`);
  });

  test("a --timeout above 2^31−1 ms is refused as the options are parsed (exit 2), before anything is sent", async () => {
    for (const timeout of ["1e12", "2147483648", "0", "1.5"]) {
      const { exit, baselineMs } = await againstNats(servers.nats.url, ["nodes"], timeout);
      assert.equal(exit.code, 2, `--timeout ${timeout}: ${exit.stderr}`);
      assert.equal(exit.stderr, `csictl: --timeout must be a positive number of milliseconds up to 2147483647 (about 24.8 days), got "${timeout}"\n`);
      assert.ok(exit.ms - baselineMs < slackFor(baselineMs), `--timeout ${timeout}: ${Math.round(exit.ms)} ms`);
    }
  });
});

describe("clusters with no journal running (issue 37)", () => {
  test("says plainly that no journal of the cluster answers, exit 3 as every command that asks one", async () => {
    const r = await run(["--nats", servers.nats.url, "--redis", servers.redis.url, "clusters"]);
    assert.equal(r.code, 3, r.stderr);
    assert.equal(r.stderr, "no journal of cluster local answers: is one running?\n");
  });
});
