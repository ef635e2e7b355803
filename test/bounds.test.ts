/**
 * Bounded at the edges (issue 10, problems 7, 8 and 9), against real processes: a nats-server
 * with a small max_payload (64 KiB, so a list passes it with a few dozen volumes), redis, one
 * journal and the controller's gRPC socket.
 *  7. an unpaged list past max_payload is answered in pages and the journal survives; history
 *     is paged; oversized mount flags never reach the journal;
 *  8. error messages quote a short, sanitised prefix of what the caller sent, and arrive;
 *  9. expand never applies the create default; max_entries past the cap is clamped; an id's pool
 *     part must be the record's; int64-max bytes is OUT_OF_RANGE; bad mount flags are refused
 *     at create.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { composeVolumeId, decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import { type ServiceProcess, spawnService, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const MiB = 1024 ** 2;
const MAX_PAYLOAD = 64 * 1024;
let env: TestServers;
let ctrl: CsiClient<"Controller">;
let journalProc: ServiceProcess;
let controllerProc: ServiceProcess;
let nc: NatsConnection;
let journal: JournalClient;

const mountCap = (flags: string[] = []) => ({ access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: flags } });

/** The call's outcome within `ms` (a call that never answers is a failure of its own, not a hung test). */
async function outcome(p: Promise<unknown>, ms = 10_000): Promise<{ code: number; message: string }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    await Promise.race([p, timeout]);
    return { code: 0, message: "" };
  } catch (e) {
    const err = e as { code?: number; details?: string; message: string };
    if (err.code === undefined) throw e;
    return { code: err.code, message: err.details ?? "" };
  } finally {
    clearTimeout(timer);
  }
}

/** A reply's message is short and clean: it can be shown and logged. */
function assertShortClean(message: string) {
  assert.ok(Buffer.byteLength(message) <= 1024, `message of ${Buffer.byteLength(message)} bytes`);
  assert.ok(!message.includes("\0"), "no NUL in the message");
}

const create = (name: string, more: Record<string, unknown> = {}) =>
  ctrl.CreateVolume({ name, volume_capabilities: [mountCap()], capacity_range: { required_bytes: String(64 * MiB) }, ...more });

before(async () => {
  env = await startTestServers({ natsConfig: `max_payload: ${MAX_PAYLOAD}\n` });
  const clustersFile = await writeClustersFile(env.dir, [{ clusterID: "c1", pools: ["default", "fast"] }]);
  const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  journalProc = await spawnService("journal", { ...base, CLUSTER_ID: "c1" });
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  controllerProc = await spawnService("controller", { ...base, LOG_LEVEL: "debug" }, { args: ["--endpoint", sock] });
  ctrl = csiClient(sock, "Controller");
  nc = await connect({ servers: env.nats.url });
  journal = new JournalClient(nc, 10_000);
});

after(async () => {
  ctrl?.close();
  await nc?.close();
  await Promise.all([controllerProc?.stop(), journalProc?.stop()]);
  await env?.dispose();
});

describe("7: replies never pass max_payload; the journal survives", () => {
  test("an unpaged ListVolumes past max_payload is answered whole (pages stitched) and the journal lives on", async () => {
    const big = "p".repeat(3500);
    const mine: string[] = [];
    // ~3.6 KiB per volume in a journal reply: 24 volumes are well past 64 KiB.
    for (let i = 0; i < 24; i++) mine.push((await create(`pvc-big-${i}`, { parameters: { note: big } })).volume!.volume_id);
    const listed = await ctrl.ListVolumes({});
    const ids = listed.entries.map((e) => e.volume?.volume_id);
    for (const id of mine) assert.ok(ids.includes(id), "every volume is listed");
    assert.equal(listed.next_token, "");
    // The journal itself cut its pages to fit, and said where to go on.
    const page = await journal.call("c1", "volume.list", { maxEntries: 0 });
    assert.ok(page.nextToken, "a page cut by size has a next token");
    assert.ok(Buffer.byteLength(JSON.stringify(page)) < MAX_PAYLOAD);
    assert.equal(journalProc.child.exitCode, null, "the journal is still running");
    assert.equal((await outcome(ctrl.ListVolumes({ max_entries: 5 }))).code, 0);
  });

  test("history is paged", async () => {
    const v = (await create("pvc-history")).volume!;
    const uuid = decomposeVolumeId(v.volume_id).uuid;
    for (const w of ["1048576", "2097152", "3145728"])
      await ctrl.ControllerModifyVolume({ volume_id: v.volume_id, mutable_parameters: { writeBytesPerSecond: w } });
    const all = (await journal.call("c1", "volume.history", { uuid })).events;
    assert.ok(all.length >= 5);
    const seen: number[] = [];
    let token: string | undefined;
    do {
      const page = await journal.call("c1", "volume.history", { uuid, maxEntries: 2, ...(token ? { startingToken: token } : {}) });
      assert.ok(page.events.length <= 2);
      seen.push(...page.events.map((e) => e.seq));
      token = page.nextToken;
    } while (token);
    assert.deepEqual(
      seen,
      all.map((e) => e.seq),
    );
  });

  test("oversized mount flags are refused at the edge, and by the journal's own schema", async () => {
    for (const flags of [["x".repeat(300 * 1024)], Array.from({ length: 65 }, (_, i) => `o${i}`), Array.from({ length: 20 }, () => "a".repeat(250))]) {
      const r = await outcome(create("pvc-flags", { volume_capabilities: [mountCap(flags)] }));
      assert.equal(r.code, 3);
      assertShortClean(r.message);
    }
    await assert.rejects(
      journal.call("c1", "volume.create", {
        requestId: "r-flags",
        name: "pvc-flags-journal",
        sizeBytes: MiB,
        capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER", mountFlags: ["y".repeat(8192)] }],
      }),
      { code: "InvalidArgument" },
    );
    assert.equal(journalProc.child.exitCode, null);
  });
});

describe("8: error messages quote a short, sanitised prefix", () => {
  test("huge and NUL-bearing input: the answer arrives, short and without NUL", async () => {
    const huge = "z".repeat(200 * 1024);
    const cases: [() => Promise<unknown>, number][] = [
      [() => ctrl.ControllerGetVolume({ volume_id: huge }), 3],
      [() => ctrl.ControllerGetVolume({ volume_id: "vol\0ume" }), 5],
      [() => create("pvc-q", { parameters: { clusterID: "c\0x" } }), 3],
      [() => create("pvc-q", { parameters: { pool: "p\0ool" } }), 3],
      [() => ctrl.ListVolumes({ starting_token: "c1/\0" }), 10],
      [
        () =>
          ctrl.ControllerPublishVolume({
            volume_id: "0001-0002-c1-0000000000000001-00000000-0000-0000-0000-000000000000",
            node_id: "n\0",
            volume_capability: mountCap(),
          }),
        5,
      ],
      [() => create(huge), 3],
      [() => create("pvc-q", { parameters: { [huge]: "v" } }), 3],
    ];
    for (const [call, code] of cases) {
      const r = await outcome(call());
      assert.equal(r.code, code, r.message);
      assertShortClean(r.message);
    }
    for (const line of controllerProc.logs) assert.ok(line.length < 16 * 1024, `a log line of ${line.length} characters`);
  });
});

describe("9: capacities, paging caps, ids and flags", () => {
  test("ControllerExpandVolume never applies the create default", async () => {
    const v = (await create("pvc-expand-zero")).volume!;
    const empty = await outcome(ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { required_bytes: "0", limit_bytes: "0" } }));
    assert.equal(empty.code, 3, "an empty capacity range is INVALID_ARGUMENT");
    const onlyLimit = await ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { limit_bytes: String(128 * MiB) } });
    assert.equal(onlyLimit.capacity_bytes, String(64 * MiB), "a limit alone grows nothing");
    assert.equal((await outcome(ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { limit_bytes: String(32 * MiB) } }))).code, 11);
    assert.equal((await ctrl.ControllerGetVolume({ volume_id: v.volume_id })).volume?.capacity_bytes, String(64 * MiB));
  });

  test("int64-max bytes is OUT_OF_RANGE, negative is INVALID_ARGUMENT, a huge limit limits nothing", async () => {
    const int64max = "9223372036854775807";
    assert.equal((await outcome(create("pvc-int64", { capacity_range: { required_bytes: int64max } }))).code, 11);
    assert.equal((await outcome(create("pvc-neg", { capacity_range: { required_bytes: "-1" } }))).code, 3);
    const v = (await create("pvc-limit-max", { capacity_range: { required_bytes: String(MiB), limit_bytes: int64max } })).volume!;
    assert.equal(v.capacity_bytes, String(MiB));
    assert.equal((await outcome(ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { required_bytes: int64max } }))).code, 11);
    assert.equal((await outcome(ctrl.ControllerExpandVolume({ volume_id: v.volume_id, capacity_range: { required_bytes: String(2 ** 52) } }))).code, 11);
  });

  test("max_entries past the internal cap is clamped, not refused", async () => {
    assert.equal((await outcome(ctrl.ListVolumes({ max_entries: 20_000 }))).code, 0);
    assert.equal((await outcome(ctrl.ListSnapshots({ max_entries: 2_000_000_000 }))).code, 0);
  });

  test("an id's pool part must be the record's pool: ids never alias", async () => {
    const v = (await create("pvc-alias")).volume!;
    const parts = decomposeVolumeId(v.volume_id);
    const other = composeVolumeId({ ...parts, poolID: 2 }); // a configured pool, not this volume's
    const unknown = composeVolumeId({ ...parts, poolID: 0x99 }); // no such pool
    for (const id of [other, unknown]) {
      assert.equal((await outcome(ctrl.ControllerGetVolume({ volume_id: id }))).code, 5);
      assert.equal((await outcome(ctrl.ControllerExpandVolume({ volume_id: id, capacity_range: { required_bytes: String(128 * MiB) } }))).code, 5);
      assert.equal((await outcome(ctrl.CreateSnapshot({ name: `s-alias-${id.slice(-4)}`, source_volume_id: id }))).code, 5);
      assert.equal((await outcome(ctrl.DeleteVolume({ volume_id: id }))).code, 0);
    }
    const still = await ctrl.ControllerGetVolume({ volume_id: v.volume_id });
    assert.equal(still.volume?.capacity_bytes, String(64 * MiB), "the aliases neither grew nor deleted it");
  });

  test("mount flags like --bind are refused at create", async () => {
    for (const flag of ["--bind", "ro,remount", "a b", "", "x\0"]) {
      const r = await outcome(create("pvc-bind", { volume_capabilities: [mountCap([flag])] }));
      assert.equal(r.code, 3, JSON.stringify(flag));
      assertShortClean(r.message);
    }
  });
});
