/**
 * End to end: the `npm start` stack (scripts/start.ts) comes up, both CSI sockets answer
 * Identity calls over real gRPC, unimplemented methods are UNIMPLEMENTED, and SIGTERM stops
 * everything cleanly (exit 0, sockets removed). Once with embedded servers, once with
 * NATS_URL/REDIS_URL pointing at servers of our own. A second `npm start` on the same
 * directories is refused and touches nothing; the directory lock behind that, on its own. And the
 * replicated stack (`HA=1`, as `npm start -- --ha`): up, used, and down with nothing left running.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { PLUGIN_NAME_RE } from "@csi/contracts";
import { csiClient } from "@csi/runtime";
import { CSICTL_BIN, cleanupsOf, ROOT, runStack, spawnStart, startTestServers, type TestServers, tempDir, withoutServerEnv } from "@csi/testkit";
import { LOCK_FILE, processStart, StackInUse, StackLock } from "../scripts/lib/stack-lock.js";

async function checkIdentity(socket: string) {
  const id = csiClient(`unix://${socket}`, "Identity");
  try {
    const info = await id.GetPluginInfo({});
    assert.match(info.name, PLUGIN_NAME_RE);
    assert.ok(info.name.length <= 63);
    assert.match(info.vendor_version, /^\d+\.\d+\.\d+/);
    const probe = await id.Probe({});
    assert.equal(probe.ready?.value, true);
    return info;
  } finally {
    id.close();
  }
}

/** What any CSI client can do against the stack: create, snapshot, clone, expand, publish, delete. */
async function lifecycle(ctrlSocket: string, runDir: string) {
  const c = csiClient(`unix://${ctrlSocket}`, "Controller");
  try {
    const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };
    const v = (await c.CreateVolume({ name: "stack-vol", volume_capabilities: [cap], capacity_range: { required_bytes: String(8 * 1024 * 1024) } })).volume!;
    const snap = (await c.CreateSnapshot({ name: "stack-snap", source_volume_id: v.volume_id })).snapshot!;
    const restored = (
      await c.CreateVolume({ name: "stack-restored", volume_capabilities: [cap], volume_content_source: { snapshot: { snapshot_id: snap.snapshot_id } } })
    ).volume!;
    const cloned = (await c.CreateVolume({ name: "stack-clone", volume_capabilities: [cap], volume_content_source: { volume: { volume_id: v.volume_id } } }))
      .volume!;
    const grown = await c.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { required_bytes: String(16 * 1024 * 1024) } });
    assert.equal(grown.capacity_bytes, String(16 * 1024 * 1024));
    const nodeId = (await csiNodeInfo(runDir)).node_id;
    const pub = await c.ControllerPublishVolume({ volume_id: v.volume_id, node_id: nodeId, volume_capability: cap });
    assert.ok(pub.publish_context.imageName);
    await c.ControllerUnpublishVolume({ volume_id: v.volume_id, node_id: nodeId });
    // Our CLI sees the same volumes: it finds the stack through <runDir>/stack.json.
    const listed = JSON.parse(
      execFileSync(process.execPath, [CSICTL_BIN, "call", "Controller.ListVolumes"], {
        cwd: ROOT,
        env: { ...withoutServerEnv(process.env), RUN_DIR: runDir },
        encoding: "utf8",
      }),
    );
    assert.equal(listed.entries.length, 3);
    await c.DeleteSnapshot({ snapshot_id: snap.snapshot_id });
    for (const id of [v.volume_id, restored.volume_id, cloned.volume_id]) await c.DeleteVolume({ volume_id: id });
    assert.equal((await c.ListVolumes({})).entries.length, 0);
  } finally {
    c.close();
  }
}

async function csiNodeInfo(runDir: string) {
  const n = csiClient(`unix://${path.join(runDir, "csi-node.sock")}`, "Node");
  try {
    return await n.NodeGetInfo({});
  } finally {
    n.close();
  }
}

async function exercise(cleanups: (() => Promise<void>)[], extraEnv: Record<string, string>) {
  const stack = await runStack(cleanups, extraEnv);
  assert.equal(/started embedded nats-server/.test(stack.output()), !extraEnv.NATS_URL);
  const ctrl = path.join(stack.runDir, "csi-controller.sock");
  const node = path.join(stack.runDir, "csi-node.sock");
  const written = JSON.parse(await readFile(path.join(stack.runDir, "stack.json"), "utf8"));
  assert.equal(written.controllerEndpoint, `unix://${ctrl}`);
  assert.equal(written.pid, stack.child.pid);
  const a = await checkIdentity(ctrl);
  const b = await checkIdentity(node);
  assert.equal(a.name, b.name, "one plugin name for both endpoints");
  await lifecycle(ctrl, stack.runDir);
  stack.child.kill("SIGTERM");
  assert.equal(await stack.exited, 0, stack.output());
  assert.ok(!existsSync(ctrl) && !existsSync(node), "sockets removed on stop");
  assert.ok(!existsSync(path.join(stack.runDir, "stack.json")), "stack.json removed on stop");
  assert.match(stack.output(), /"msg":"stopped"/);
}

test("npm start's stack with embedded NATS and Redis: Identity on both sockets, clean stop", async (t) => {
  await exercise(cleanupsOf(t), {});
});

test("npm start's stack against given NATS_URL / REDIS_URL", async (t) => {
  const cleanups = cleanupsOf(t);
  const servers: TestServers = await startTestServers();
  cleanups.push(() => servers.dispose());
  await exercise(cleanups, { NATS_URL: servers.nats.url, REDIS_URL: servers.redis.url });
  assert.ok(servers.nats.running && servers.redis.running, "external servers are left running");
});

test("npm start with HA=1: a 3-node NATS cluster, Redis behind 3 sentinels, 2 journals; used through CSI; SIGTERM leaves no process", async (t) => {
  const cleanups = cleanupsOf(t);
  const stack = await runStack(cleanups, { HA: "1", LOG_LEVEL: "warn" }, 300_000);
  assert.match(stack.output(), /started embedded replicated servers/);
  assert.doesNotMatch(stack.output(), /started embedded (nats|redis)-server/, "no single servers");
  const written = JSON.parse(await readFile(path.join(stack.runDir, "stack.json"), "utf8"));
  assert.equal(written.natsUrl.split(",").length, 3, "three NATS client URLs");
  assert.equal(written.redisSentinels.split(",").length, 3, "three sentinels");
  assert.equal(written.redisMasterName, "csi");
  const lock = JSON.parse(await readFile(path.join(stack.dir, "data", LOCK_FILE), "utf8")) as { procs: { role: string; pid: number }[] };
  const roles = lock.procs.map((p) => p.role).sort();
  for (const role of [
    "nats-n1",
    "nats-n2",
    "nats-n3",
    "redis-1",
    "redis-2",
    "sentinel-1",
    "sentinel-2",
    "sentinel-3",
    "journal-1",
    "journal-2",
    "controller",
    "node-agent",
  ])
    assert.ok(roles.includes(role), `${role} in the stack lock (${roles.join(", ")})`);
  await lifecycle(path.join(stack.runDir, "csi-controller.sock"), stack.runDir);
  stack.child.kill("SIGTERM");
  assert.equal(await stack.exited, 0, stack.output());
  const alive = lock.procs.filter((p) => p.pid !== stack.child.pid && isAlive(p.pid));
  assert.deepEqual(alive, [], "every process of the stack stopped");
});

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test("a second npm start on the same data directory is refused: exit 1, a clear message, the running stack untouched", async (t) => {
  const cleanups = cleanupsOf(t);
  const first = await runStack(cleanups, {});
  const sockets = ["csi-controller.sock", "csi-node.sock"].map((f) => path.join(first.runDir, f));
  const inodes = () => sockets.map((f) => statSync(f).ino);
  const before = inodes();
  const lockFile = path.join(first.dir, "data", LOCK_FILE);
  const lockBefore = await readFile(lockFile, "utf8").catch(() => "none");

  const second = spawnStart(first.dir, {});
  let out = "";
  second.child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  second.child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  // Should it start after all (the bug), SIGTERM stops it with its servers (a SIGKILL would orphan them).
  const late = setTimeout(() => second.child.kill("SIGTERM"), 30_000);
  const code = await second.exited;
  clearTimeout(late);
  assert.equal(code, 1, out);
  assert.match(out, /is in use by another stack: npm start \(pid \d+\)/);
  assert.doesNotMatch(out, /started embedded|csi stack ready/, "started nothing");

  assert.deepEqual(inodes(), before, "the first stack's sockets are its own still");
  assert.equal(await readFile(lockFile, "utf8"), lockBefore, "the lock is the first stack's still");
  await checkIdentity(sockets[0] as string);
  assert.equal(first.child.exitCode, null, "the first stack runs on");
});

test("the stack lock: held while any of its processes runs, taken over when none does, even on a reused pid", async (t) => {
  const dir = await tempDir("csi-stack-lock-");
  const sleeper = spawn("sleep", ["60"], { stdio: "ignore" });
  t.after(async () => {
    sleeper.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
  });
  const gone = spawn("true");
  await new Promise((r) => gone.once("exit", r));
  const lockFile = path.join(dir, LOCK_FILE);
  const sleeperPid = sleeper.pid as number;
  const stale = (procs: object[]) => writeFile(lockFile, JSON.stringify({ since: "then", procs }));

  // Its npm start was SIGKILLed, but a server it started still runs on the data.
  await stale([
    { role: "npm start", pid: gone.pid, start: "1" },
    { role: "nats-server", pid: sleeperPid, start: processStart(sleeperPid) },
  ]);
  await assert.rejects(StackLock.take([dir]), (e: unknown) => e instanceof StackInUse && e.message.includes(`nats-server (pid ${sleeperPid})`));
  assert.match(await readFile(lockFile, "utf8"), /"then"/, "left as it was");

  // None runs (the pid of the last one now belongs to someone else: another start time).
  await stale([
    { role: "npm start", pid: gone.pid, start: "1" },
    { role: "nats-server", pid: sleeperPid, start: "1" },
  ]);
  const mine = await StackLock.take([dir]);
  const content = JSON.parse(await readFile(lockFile, "utf8")) as { procs: { pid: number }[] };
  assert.deepEqual(
    content.procs.map((p) => p.pid),
    [process.pid],
    "taken over",
  );
  await assert.rejects(StackLock.take([dir]), StackInUse, "held by this live process now");
  await mine.add("redis-server", sleeperPid);
  await mine.release();
  assert.equal(existsSync(lockFile), false, "released");
});

test("the stack lock: services started at once are all recorded; a restarted one replaces its stopped process", async (t) => {
  const dir = await tempDir("csi-stack-lock-");
  const sleepers = [0, 1, 2].map(() => spawn("sleep", ["60"], { stdio: "ignore" }));
  t.after(async () => {
    for (const s of sleepers) s.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
  });
  const lockFile = path.join(dir, LOCK_FILE);
  const recorded = async () =>
    (JSON.parse(await readFile(lockFile, "utf8")) as { procs: { role: string; pid: number }[] }).procs.map((p) => `${p.role}:${p.pid}`);
  const lock = await StackLock.take([dir]);
  // Three journal replicas start concurrently (the chaos stack does): no write may trip over another.
  await Promise.all(sleepers.map((s, i) => lock.add(`journal-${i + 1}`, s.pid)));
  assert.deepEqual((await recorded()).sort(), [`npm start:${process.pid}`, ...sleepers.map((s, i) => `journal-${i + 1}:${s.pid}`)].sort());
  const first = sleepers[0] as ChildProcess;
  first.kill("SIGKILL");
  await new Promise((r) => first.once("exit", r));
  const again = spawn("sleep", ["60"], { stdio: "ignore" });
  sleepers.push(again);
  await lock.add("journal-1", again.pid);
  assert.deepEqual(
    (await recorded()).filter((r) => r.startsWith("journal-1:")),
    [`journal-1:${again.pid}`],
    "the stopped process is forgotten",
  );
  await lock.release();
});

test("LOG_FORMAT=pretty npm start: its own lines, csi stack ready included, are pretty as the services' are", async (t) => {
  const dir = await tempDir("csi-pretty-");
  const started = spawnStart(dir, { LOG_FORMAT: "pretty" });
  t.after(async () => {
    if (started.child.exitCode === null) started.child.kill("SIGTERM");
    await started.exited;
    await rm(dir, { recursive: true, force: true });
  });
  let out = "";
  await new Promise<void>((resolve, reject) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      if (/\(start\) csi stack ready/.test(out)) resolve();
    };
    started.child.stdout.on("data", onData);
    started.child.stderr.on("data", onData);
    started.exited.then((c) => reject(new Error(`npm start exited ${c}:\n${out}`)));
  });
  const lines = out.split("\n").filter(Boolean);
  assert.deepEqual(
    lines.filter((l) => l.startsWith("{")),
    [],
    "no JSON line",
  );
  assert.match(out, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \(start\) started embedded nats-server /m);
  assert.match(out, /INFO: \(journal\) /m, "the services' lines too");
  started.child.kill("SIGTERM");
  assert.equal(await started.exited, 0);
  assert.match(out, /\(start\) stopped/);
});
