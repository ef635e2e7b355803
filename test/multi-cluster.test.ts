/**
 * Two storage clusters on one NATS and one Redis, a journal process each, and the controller
 * over real gRPC (docs/controller.md, "Several clusters"): List pages across both; with one
 * cluster's journal frozen (SIGSTOP) or killed (SIGKILL), calls for the other cluster work,
 * calls for the down one are UNAVAILABLE within a bound, and List answers the healthy cluster
 * with a next_token that leads back to the missing one (UNAVAILABLE when nothing else is left),
 * so resuming once it is back lists every volume exactly once. Times are measured and printed.
 * Last, `CLUSTERS=2 npm start` brings up two clusters on one machine.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, type TestContext, test } from "node:test";
import { decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, csiClient } from "@csi/runtime";
import { ROOT, type ServiceProcess, SOURCE_NODE_ARGS, spawnService, startTestServers, type TestServers, tempDir, writeClustersFile } from "@csi/testkit";
import { clusterCount, localClusters } from "../scripts/lib/stack.js";

const MiB = 1024 ** 2;
/** The controller's bounds in this test (the defaults, stated): no sign of life / one cluster's share of a fan-out. */
const QUIET_MS = 2000;
const FANOUT_MS = 2000;
/** What the test accepts as "quick": the bound plus generous slack for a loaded machine, far below the 30 s journal timeout. */
const QUICK_MS = 10_000;
const CLUSTERS = ["east", "west"] as const;
type Cluster = (typeof CLUSTERS)[number];

let env: TestServers;
let ctrl: CsiClient<"Controller">;
let base: Record<string, string>;
const journals = new Map<Cluster, ServiceProcess>();
const procs: ServiceProcess[] = [];
/** Volume and snapshot ids per cluster, as created. */
const volumes: Record<Cluster, string[]> = { east: [], west: [] };
const snapshots: Record<Cluster, string[]> = { east: [], west: [] };

const mountCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };
const create = (name: string, clusterID: Cluster) =>
  ctrl.CreateVolume({ name, volume_capabilities: [mountCap], capacity_range: { required_bytes: String(MiB) }, parameters: { clusterID } });
const outcome = async <T>(p: Promise<T>): Promise<{ code: number; ms: number; value?: T; message?: string }> => {
  const t0 = performance.now();
  return p.then(
    (value) => ({ code: 0, ms: Math.round(performance.now() - t0), value }),
    (e: { code: number; details?: string }) => ({ code: e.code, ms: Math.round(performance.now() - t0), message: e.details ?? "" }),
  );
};
const UNAVAILABLE = 14;

const spawnJournal = async (c: Cluster) => {
  const p = await spawnService("journal", { ...base, CLUSTER_ID: c, CATCHUP_EVERY_MS: "0" });
  journals.set(c, p);
  procs.push(p);
  return p;
};
const pidOf = (c: Cluster) => journals.get(c)?.child.pid as number;

type ListFn = (req: { max_entries?: number; starting_token?: string }) => Promise<{ entries: unknown[]; next_token: string }>;
const listVolumes: ListFn = (req) => ctrl.ListVolumes(req);
const listSnapshots: ListFn = (req) => ctrl.ListSnapshots(req);
const idOf = (e: unknown) => {
  const x = e as { volume?: { volume_id: string }; snapshot?: { snapshot_id: string } };
  return String(x.volume?.volume_id ?? x.snapshot?.snapshot_id);
};

/** Every page from `token` on; stops at the end or at the first error (returned with what was seen before it). */
async function walk(list: ListFn, max: number, token = "") {
  const seen: string[] = [];
  for (let pages = 0; pages < 200; pages++) {
    const o = await outcome(list({ max_entries: max, starting_token: token }));
    if (o.code !== 0) return { seen, token, error: o };
    const page = o.value as Awaited<ReturnType<ListFn>>;
    if (max > 0) assert.ok(page.entries.length <= max, `a page of ${page.entries.length} for max_entries ${max}`);
    seen.push(...page.entries.map(idOf));
    token = page.next_token;
    if (!token) return { seen, token };
  }
  throw new Error("the list does not end");
}

before(async () => {
  env = await startTestServers();
  const clustersFile = await writeClustersFile(
    env.dir,
    CLUSTERS.map((clusterID) => ({ clusterID, pools: ["default"] })),
  );
  base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  await Promise.all(CLUSTERS.map(spawnJournal));
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  procs.push(
    await spawnService(
      "controller",
      { ...base, JOURNAL_QUIET_MS: String(QUIET_MS), CLUSTER_FANOUT_TIMEOUT_MS: String(FANOUT_MS) },
      { args: ["--endpoint", sock] },
    ),
  );
  ctrl = csiClient(sock, "Controller");
  // Three volumes in east, four in west, and a snapshot of two volumes in each.
  for (const [c, n] of [
    ["east", 3],
    ["west", 4],
  ] as const) {
    for (let i = 0; i < n; i++) volumes[c].push((await create(`${c}-vol-${i}`, c)).volume?.volume_id as string);
    for (let i = 0; i < 2; i++) {
      const s = await ctrl.CreateSnapshot({ name: `${c}-snap-${i}`, source_volume_id: volumes[c][i] as string });
      snapshots[c].push(s.snapshot?.snapshot_id as string);
    }
  }
});

after(async () => {
  ctrl?.close();
  for (const p of journals.values()) if (p.child.pid && p.child.exitCode === null && p.child.signalCode === null) process.kill(p.child.pid, "SIGCONT");
  await Promise.all(procs.map((p) => p.stop()));
  await env?.dispose();
});

const sorted = (xs: string[]) => [...xs].sort();

describe("two clusters, both up", () => {
  test("List returns both clusters' volumes and snapshots, east's first, with paging at every max_entries", async () => {
    for (const [list, ids] of [
      [listVolumes, volumes],
      [listSnapshots, snapshots],
    ] as const) {
      for (const max of [0, 1, 2, 3, 4, 5, 6, 7, 8]) {
        const { seen, error } = await walk(list, max);
        assert.equal(error, undefined);
        // Config order: every east entry before every west entry; each cluster's in the journal's (uuid) order.
        assert.deepEqual(seen, [...sorted(ids.east), ...sorted(ids.west)], `max_entries ${max}`);
      }
    }
    for (const id of volumes.west) assert.equal(decomposeVolumeId(id).clusterID, "west");
  });

  test("a token is bound to its clusters: garbage and the old `<cluster>/<uuid>` form are ABORTED", async () => {
    for (const bad of ["garbage", "east/", `east/${decomposeVolumeId(volumes.east[0] as string).uuid}`]) {
      assert.equal((await outcome(ctrl.ListVolumes({ starting_token: bad }))).code, 10, bad);
    }
  });

  test("GetCapacity without a clusterID is the sum over the clusters; with one, that cluster's", async () => {
    const free = async (parameters: Record<string, string>) => Number((await ctrl.GetCapacity({ parameters })).available_capacity);
    const [east, west, all] = [await free({ clusterID: "east" }), await free({ clusterID: "west" }), await free({})];
    assert.ok(east > 0 && west > 0);
    // The pools share this machine's file system, which other tests write to meanwhile: equal within 5%.
    assert.ok(Math.abs(all - (east + west)) < 0.05 * all, `sum ${all} vs ${east} + ${west}`);
  });
});

/** What every "one cluster is down" scenario checks: the other works, the down one is UNAVAILABLE quickly, List keeps its place. */
async function oneClusterDown(t: TestContext, down: Cluster, how: string) {
  const up: Cluster = down === "east" ? "west" : "east";
  const report = (what: string, ms: number) => t.diagnostic(`${how} ${down}: ${what} answered in ${ms} ms`);

  // Calls routed to the down cluster: UNAVAILABLE, quickly.
  for (const [what, call] of [
    ["ControllerGetVolume", () => ctrl.ControllerGetVolume({ volume_id: volumes[down][0] as string })],
    ["CreateVolume", () => create(`${down}-while-down`, down)],
    ["GetCapacity(clusterID)", () => ctrl.GetCapacity({ parameters: { clusterID: down } })],
  ] as const) {
    const o = await outcome((call as () => Promise<unknown>)());
    report(`${what} for ${down} (code ${o.code})`, o.ms);
    assert.equal(o.code, UNAVAILABLE, `${what}: ${o.message}`);
    assert.ok(o.ms < QUICK_MS, `${what} took ${o.ms} ms`);
  }

  // Calls for the other cluster still work.
  const got = await outcome(ctrl.ControllerGetVolume({ volume_id: volumes[up][0] as string }));
  report(`ControllerGetVolume for ${up}`, got.ms);
  assert.equal(got.code, 0);
  const made = await outcome(create(`${up}-while-${down}-${how}`, up));
  assert.equal(made.code, 0, made.message);
  volumes[up].push((made.value as { volume: { volume_id: string } }).volume.volume_id);

  // GetCapacity over every cluster: the one that answers.
  const cap = await outcome(ctrl.GetCapacity({}));
  report("GetCapacity (all clusters)", cap.ms);
  assert.equal(cap.code, 0);
  assert.ok(cap.ms < QUICK_MS);

  // An unpaged List: the up cluster's volumes now, and a token, since the list is not complete.
  const first = await outcome(ctrl.ListVolumes({}));
  report("ListVolumes (unpaged)", first.ms);
  assert.equal(first.code, 0, first.message);
  assert.ok(first.ms < QUICK_MS);
  const page = first.value as Awaited<ReturnType<ListFn>>;
  assert.deepEqual(page.entries.map(idOf), sorted(volumes[up]), "the healthy cluster's volumes");
  assert.notEqual(page.next_token, "", "never an end of list without the missing cluster");
  // The token leads to the missing cluster only: UNAVAILABLE (the CO retries), quickly.
  const rest = await outcome(ctrl.ListVolumes({ starting_token: page.next_token }));
  report("ListVolumes (the page of the missing cluster)", rest.ms);
  assert.equal(rest.code, UNAVAILABLE, rest.message);
  assert.match(rest.message ?? "", new RegExp(`cluster ${down} did not answer`));
  assert.ok(rest.ms < QUICK_MS);

  // Paged: the walk lists the up cluster, then stops at UNAVAILABLE — it never ends without the down one.
  const paged = await walk(listVolumes, 2);
  assert.equal(paged.error?.code, UNAVAILABLE);
  assert.deepEqual(sorted(paged.seen), sorted(volumes[up]));
  const snaps = await walk(listSnapshots, 0);
  assert.equal(snaps.error?.code, UNAVAILABLE);
  assert.deepEqual(sorted(snaps.seen), sorted(snapshots[up]));
  return { unpagedToken: page.next_token, pagedToken: paged.token, snapsToken: snaps.token };
}

/** Once the cluster is back, the tokens handed out while it was down lead to its entries: nothing skipped, nothing twice. */
async function resumeAfter(down: Cluster, tokens: Awaited<ReturnType<typeof oneClusterDown>>) {
  const up: Cluster = down === "east" ? "west" : "east";
  // The CO retries the create that was UNAVAILABLE (a frozen journal may have done it on waking: same volume, by name).
  volumes[down].push((await create(`${down}-while-down`, down)).volume?.volume_id as string);
  const unpaged = await walk(listVolumes, 0, tokens.unpagedToken);
  assert.equal(unpaged.error, undefined);
  assert.deepEqual(unpaged.seen, sorted(volumes[down]), "the rest of the unpaged List: the cluster that was missing");
  const paged = await walk(listVolumes, 2, tokens.pagedToken);
  assert.deepEqual(paged.seen, sorted(volumes[down]));
  const snaps = await walk(listSnapshots, 0, tokens.snapsToken);
  assert.deepEqual(snaps.seen, sorted(snapshots[down]));
  const all = await walk(listVolumes, 0);
  assert.deepEqual(all.seen, [...sorted(volumes.east), ...sorted(volumes.west)]);
  assert.ok(sorted(volumes[up]).length > 0);
}

describe("one cluster down", () => {
  test("west's journal frozen (SIGSTOP): east works, west is UNAVAILABLE within the bound, List keeps west's place", async (t) => {
    const pid = pidOf("west");
    process.kill(pid, "SIGSTOP");
    let tokens: Awaited<ReturnType<typeof oneClusterDown>>;
    try {
      tokens = await oneClusterDown(t, "west", "frozen");
    } finally {
      process.kill(pid, "SIGCONT");
    }
    await resumeAfter("west", tokens);
  });

  test("east's journal killed (SIGKILL): west works, east is UNAVAILABLE at once, List keeps east's place", async (t) => {
    await journals.get("east")?.kill();
    const tokens = await oneClusterDown(t, "east", "killed");
    await spawnJournal("east");
    await resumeAfter("east", tokens);
  });
});

describe("CLUSTERS=2 npm start", () => {
  test("the clusters file it writes: local, local-2…, each with its own pool; CLUSTERS is checked", () => {
    const two = localClusters(2, "host-1");
    assert.deepEqual(
      two.clusters.map((c) => c.clusterID),
      ["local", "local-2"],
    );
    assert.equal(two.defaultCluster, "local");
    for (const c of two.clusters) assert.deepEqual(c.pools[0]?.topology, [{ "topology.nats.csi/node": "host-1" }]);
    assert.equal(localClusters(1, "h").clusters.length, 1);
    assert.equal(clusterCount(undefined), 1);
    assert.equal(clusterCount("3"), 3);
    for (const bad of ["0", "17", "-1", "2.5", "two", " 2"]) assert.throws(() => clusterCount(bad), /CLUSTERS must be/, bad);
  });

  test("brings up a journal per cluster on one NATS and Redis; volumes in each are listed through the controller", async (t) => {
    const dir = await tempDir("csi-multi-start-");
    const runDir = path.join(dir, "run");
    const childEnv: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: path.join(dir, "data"), RUN_DIR: runDir, CLUSTERS: "2" };
    for (const k of ["NATS_URL", "REDIS_URL", "CLUSTERS_FILE"]) delete childEnv[k];
    const child = spawn(process.execPath, [...SOURCE_NODE_ARGS, path.join(ROOT, "scripts/start.ts")], {
      cwd: ROOT,
      env: childEnv,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    t.after(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      await rm(dir, { recursive: true, force: true });
    });
    let out = "";
    const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not ready in 60 s:\n${out}`)), 60_000);
      const onData = (b: Buffer) => {
        out += b.toString();
        const line = out.split("\n").find((l) => l.includes('"msg":"csi stack ready"'));
        if (line) {
          clearTimeout(timer);
          resolve(JSON.parse(line));
        }
      };
      child.stdout.on("data", onData);
      child.stderr.on("data", onData);
      exited.then((c) => reject(new Error(`npm start exited ${c}:\n${out}`)));
    });
    assert.deepEqual(ready.clusters, ["local", "local-2"]);
    const file = JSON.parse(await readFile(path.join(runDir, "clusters.json"), "utf8"));
    assert.deepEqual(
      file.clusters.map((c: { clusterID: string }) => c.clusterID),
      ["local", "local-2"],
    );
    const c = csiClient(String(ready.controller), "Controller");
    try {
      const ids: string[] = [];
      for (const clusterID of ["local", "local-2"]) {
        const v = await c.CreateVolume({
          name: `start-${clusterID}`,
          volume_capabilities: [mountCap],
          capacity_range: { required_bytes: String(MiB) },
          parameters: { clusterID },
        });
        assert.equal(v.volume?.volume_context.clusterID, clusterID);
        ids.push(v.volume?.volume_id as string);
      }
      const listed = (await c.ListVolumes({})).entries.map(idOf);
      assert.deepEqual(sorted(listed), sorted(ids));
    } finally {
      c.close();
    }
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
  });
});
