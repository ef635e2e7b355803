/**
 * The controller half of the fuzz suite (issue 10, Build 6): seeded, generated hostile requests
 * for every Identity, Controller and GroupController RPC over real gRPC, against a real stack
 * (nats-server, redis-server, a journal, the controller). Each case takes a valid request of an
 * RPC and spoils one field with a hostile value (oversized, control characters, NUL, unicode,
 * empty, huge/negative/zero capacities, maps past 4 KiB, unknown enums, missing fields, ids
 * with a wrong pool or cluster part). Every answer must be the documented code (never UNKNOWN
 * or INTERNAL), arrive within a bound, carry a short message without NUL, and no secret sent
 * may appear in any log line. FUZZ_SEED picks another seed (the seed is in the test's name).
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { composeVolumeId, decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, csiClient } from "@csi/runtime";
import { type ServiceProcess, spawnService, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";
import { seeded } from "../scripts/lib/random.js";

const SEED = Number(process.env.FUZZ_SEED ?? 20_240_610);
const CASES_PER_RPC = 12;
const CALL_BOUND_MS = 5000;
const MESSAGE_MAX_BYTES = 1024;
const SECRET = "fuzz-S3cr3t-Value";
const MiB = 1024 ** 2;

const random = seeded(SEED);
const rand = random.next;
const pick = random.pick;
const shuffled = random.shuffle;

let env: TestServers;
let procs: ServiceProcess[] = [];
let controllerProc: ServiceProcess;
let clients: { Identity: CsiClient<"Identity">; Controller: CsiClient<"Controller">; GroupController: CsiClient<"GroupController"> };
let vol = "";
let snap = "";
let counter = 0;
const unique = (p: string) => `${p}-${SEED}-${counter++}`;

// ------------------------------------------------------------------ hostile values

const huge = () => "h".repeat(128 * 1024 + Math.floor(rand() * 64 * 1024));
const controlled = () => `a${pick(["\u0001", "\u001b[31m", "\u007f", "\u0085", "\r\n"])}b`;
const unicodeName = () => `${pick(["ünïcødé", "名前", "😀-vol", "a\u202eb"])}-${unique("u")}`;
const bigMap = (secret = false) => Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`k${i}`, `${secret ? SECRET : ""}${"v".repeat(1000)}`]));

/** What a spoiled string field of each kind is, per category: [value, expected code]. */
type Category = "empty" | "huge" | "long129" | "nul" | "control" | "unicode" | "wrongPool" | "unknownPool" | "wrongCluster" | "absent";
const ID_CATEGORIES: Category[] = ["empty", "huge", "long129", "nul", "control", "unicode", "wrongPool", "unknownPool", "wrongCluster", "absent"];
const NAME_CATEGORIES: Category[] = ["empty", "huge", "long129", "nul", "control", "unicode"];

/** The hostile values names and ids share (`filler` pads the 129-byte one); undefined for the others. */
function sharedValue(c: Category, filler: string): string | undefined {
  if (c === "empty") return "";
  if (c === "huge") return huge();
  if (c === "long129") return filler.repeat(129);
  if (c === "control") return controlled();
  return undefined;
}

function idValue(c: Category, base: string): string {
  const shared = sharedValue(c, "i");
  if (shared !== undefined) return shared;
  const parts = decomposeVolumeId(base);
  if (c === "nul") return `${base.slice(0, 20)}\0${base.slice(21)}`;
  if (c === "unicode") return `vol-${unicodeName()}`;
  if (c === "wrongPool") return composeVolumeId({ ...parts, poolID: parts.poolID === 1 ? 2 : 1 });
  if (c === "unknownPool") return composeVolumeId({ ...parts, poolID: 0x5eed });
  if (c === "wrongCluster") return composeVolumeId({ ...parts, clusterID: "zz" });
  return composeVolumeId({ ...parts, uuid: "0bba3be9-0a1c-41db-a619-26ffea20161e" }); // absent
}
/** An id's expected code where a missing volume is NOT_FOUND (`gone`: what a missing one answers instead, e.g. OK for deletes). */
const idCode = (c: Category, gone = 5) => (c === "empty" || c === "huge" || c === "long129" ? 3 : gone);

const nameValue = (c: Category): string => sharedValue(c, "n") ?? (c === "nul" ? `na\0me-${unique("n")}` : unicodeName());
const nameCode = (c: Category) => (c === "unicode" ? 0 : 3);

// ------------------------------------------------------------------ cases

type Service = keyof typeof clients;
interface Case {
  service: Service;
  method: string;
  what: string;
  req: Record<string, unknown>;
  expect: number;
}

/** A mount capability; `mode` may be an enum number the proto does not define (an unknown enum). */
const mountCap = (flags: string[] = [], mode: string | number = "SINGLE_NODE_WRITER") => ({
  access_mode: { mode: mode as "SINGLE_NODE_WRITER" },
  mount: { fs_type: "ext4", mount_flags: flags },
});
const secrets = { password: SECRET };

/** Every (field, hostile value) spoiling of each RPC's valid request, with the code it must get. */
function allCases(): Case[] {
  const cases: Case[] = [];
  const add = (service: Service, method: string, what: string, req: Record<string, unknown>, expect: number) =>
    cases.push({ service, method, what, req, expect });
  const createBase = () => ({ name: unique("fz"), volume_capabilities: [mountCap()], capacity_range: { required_bytes: String(MiB) }, secrets });

  for (const s of ["GetPluginInfo", "GetPluginCapabilities", "Probe"]) add("Identity", s, "plain", {}, 0);
  add("Controller", "ControllerGetCapabilities", "plain", {}, 0);
  add("GroupController", "GroupControllerGetCapabilities", "plain", {}, 0);

  // CreateVolume
  for (const c of NAME_CATEGORIES) add("Controller", "CreateVolume", `name:${c}`, { ...createBase(), name: nameValue(c) }, nameCode(c));
  for (const [what, range, code] of [
    ["int64max", { required_bytes: "9223372036854775807" }, 11],
    ["negative", { required_bytes: "-4096" }, 3],
    ["zero", { required_bytes: "0", limit_bytes: String(MiB) }, 0],
    ["limit<required", { required_bytes: String(2 * MiB), limit_bytes: String(MiB) }, 11],
    ["2^60", { required_bytes: String(2 ** 60) }, 11],
  ] as const)
    add("Controller", "CreateVolume", `capacity:${what}`, { ...createBase(), capacity_range: range }, code);
  add("Controller", "CreateVolume", "parameters>4KiB", { ...createBase(), parameters: bigMap() }, 3);
  add("Controller", "CreateVolume", "secrets>4KiB", { ...createBase(), secrets: bigMap(true) }, 3);
  add("Controller", "CreateVolume", "mutable>4KiB", { ...createBase(), mutable_parameters: bigMap() }, 3);
  add("Controller", "CreateVolume", "mutable:unknown", { ...createBase(), mutable_parameters: { [huge()]: "1" } }, 3);
  add("Controller", "CreateVolume", "capabilities:missing", { ...createBase(), volume_capabilities: [] }, 3);
  add("Controller", "CreateVolume", "mode:unknown-enum", { ...createBase(), volume_capabilities: [mountCap([], 99)] }, 3);
  add("Controller", "CreateVolume", "access-type:missing", { ...createBase(), volume_capabilities: [{ access_mode: { mode: "SINGLE_NODE_WRITER" } }] }, 3);
  add("Controller", "CreateVolume", "fs_type:huge", { ...createBase(), volume_capabilities: [{ access_mode: { mode: 1 }, mount: { fs_type: huge() } }] }, 3);
  add(
    "Controller",
    "CreateVolume",
    "fs_type:unknown",
    { ...createBase(), volume_capabilities: [{ access_mode: { mode: 1 }, mount: { fs_type: "zfs\0" } }] },
    3,
  );
  for (const flags of [["--bind"], ["ro,remount"], ["x".repeat(300 * 1024)], Array.from({ length: 100 }, () => "noatime"), ["a\0"]])
    add("Controller", "CreateVolume", `mount_flags:${flags.length}x${flags[0]?.length}`, { ...createBase(), volume_capabilities: [mountCap(flags)] }, 3);
  add("Controller", "CreateVolume", "capabilities:200", { ...createBase(), volume_capabilities: Array.from({ length: 200 }, () => mountCap()) }, 3);
  add("Controller", "CreateVolume", "clusterID:nul", { ...createBase(), parameters: { clusterID: "c1\0" } }, 3);
  add("Controller", "CreateVolume", "pool:huge", { ...createBase(), parameters: { pool: "p".repeat(4000) } }, 3);
  add("Controller", "CreateVolume", "topology>4KiB", { ...createBase(), accessibility_requirements: { requisite: [{ segments: bigMap() }] } }, 3);
  for (const c of ID_CATEGORIES)
    add("Controller", "CreateVolume", `source:${c}`, { ...createBase(), volume_content_source: { volume: { volume_id: idValue(c, vol) } } }, idCode(c));

  // Calls naming one volume
  const byVolume: [string, () => Record<string, unknown>, number, number][] = [
    ["ControllerGetVolume", () => ({}), 0, 5],
    ["DeleteVolume", () => ({ secrets }), -1, 0], // the base volume itself is never deleted
    ["ControllerExpandVolume", () => ({ capacity_range: { required_bytes: String(MiB) }, secrets }), 0, 5],
    ["ControllerModifyVolume", () => ({ mutable_parameters: {}, secrets }), 0, 5],
    ["ValidateVolumeCapabilities", () => ({ volume_capabilities: [mountCap()], secrets }), 0, 5],
    ["ControllerPublishVolume", () => ({ node_id: "no-such-node", volume_capability: mountCap(), secrets }), 5, 5],
    ["ControllerUnpublishVolume", () => ({ node_id: "no-such-node", secrets }), 0, 0],
  ];
  for (const [method, more, _baseCode, gone] of byVolume) {
    for (const c of ID_CATEGORIES) add("Controller", method, `volume_id:${c}`, { ...more(), volume_id: idValue(c, vol) }, idCode(c, gone));
    // ControllerGetVolumeRequest has no secrets field: the map is not even decoded.
    if (method !== "DeleteVolume" && method !== "ControllerGetVolume")
      add("Controller", method, "secrets>4KiB", { ...more(), volume_id: vol, secrets: bigMap(true) }, 3);
  }
  for (const [what, range, code] of [
    ["zero/zero", { required_bytes: "0", limit_bytes: "0" }, 3],
    ["int64max", { required_bytes: "9223372036854775807" }, 11],
    ["negative", { required_bytes: "-1" }, 3],
    ["limit-below", { limit_bytes: String(MiB / 2) }, 11],
    ["missing", null, 3],
  ] as const)
    add("Controller", "ControllerExpandVolume", `capacity:${what}`, { volume_id: vol, capacity_range: range }, code);
  add("Controller", "ControllerModifyVolume", "mutable:unknown-key", { volume_id: vol, mutable_parameters: { "bogus\0": "1" } }, 3);
  add("Controller", "ControllerModifyVolume", "mutable:negative", { volume_id: vol, mutable_parameters: { readIOPS: "-5" } }, 3);
  add("Controller", "ValidateVolumeCapabilities", "volume_context>4KiB", { volume_id: vol, volume_capabilities: [mountCap()], volume_context: bigMap() }, 3);
  add("Controller", "ValidateVolumeCapabilities", "capabilities:missing", { volume_id: vol }, 3);
  add("Controller", "ControllerPublishVolume", "node_id:huge", { volume_id: vol, node_id: huge(), volume_capability: mountCap() }, 3);
  add("Controller", "ControllerPublishVolume", "node_id:nul", { volume_id: vol, node_id: "n\0de", volume_capability: mountCap() }, 5);
  add("Controller", "ControllerPublishVolume", "node_id:missing", { volume_id: vol, volume_capability: mountCap() }, 3);
  add("Controller", "ControllerPublishVolume", "mode:unknown-enum", { volume_id: vol, node_id: "n", volume_capability: mountCap([], 42) }, 3);

  // Lists and capacity
  for (const [what, req, code] of [
    ["max:negative", { max_entries: -1 }, 3],
    ["max:int32max", { max_entries: 2 ** 31 - 1 }, 0],
    ["token:garbage", { starting_token: "garbage\0" }, 10],
    ["token:huge", { starting_token: huge() }, 3],
    ["token:wrong-cluster", { starting_token: "zz/" }, 10],
  ] as const) {
    add("Controller", "ListVolumes", what, req, code);
    add("Controller", "ListSnapshots", what, req, code);
  }
  for (const c of ID_CATEGORIES) {
    add("Controller", "ListSnapshots", `snapshot_id:${c}`, { snapshot_id: idValue(c, snap) }, c === "empty" ? 0 : idCode(c, 0));
    add("Controller", "ListSnapshots", `source_volume_id:${c}`, { source_volume_id: idValue(c, vol) }, c === "empty" ? 0 : idCode(c, 0));
  }
  add("Controller", "GetCapacity", "plain", { volume_capabilities: [mountCap()] }, 0);
  add("Controller", "GetCapacity", "parameters>4KiB", { parameters: bigMap() }, 3);
  add("Controller", "GetCapacity", "clusterID:control", { parameters: { clusterID: controlled() } }, 3);
  add("Controller", "GetCapacity", "topology:huge-key", { accessible_topology: { segments: { [huge()]: "x" } } }, 3);

  // Snapshots
  for (const c of NAME_CATEGORIES) add("Controller", "CreateSnapshot", `name:${c}`, { name: nameValue(c), source_volume_id: vol, secrets }, nameCode(c));
  for (const c of ID_CATEGORIES)
    add("Controller", "CreateSnapshot", `source:${c}`, { name: unique("fs"), source_volume_id: idValue(c, vol), secrets }, idCode(c));
  add("Controller", "CreateSnapshot", "parameters>4KiB", { name: unique("fs"), source_volume_id: vol, parameters: bigMap() }, 3);
  for (const c of ID_CATEGORIES) {
    add("Controller", "GetSnapshot", `snapshot_id:${c}`, { snapshot_id: idValue(c, snap), secrets }, idCode(c));
    add("Controller", "DeleteSnapshot", `snapshot_id:${c}`, { snapshot_id: idValue(c, snap), secrets }, idCode(c, 0));
  }

  // Group snapshots
  for (const c of NAME_CATEGORIES) {
    if (c === "unicode") continue; // a valid name cuts a real group of the base volume: covered by group-snapshots.test.ts
    add("GroupController", "CreateVolumeGroupSnapshot", `name:${c}`, { name: nameValue(c), source_volume_ids: [vol], secrets }, 3);
  }
  for (const c of ID_CATEGORIES)
    add(
      "GroupController",
      "CreateVolumeGroupSnapshot",
      `source:${c}`,
      { name: unique("fg"), source_volume_ids: [idValue(c, vol)], secrets },
      c === "empty" ? 3 : idCode(c),
    );
  add("GroupController", "CreateVolumeGroupSnapshot", "sources:none", { name: unique("fg") }, 3);
  add("GroupController", "CreateVolumeGroupSnapshot", "sources:200", { name: unique("fg"), source_volume_ids: Array.from({ length: 200 }, () => vol) }, 3);
  add("GroupController", "CreateVolumeGroupSnapshot", "parameters>4KiB", { name: unique("fg"), source_volume_ids: [vol], parameters: bigMap() }, 3);
  for (const c of ID_CATEGORIES) {
    add("GroupController", "GetVolumeGroupSnapshot", `id:${c}`, { group_snapshot_id: idValue(c, snap), secrets }, idCode(c));
    add("GroupController", "DeleteVolumeGroupSnapshot", `id:${c}`, { group_snapshot_id: idValue(c, snap), secrets }, idCode(c, 0));
  }
  add("GroupController", "GetVolumeGroupSnapshot", "snapshot_ids:huge", { group_snapshot_id: snap, snapshot_ids: [huge()] }, 3);
  return cases;
}

before(async () => {
  env = await startTestServers();
  const clustersFile = await writeClustersFile(env.dir, [{ clusterID: "c1", pools: ["default", "fast"] }]);
  const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "c1", LOG_LEVEL: "debug" }));
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  controllerProc = await spawnService("controller", { ...base, LOG_LEVEL: "debug" }, { args: ["--endpoint", sock] });
  procs.push(controllerProc);
  clients = { Identity: csiClient(sock, "Identity"), Controller: csiClient(sock, "Controller"), GroupController: csiClient(sock, "GroupController") };
  const c = clients.Controller;
  vol = (await c.CreateVolume({ name: "fuzz-base", volume_capabilities: [mountCap()], capacity_range: { required_bytes: String(MiB) } })).volume!.volume_id;
  snap = (await c.CreateSnapshot({ name: "fuzz-base-snap", source_volume_id: vol })).snapshot!.snapshot_id;
});

after(async () => {
  for (const c of Object.values(clients ?? {})) c.close();
  await Promise.all(procs.map((p) => p.stop()));
  procs = [];
  await env?.dispose();
});

/** One call: its code and message, or a failure if it does not answer within the bound. */
async function run(k: Case): Promise<{ code: number; message: string; ms: number }> {
  const started = performance.now();
  const method = (clients[k.service] as unknown as Record<string, (req: unknown) => Promise<unknown>>)[k.method];
  assert.ok(method, `${k.service}.${k.method} exists`);
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${k.method} ${k.what}: no answer within ${CALL_BOUND_MS} ms`)), CALL_BOUND_MS);
  });
  try {
    await Promise.race([method(k.req), bound]);
    return { code: 0, message: "", ms: performance.now() - started };
  } catch (e) {
    const err = e as { code?: number; details?: string };
    if (err.code === undefined) throw e;
    return { code: err.code, message: err.details ?? "", ms: performance.now() - started };
  } finally {
    clearTimeout(timer);
  }
}

describe(`fuzz the controller's gRPC edge (seed ${SEED})`, () => {
  test("every hostile request gets its documented code, fast, with a short clean message", async () => {
    const all = allCases();
    const byRpc = new Map<string, Case[]>();
    for (const k of all) byRpc.set(`${k.service}.${k.method}`, [...(byRpc.get(`${k.service}.${k.method}`) ?? []), k]);
    const chosen = [...byRpc.values()].flatMap((ks) => shuffled(ks).slice(0, CASES_PER_RPC));
    const failures: string[] = [];
    for (const k of chosen) {
      const r = await run(k);
      const where = `${k.service}.${k.method} [${k.what}]`;
      if (r.code === 2 || r.code === 13) failures.push(`${where}: ${r.code === 2 ? "UNKNOWN" : "INTERNAL"} ${r.message}`);
      else if (r.code !== k.expect) failures.push(`${where}: code ${r.code}, expected ${k.expect} (${r.message.slice(0, 200)})`);
      if (Buffer.byteLength(r.message) > MESSAGE_MAX_BYTES) failures.push(`${where}: a message of ${Buffer.byteLength(r.message)} bytes`);
      if (r.message.includes("\0")) failures.push(`${where}: NUL in the message`);
    }
    assert.deepEqual(failures, [], `seed ${SEED}`);
    assert.ok(chosen.length > 100, `${chosen.length} cases`);
    // Every RPC of the three services was exercised.
    const rpcs = new Set(chosen.map((k) => k.method));
    for (const m of ["CreateVolume", "DeleteVolume", "ListSnapshots", "GetCapacity", "CreateVolumeGroupSnapshot", "Probe"]) assert.ok(rpcs.has(m), m);
  });

  test("no secret in any log line; no log line grows with the input", async () => {
    // Secrets were sent, and stripped (waited for: a line can come after the reply it goes with).
    await controllerProc.untilLog((l) => l.includes("***stripped***"), "a stripped secret");
    for (const p of procs) {
      for (const line of p.logs) {
        assert.ok(!line.includes(SECRET), `a secret in a log line: ${line.slice(0, 300)}`);
        assert.ok(line.length < 32 * 1024, `a log line of ${line.length} characters`);
      }
    }
  });
});
