/**
 * Metrics, health and readiness (docs/operations.md, "Metrics and health") on real servers and the
 * real service processes:
 *
 *  - a create / publish / stage / publish / unpublish / unstage / unpublish / delete workload
 *    (plus a refused call, a busy lock, a heal after a crash) moves the named series of the
 *    controller, the journal and the node-agent, with bounded labels (never a volume id or name);
 *    each of them says (nodejs_version_info) it runs on the Node the tests run on;
 *  - the journal's /readyz goes 503 naming "redis" when its Redis stops, and 200 again when it is
 *    back; its READY_FILE is removed when it stops;
 *  - `LOG_LEVEL=warn npm start` becomes ready (services are waited for through their READY_FILE,
 *    not a log line), and run/stack.json lists each service's metrics URL.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { readStackFile, stackFilePath } from "@csi/cli/stack-file";
import { keysFor } from "@csi/journal";
import { type CsiClient, csiClient } from "@csi/runtime";
import {
  blockCap,
  CLUSTER,
  cleanupsOf,
  codeOf,
  findPromtool,
  has,
  loopsUnder,
  MiB,
  NodeStack,
  parseMetrics,
  promtoolCheckMetrics,
  ROOT,
  readyz,
  readyzUntil,
  registeredNames,
  runStack,
  type Sample,
  type ServiceProcess,
  sampleValue,
  scrape,
  scrapeText,
  spawnJournal,
  spawnService,
  startTestServers,
  type TestServers,
  whyNoDevices,
  writeClustersFile,
} from "@csi/testkit";
import { Redis } from "ioredis";

const ABORTED = 10;
const NOT_FOUND = 5;
const FAILED_PRECONDITION = 9;
const INVALID_ARGUMENT = 3;

/** How much each sample moved between two scrapes (by `name{labels}`). */
const delta =
  (before: Sample[], after: Sample[]) =>
  (name: string, labels: Record<string, string> = {}) =>
    sampleValue(after, name, labels) - sampleValue(before, name, labels);

/** No label of any csi_ series carries one of `secrets` (volume ids, uuids, names, paths). */
function assertBoundedLabels(samples: Sample[], secrets: string[]): void {
  for (const s of samples.filter((x) => x.name.startsWith("csi_"))) {
    for (const [k, v] of Object.entries(s.labels)) {
      for (const bad of secrets) assert.ok(!v.includes(bad), `${s.name} label ${k}="${v}" carries ${bad}`);
    }
  }
}

describe("metrics of a create/publish/stage workload on the real services", { skip: whyNoDevices() }, () => {
  let s: NodeStack;
  before(async () => {
    s = await NodeStack.start();
  });
  after(async () => {
    await s?.stop();
  });

  test("the controller's, journal's and node-agent's series move with the workload, with bounded labels", async () => {
    const urls = s.metricsUrls();
    const [c0, j0, n0] = await Promise.all([scrape(urls.controller), scrape(urls.journal), scrape(urls.agent)]);

    // The workload: a block volume through its whole life, one call refused on the node, one busy lock.
    const v = await s.createAndPublish("pvc-metrics-life", blockCap(), 8 * MiB);
    const staging = s.kubelet("plugins", "staging", v.uuid);
    const target = s.kubelet("pods", "metrics-pod", "dev");
    const publish = () =>
      s.node.NodePublishVolume({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: blockCap(), publish_context: v.ctx });
    assert.equal(await codeOf(publish()), FAILED_PRECONDITION, "publish before stage");
    assert.equal(await codeOf(s.node.NodeStageVolume({ volume_id: "", staging_target_path: staging, volume_capability: blockCap() })), INVALID_ARGUMENT);
    await s.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
    await publish();
    await s.node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    await s.ctrl.DeleteVolume({ volume_id: v.id });
    // Another operation holds the request name's lock: the create waits LOCK_WAIT_MS and is ABORTED.
    const redis = new Redis(s.env.redis.url);
    const busyName = "pvc-metrics-busy";
    const lock = keysFor(CLUSTER, "default").nameLock("volume", busyName);
    try {
      await redis.set(lock, "someone-else", "PX", 30_000);
      const cap = blockCap();
      const busy = codeOf(s.ctrl.CreateVolume({ name: busyName, volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } }));
      // While it waits for the lock, the journal counts it in flight.
      let inFlight = 0;
      for (const until = Date.now() + 2_000; inFlight === 0 && Date.now() < until; )
        inFlight = sampleValue(await scrape(urls.journal), "csi_journal_commands_in_flight", { command: "volume.create" });
      assert.equal(inFlight, 1, "the waiting create is in flight");
      assert.equal(await busy, ABORTED);
    } finally {
      await redis.del(lock);
      redis.disconnect();
    }
    await s.deviceReports(v.uuid, (r) => r.some((x) => x.state === "detached")); // the reports reached the journal

    const [c1, j1, n1] = await Promise.all([scrape(urls.controller), scrape(urls.journal), scrape(urls.agent)]);
    const ctrl = delta(c0, c1);
    const rpc = (service: string, method: string, code: string) => ({ service, method, code });
    for (const m of ["CreateVolume", "ControllerPublishVolume", "ControllerUnpublishVolume", "DeleteVolume"]) {
      assert.equal(ctrl("csi_grpc_server_handled_total", rpc("Controller", m, "OK")), 1, `controller ${m} OK`);
      assert.equal(ctrl("csi_grpc_server_handling_seconds_count", rpc("Controller", m, "OK")), 1, `controller ${m} latency observed`);
    }
    assert.equal(ctrl("csi_grpc_server_handled_total", rpc("Controller", "CreateVolume", "ABORTED")), 1);
    assert.equal(sampleValue(c1, "csi_nats_connected"), 1);

    const journal = delta(j0, j1);
    assert.equal(journal("csi_journal_command_seconds_count", { command: "volume.create", outcome: "ok" }), 1);
    assert.equal(journal("csi_journal_command_seconds_count", { command: "volume.create", outcome: "Aborted" }), 1);
    assert.equal(journal("csi_journal_command_seconds_count", { command: "volume.delete", outcome: "ok" }), 1);
    assert.equal(journal("csi_journal_aborted_total", { command: "volume.create" }), 1);
    assert.equal(sampleValue(j1, "csi_journal_commands_in_flight", { command: "volume.create" }), 0, "answered: no longer in flight");
    assert.equal(journal("csi_journal_lock_wait_seconds_count", { outcome: "busy" }), 1);
    assert.ok(journal("csi_journal_lock_wait_seconds_sum", { outcome: "busy" }) >= 2.5, "the busy wait lasted about LOCK_WAIT_MS (3 s)");
    assert.ok(journal("csi_journal_lock_wait_seconds_count", { outcome: "acquired" }) >= 4, "create, publish, unpublish, delete took their locks");
    for (const type of ["NameReserved", "VolumeReserved", "VolumeCreated", "VolumeClaimed", "VolumeUnclaimed", "VolumeDeleted", "NameReleased"]) {
      assert.equal(journal("csi_journal_events_appended_total", { type }), 1, `one ${type} appended`);
    }
    assert.ok(journal("csi_journal_events_appended_total", { type: "DeviceStateReported" }) >= 6, "the node's reports were appended");
    assert.ok(has(j1, "csi_journal_projection_lag_events", { cluster: CLUSTER }), "projection lag of the cluster");
    assert.ok(sampleValue(j1, "csi_journal_projection_lag_events", { cluster: CLUSTER }) >= 0);
    assert.equal(sampleValue(j1, "csi_redis_connected"), 1);
    assert.equal(sampleValue(j1, "csi_nats_connected"), 1);

    const node = delta(n0, n1);
    for (const m of ["NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]) {
      assert.equal(node("csi_grpc_server_handled_total", rpc("Node", m, "OK")), 1, `node ${m} OK`);
    }
    assert.equal(node("csi_grpc_server_handled_total", rpc("Node", "NodePublishVolume", "FAILED_PRECONDITION")), 1);
    assert.equal(node("csi_grpc_server_handled_total", rpc("Node", "NodeStageVolume", "INVALID_ARGUMENT")), 1);
    for (const operation of ["stage", "publish", "unpublish", "unstage"]) {
      assert.equal(node("csi_node_operations_total", { operation, outcome: "ok" }), 1, `${operation} ok`);
    }
    assert.equal(node("csi_node_operations_total", { operation: "publish", outcome: "FailedPrecondition" }), 1, "the refused publish is a failure");
    for (const step of ["attached", "staged", "published", "unpublished", "unstaged", "detached"]) {
      assert.equal(node("csi_node_device_steps_total", { step }), 1, `one ${step} step`);
    }
    assert.equal(sampleValue(n1, "csi_nats_connected"), 1);
    assert.ok(has(n1, "process_cpu_user_seconds_total") && has(n1, "nodejs_eventloop_lag_seconds"), "process default metrics");
    // Each service runs on the Node the tests run on (the testkit spawns them with process.execPath).
    for (const [svc, samples] of [
      ["controller", c1],
      ["journal", j1],
      ["node-agent", n1],
    ] as const) {
      const seen = samples.find((x) => x.name === "nodejs_version_info")?.labels.version;
      assert.equal(seen, process.version, `${svc} runs on Node ${seen}, the tests on ${process.version}`);
    }

    assertBoundedLabels([...c1, ...j1, ...n1], [v.id, v.uuid, "pvc-metrics", staging, target]);
  });

  test("the healer's actions are counted by kind and outcome", async () => {
    const v = await s.createAndPublish("pvc-metrics-heal", blockCap(), 8 * MiB);
    const staging = s.kubelet("plugins", "staging", v.uuid);
    await s.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
    // SIGKILL; behind its back the volume's loop device goes: the healer attaches it again.
    await s.restartAgent({
      kill: true,
      meanwhile: async () => {
        const dev = (await loopsUnder(s.root)).find((l) => l.backingFile === v.ctx.imagePath)?.device as string;
        execFileSync("losetup", ["-d", dev]);
      },
    });
    const n = await scrape(s.metricsUrls().agent);
    assert.equal(sampleValue(n, "csi_node_heal_actions_total", { kind: "attach", outcome: "ok" }), 1);
    assert.equal(sampleValue(n, "csi_node_device_steps_total", { step: "healed" }), 1);
    assert.equal(sampleValue(n, "csi_node_device_steps_total", { step: "attached" }), 1);
    assertBoundedLabels(n, [v.id, v.uuid, "pvc-metrics", staging]);
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    await s.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: s.nodeId });
    await s.ctrl.DeleteVolume({ volume_id: v.id });
  });

  test("the Grafana dashboard (deploy/grafana) uses exactly the series the services register", async () => {
    const urls = s.metricsUrls();
    const texts = await Promise.all([scrapeText(urls.controller), scrapeText(urls.journal), scrapeText(urls.agent)]);
    const registered = new Set(texts.flatMap((t) => [...registeredNames(t)]));
    const dashboard = JSON.parse(readFileSync(path.join(ROOT, "deploy/grafana/csi-driver.json"), "utf8")) as { panels: { targets?: { expr: string }[] }[] };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    assert.ok(exprs.length > 10);
    const used = new Set<string>();
    for (const expr of exprs) {
      const names = expr.match(/\b(?:csi|process|nodejs)_[a-zA-Z0-9_]+\b/g) ?? [];
      assert.ok(names.length > 0, `no series in ${expr}`);
      for (const n of names) {
        assert.ok(registered.has(n), `${n} (in ${expr}) is not a series any service registers`);
        used.add(n.replace(/_(bucket|sum|count)$/, ""));
      }
    }
    const ours = [...registered].filter((n) => n.startsWith("csi_") && !/_(bucket|sum|count)$/.test(n));
    for (const n of ours) assert.ok(used.has(n), `${n} is on no panel of the dashboard`);
  });

  test("each service is ready and says why: /readyz names its checks", async () => {
    const urls = s.metricsUrls();
    const expected = { journal: ["nats", "redis", "log", "commands"], controller: ["nats", "journals"], agent: ["nats", "registration", "socket"] } as const;
    for (const [svc, checks] of Object.entries(expected)) {
      const r = await readyz(urls[svc as keyof typeof urls]);
      assert.equal(r.status, 200, `${svc}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(Object.keys(r.body.checks).sort(), [...checks].sort(), svc);
      const health = await fetch(`${urls[svc as keyof typeof urls]}/healthz`);
      assert.equal(health.status, 200);
    }
  });
});

describe("the journal's readiness follows its Redis", () => {
  let env: TestServers;
  let journal: ServiceProcess;
  before(async () => {
    env = await startTestServers();
    const clustersFile = await writeClustersFile(env.dir, [{ clusterID: "r1", pools: ["default"] }]);
    journal = await spawnJournal({ natsUrl: env.nats.url, redisUrl: env.redis.url, clustersFile, cluster: "r1" }, { DATA_DIR: env.dir });
  });
  after(async () => {
    await journal?.stop();
    await env?.dispose();
  });

  test("Redis stopped: /readyz 503 naming redis; Redis back: 200 and one reconnect counted; stopped: the READY_FILE goes", async () => {
    const url = journal.metricsUrl;
    const ready = JSON.parse(readFileSync(journal.readyFile, "utf8"));
    assert.deepEqual(ready, { service: "journal", pid: journal.child.pid, metrics: url });
    assert.equal((await readyz(url)).status, 200);
    const before = await scrape(url);
    assert.equal(sampleValue(before, "csi_redis_connected"), 1);

    await env.redis.stop();
    try {
      const down = await readyzUntil(url, (r) => r.status === 503);
      assert.equal(down.status, 503);
      assert.equal(down.body.failing, "redis", JSON.stringify(down.body));
      assert.equal(down.body.checks.nats, "ok");
      assert.equal(sampleValue(await scrape(url), "csi_redis_connected"), 0);
      assert.equal((await fetch(`${url}/healthz`)).status, 200, "alive all the same");
    } finally {
      await env.redis.restart();
    }
    const back = await readyzUntil(url, (r) => r.status === 200, 30_000);
    assert.equal(back.status, 200, JSON.stringify(back.body));
    const after = await scrape(url);
    assert.equal(sampleValue(after, "csi_redis_connected"), 1);
    assert.equal(sampleValue(after, "csi_redis_reconnects_total") - sampleValue(before, "csi_redis_reconnects_total"), 1);

    await journal.stop();
    assert.equal(existsSync(journal.readyFile), false, "the READY_FILE is removed at exit");
  });
});

/** promtool, or why not; on CI (CI=true) a missing promtool fails the run instead of skipping the check. */
const promtool = findPromtool();
const promtoolSkip = "why" in promtool && process.env.CI !== "true" ? promtool.why : false;

describe("every service's /metrics passes promtool, says its build; logs name levels and codes", { skip: promtoolSkip }, () => {
  let env: TestServers;
  const procs: Record<"journal" | "controller" | "node-agent", ServiceProcess> = {} as never;
  let ctrl: CsiClient<"Controller">;
  before(async () => {
    env = await startTestServers();
    const clustersFile = await writeClustersFile(env.dir, [{ clusterID: "p1", pools: ["default"] }]);
    const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
    procs.journal = await spawnService("journal", { ...base, CLUSTER_ID: "p1" });
    procs["node-agent"] = await spawnService("node-agent", base, { args: ["--endpoint", `unix://${path.join(env.dir, "node.sock")}`, "--nodeid", "p-node"] });
    const sock = `unix://${path.join(env.dir, "controller.sock")}`;
    procs.controller = await spawnService("controller", base, { args: ["--endpoint", sock] });
    ctrl = csiClient(sock, "Controller");
  });
  after(async () => {
    ctrl?.close();
    await Promise.all(Object.values(procs).map((p) => p.stop()));
    await env?.dispose();
  });

  test("promtool check metrics passes on the journal's, the controller's and the node-agent's /metrics; csi_build_info of each", async () => {
    assert.ok("path" in promtool, "why" in promtool ? promtool.why : ""); // CI: promtool must be there (.ci/run installs it)
    // Every kind of series with samples: a call that succeeds and one refused (histograms, labels).
    const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] as string[] } };
    await ctrl.CreateVolume({ name: "pvc-promtool", volume_capabilities: [cap], capacity_range: { required_bytes: String(MiB) } });
    assert.equal(await codeOf(ctrl.ControllerGetVolume({ volume_id: "0001-0002-p1-0000000000000001-00000000-0000-4000-8000-000000000000" })), NOT_FOUND);
    for (const [service, p] of Object.entries(procs)) {
      const text = await scrapeText(p.metricsUrl);
      const checked = promtoolCheckMetrics(promtool.path, text);
      assert.equal(checked.status, 0, `${service}: promtool check metrics exited ${checked.status}:\n${checked.output}`);
      assert.equal(checked.output, "", service);
      const pkg = JSON.parse(readFileSync(path.join(ROOT, "services", service, "package.json"), "utf8")) as { version: string };
      const info = parseMetrics(text).filter((x) => x.name === "csi_build_info");
      assert.deepEqual(info, [{ name: "csi_build_info", labels: { service, version: pkg.version, node_version: process.version }, value: 1 }], service);
    }
    const journal = await scrape(procs.journal.metricsUrl);
    assert.ok(has(journal, "csi_journal_projection_lag_events", { cluster: "p1" }), "the lag gauge is named with its unit");
  });

  // Bounded: on a service that logs another way the awaited line never comes (a failure, not a hang).
  test("JSON log lines name their level; a refused call's line names its gRPC code (controller and journal)", { timeout: 60_000 }, async () => {
    assert.equal(await codeOf(ctrl.ControllerGetVolume({ volume_id: "0001-0002-p1-0000000000000001-00000000-0000-4000-8000-0000000000aa" })), NOT_FOUND);
    const refused = JSON.parse(await procs.controller.untilLog((l) => l.includes('"call refused"') && l.includes("NOT_FOUND"), "the refused call"));
    assert.equal(refused.level, "info");
    assert.equal(refused.code, "NOT_FOUND");
    assert.equal(refused.method, "Controller.ControllerGetVolume");
    const command = JSON.parse(await procs.journal.untilLog((l) => l.includes('"command refused"') && l.includes('"volume.get"'), "the refused command"));
    assert.equal(command.code, "NOT_FOUND");
    for (const p of Object.values(procs)) {
      const lines = p.logs.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { level: unknown });
      assert.ok(lines.length > 0);
      for (const l of lines) assert.match(String(l.level), /^(trace|debug|info|warn|error|fatal)$/, JSON.stringify(l));
    }
  });

  test("LOG_FORMAT=pretty: a service prints lines a person reads, not JSON", { timeout: 120_000 }, async () => {
    const sock = `unix://${path.join(env.dir, "controller-pretty.sock")}`;
    const base = { NATS_URL: env.nats.url, CLUSTERS_FILE: path.join(env.dir, "clusters.json"), DATA_DIR: env.dir };
    const pretty = await spawnService("controller", { ...base, LOG_FORMAT: "pretty" }, { args: ["--endpoint", sock] });
    const c = csiClient(sock, "Controller");
    try {
      await pretty.untilLog((l) => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \(controller\) CSI gRPC endpoint listening \{"endpoint":/.test(l), "a pretty start line");
      assert.equal(await codeOf(c.ControllerGetVolume({ volume_id: "0001-0002-p1-0000000000000001-00000000-0000-4000-8000-0000000000bb" })), NOT_FOUND);
      await pretty.untilLog((l) => /INFO: \(controller\) call refused \{.*"code":"NOT_FOUND"/.test(l), "a pretty line of the refused call");
      assert.deepEqual(
        pretty.logs.filter((l) => l.startsWith("{")),
        [],
        "no JSON line",
      );
    } finally {
      c.close();
      await pretty.stop();
    }
  });
});

describe("LOG_LEVEL=warn npm start", () => {
  test("becomes ready (READY_FILEs, not log lines) and lists each service's metrics URL in run/stack.json", async (t) => {
    const cleanups = cleanupsOf(t);
    const { runDir, output } = await runStack(cleanups, { LOG_LEVEL: "warn" });
    assert.doesNotMatch(
      output(),
      /"service":"(journal|controller|node-agent)"[^\n]*"level":"info"|"level":"info"[^\n]*"service":"(journal|controller|node-agent)"/,
    );
    const found = readStackFile(stackFilePath(runDir));
    assert.ok(found.found, found.found ? "" : found.why);
    const metrics = found.stack.metrics ?? {};
    assert.deepEqual(Object.keys(metrics).sort(), ["controller", "journal", "node-agent"]);
    for (const [name, url] of Object.entries(metrics)) {
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal((await readyz(url)).status, 200, name);
      assert.equal(sampleValue(await scrape(url), "csi_nats_connected"), 1, name);
      const file = JSON.parse(readFileSync(path.join(runDir, `${name}.ready.json`), "utf8"));
      assert.equal(file.metrics, url);
    }
  });
});
