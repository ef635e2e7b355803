/**
 * Issue 23, row 4: while the journal's Redis or its event log is down, CSI calls through the
 * controller's socket answer UNAVAILABLE at once — not after the journal client's 30 s
 * (DEADLINE_EXCEEDED "did not answer in time") — and they succeed again as soon as the server is
 * back (docs/operations.md, "When Redis or the event log is down"). Real processes throughout: a
 * redis-server SIGKILLed and restarted on the same port, a 3-node NATS cluster that loses its quorum.
 *
 * The bounds asserted are the issue's: UNAVAILABLE in under 3 s per call, OK within 3 s of Redis
 * listening again. Measured (2 shared cores under other helpers' load; the figures are printed as
 * diagnostics): the slowest refused call of a round 38–324 ms; the first OK 109 ms after the
 * restart returned (at most about 1.1 s: the journal's reconnect attempts are that far apart at
 * most, store/redis-link.ts). The margin (about 3× the worst possible figure) is for a busy
 * machine; before the change the calls took 30 s (Redis) and 5 s (the log), so the bound still
 * tells them apart.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { GrpcCode } from "@csi/contracts";
import { type CsiClient, csiClient } from "@csi/runtime";
import {
  type LocalServer,
  loadJournalFunctionsAt,
  readyz,
  readyzUntil,
  spawnService,
  startServer,
  startTestServers,
  type TestServers,
  tempDir,
  writeClustersFile,
} from "@csi/testkit";
import { startJetStreamCluster } from "../scripts/lib/ha-servers.js";

const MiB = 1024 * 1024;
const BOUND_MS = 3_000;
const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] as string[] } };

/** The call's gRPC code (0 for OK) and how long it took. */
async function timed(p: () => Promise<unknown>): Promise<{ code: number; ms: number; details: string }> {
  const started = performance.now();
  return p().then(
    () => ({ code: GrpcCode.OK, ms: performance.now() - started, details: "" }),
    (e: { code: number; details: string }) => ({ code: e.code, ms: performance.now() - started, details: e.details }),
  );
}

/** A journal and a controller of cluster `c1` on these servers; the controller's CSI client. */
async function startServices(dir: string, env: Record<string, string>) {
  const clustersFile = await writeClustersFile(dir, [{ clusterID: "c1", pools: ["default"] }]);
  const base = { ...env, CLUSTERS_FILE: clustersFile, DATA_DIR: dir };
  const journal = await spawnService("journal", { ...base, CLUSTER_ID: "c1" });
  const sock = `unix://${path.join(dir, "controller.sock")}`;
  const controller = await spawnService("controller", base, { args: ["--endpoint", sock] });
  return { journal, controller, ctrl: csiClient(sock, "Controller") };
}

/** Every kind of journal command a CO sends, each on its own: writes (create, delete, expand, snapshot) and reads (get, list). */
function everyKindOfCall(ctrl: CsiClient<"Controller">, volumeId: string, n: number): { name: string; write: boolean; call: () => Promise<unknown> }[] {
  const size = (mib: number) => ({ required_bytes: String(mib * MiB) });
  return [
    { name: "CreateVolume", write: true, call: () => ctrl.CreateVolume({ name: `ff-new-${n}`, volume_capabilities: [cap], capacity_range: size(1) }) },
    { name: "DeleteVolume", write: true, call: () => ctrl.DeleteVolume({ volume_id: volumeId }) },
    { name: "ControllerExpandVolume", write: true, call: () => ctrl.ControllerExpandVolume({ volume_id: volumeId, capacity_range: size(2) }) },
    { name: "CreateSnapshot", write: true, call: () => ctrl.CreateSnapshot({ name: `ff-snap-${n}`, source_volume_id: volumeId }) },
    { name: "ControllerGetVolume", write: false, call: () => ctrl.ControllerGetVolume({ volume_id: volumeId }) },
    { name: "ListVolumes", write: false, call: () => ctrl.ListVolumes({}) },
  ];
}

/**
 * Each call answers within the bound; the writes (and with `readsToo`, the reads) UNAVAILABLE,
 * saying why (`what`). Reads of the projection need no event log: with the log down they may answer.
 */
async function assertUnavailableFast(ctrl: CsiClient<"Controller">, volumeId: string, n: number, what: RegExp, readsToo: boolean): Promise<number> {
  let slowest = 0;
  for (const { name, write, call } of everyKindOfCall(ctrl, volumeId, n)) {
    const r = await timed(call);
    slowest = Math.max(slowest, r.ms);
    assert.ok(r.ms < BOUND_MS, `${name} answered ${r.code} after ${Math.round(r.ms)} ms: ${r.details}`);
    if (!write && !readsToo) continue;
    assert.equal(r.code, GrpcCode.UNAVAILABLE, `${name}: ${r.code} ${r.details}`);
    // ListVolumes fans out over the clusters and says so in its own words.
    if (name !== "ListVolumes") assert.match(r.details, what, name);
  }
  return slowest;
}

/** Until the journal answers a write itself, saying `what` (at most 60 tries, each bounded by the controller's own deadlines). */
async function journalRefuses(ctrl: CsiClient<"Controller">, what: RegExp): Promise<void> {
  let last = "";
  for (let i = 0; i < 60; i++) {
    const r = await timed(() => ctrl.CreateVolume({ name: `ff-probe-${i}`, volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } }));
    if (r.code === GrpcCode.UNAVAILABLE && what.test(r.details)) return;
    last = `${r.code} ${r.details}`;
  }
  assert.fail(`the journal never refused a write with ${what}: last answer ${last}`);
}

describe("Redis killed: every journal command is UNAVAILABLE at once, OK again within 3 s of Redis coming back", () => {
  let env: TestServers;
  let s: Awaited<ReturnType<typeof startServices>>;
  before(async () => {
    env = await startTestServers();
    s = await startServices(env.dir, { NATS_URL: env.nats.url, REDIS_URL: env.redis.url });
  });
  after(async () => {
    s?.ctrl.close();
    await Promise.all([s?.controller.stop(), s?.journal.stop()]);
    await env?.dispose();
  });

  test("SIGKILL redis-server, calls through the controller's socket, restart it on the same port", { timeout: 180_000 }, async (t) => {
    const made = await s.ctrl.CreateVolume({ name: "ff-before", volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } });
    const volumeId = made.volume?.volume_id as string;

    await env.redis.kill();
    try {
      await s.journal.untilLog((l) => l.includes("Redis connection lost"), "that its Redis connection is lost");
      // Twice over: the first round is no luck of a fresh outage (before the change, the first
      // call was refused after 2 s and every later one waited 30 s).
      for (const n of [1, 2])
        t.diagnostic(`round ${n}: slowest call ${Math.round(await assertUnavailableFast(s.ctrl, volumeId, n, /redis unavailable/, true))} ms`);
    } finally {
      await env.redis.restart();
    }
    const back = performance.now();
    await s.journal.untilLog((l) => l.includes("Redis connection back"), "that its Redis connection is back");
    const r = await timed(() => s.ctrl.CreateVolume({ name: "ff-after", volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } }));
    assert.equal(r.code, GrpcCode.OK, r.details);
    const ms = performance.now() - back;
    assert.ok(ms < BOUND_MS, `the first CreateVolume after Redis came back succeeded ${Math.round(ms)} ms after the restart`);
    t.diagnostic(`CreateVolume OK ${Math.round(ms)} ms after redis-server was restarted`);
    // What was refused left nothing behind: the volume made before is whole, the refused create made nothing.
    assert.equal((await s.ctrl.ControllerGetVolume({ volume_id: volumeId })).volume?.capacity_bytes, String(MiB));
    const names = (await s.ctrl.ListVolumes({})).entries.map((e) => e.volume?.volume_id);
    assert.equal(names.length, 2, "ff-before and ff-after only");
  });
});

describe("the event log's NATS cluster loses its quorum: UNAVAILABLE at once, not a JetStream timeout per call", () => {
  let dir: string;
  let nats: LocalServer[] = [];
  let redis: LocalServer;
  let s: Awaited<ReturnType<typeof startServices>>;
  before(async () => {
    dir = await tempDir();
    nats = await startJetStreamCluster(dir);
    redis = await startServer("redis", path.join(dir, "redis"));
    await loadJournalFunctionsAt(redis.url);
    s = await startServices(dir, { NATS_URL: nats.map((n) => n.url).join(","), REDIS_URL: redis.url, STREAM_REPLICAS: "3" });
  });
  after(async () => {
    s?.ctrl.close();
    await Promise.all([s?.controller.stop(), s?.journal.stop()]);
    await Promise.all([...nats.map((n) => n.stop()), redis?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true }); // the servers' data and the pool: nothing left in the temp dir
  });

  test("two of three nats-servers SIGKILLed: the journal knows (readyz names the log) and refuses at once; back: OK", { timeout: 300_000 }, async (t) => {
    const made = await s.ctrl.CreateVolume({ name: "ff-js-before", volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } });
    const volumeId = made.volume?.volume_id as string;

    const [a, b] = nats;
    await Promise.all([a?.kill(), b?.kill()]);
    try {
      // The journal's readiness probes the stream: it says so once it knows (the event it waits for),
      // once its NATS connection is back on the node left (it may have been on a killed one), as
      // the controller's is: else the journal is not reached at all (the controller's 2 s quiet bound).
      const down = await readyzUntil(
        s.journal.metricsUrl,
        (r) => r.body.checks.nats === "ok" && r.body.checks.log?.startsWith("event log unreachable") === true,
        60_000,
      );
      assert.equal(down.status, 503, JSON.stringify(down.body));
      assert.equal((await readyzUntil(s.controller.metricsUrl, (r) => r.body.checks.nats === "ok", 60_000)).body.checks.nats, "ok");
      // Readiness can say "nats ok" while a client is still moving to the node left (its status
      // events come after the fact): until the journal itself answers a call, a call may meet a
      // reconnect in progress (the controller's quiet bound, or a 5 s append into the lost
      // quorum before the journal's probe knew). The journal's own answer is the event waited for;
      // from then on every call must be refused at once.
      await journalRefuses(s.ctrl, /event log unavailable/);
      for (const n of [1, 2])
        t.diagnostic(`round ${n}: slowest call ${Math.round(await assertUnavailableFast(s.ctrl, volumeId, n, /event log unavailable/, false))} ms`);
    } catch (err) {
      // What each service saw, to tell a journal that never got the call from one that did not answer.
      for (const [name, p] of [
        ["journal", s.journal],
        ["controller", s.controller],
      ] as const)
        t.diagnostic(`${name}'s last log lines:\n${p.logs.slice(-25).join("\n")}`);
      throw err;
    } finally {
      await Promise.all([a?.restart(), b?.restart()]);
    }
    const up = await readyzUntil(s.journal.metricsUrl, (r) => r.status === 200, 120_000);
    assert.equal(up.status, 200, JSON.stringify(up.body));
    assert.equal((await readyz(s.journal.metricsUrl)).body.checks.log, "ok");
    const r = await timed(() => s.ctrl.CreateVolume({ name: "ff-js-after", volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } }));
    assert.equal(r.code, GrpcCode.OK, r.details);
  });
});
