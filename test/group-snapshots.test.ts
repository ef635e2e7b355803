/**
 * Group snapshots end to end: the controller's GroupController over its gRPC socket, with the
 * journals of two clusters, NATS and Redis behind it (real processes). Bytes written into the
 * volumes' images before the group is cut come back in volumes restored from its members; the
 * group is idempotent by name, refuses other members, keeps its members from being deleted on
 * their own, and is deleted with them. Then the journal alone, killed half way through a group.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { chmod, copyFile, open, readdir } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { composeVolumeId, DriverError, decomposeVolumeId, subjects } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import { type ServiceProcess, spawnService, startTestServers, type TestServers, writeClustersFile } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const MiB = 1024 ** 2;
let env: TestServers;
let base: Record<string, string>;
let ctrl: CsiClient<"Controller">;
let groups: CsiClient<"GroupController">;
let identity: CsiClient<"Identity">;
let nc: NatsConnection;
let journal: JournalClient;
let c1: ServiceProcess;
const procs: ServiceProcess[] = [];

const mountCap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] } };
const code = async (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );
const createVolume = async (name: string, more: Record<string, unknown> = {}) =>
  (await ctrl.CreateVolume({ name, volume_capabilities: [mountCap], capacity_range: { required_bytes: String(4 * MiB) }, ...more })).volume!;
const uuidOf = (id: string) => decomposeVolumeId(id).uuid;
const poolDir = (cluster: string, pool = "default") => path.join(env.dir, "pools", cluster, pool);
const volumeFile = (id: string) => path.join(poolDir("c1"), `csi-vol-${uuidOf(id)}.img`);
const snapshotFile = (uuid: string) => path.join(poolDir("c1"), `csi-snap-${uuid}.img`);
const snapImages = async () => (await readdir(poolDir("c1"))).filter((f) => f.startsWith("csi-snap-")).sort();
async function writeAt(file: string, data: Buffer) {
  const fh = await open(file, "r+");
  await fh.write(data, 0, data.length, MiB);
  await fh.close();
}
async function readAt(file: string, len: number) {
  const fh = await open(file, "r");
  const b = Buffer.alloc(len);
  await fh.read(b, 0, len, MiB);
  await fh.close();
  return b;
}
const startC1 = (extra: Record<string, string> = {}) => spawnService("journal", { ...base, CLUSTER_ID: "c1", CATCHUP_EVERY_MS: "0", ...extra });

before(async () => {
  env = await startTestServers();
  const clustersFile = await writeClustersFile(env.dir, [
    { clusterID: "c1", pools: ["default", "fast"] },
    { clusterID: "c2", pools: ["default"] },
  ]);
  base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: env.dir };
  c1 = await startC1();
  procs.push(await spawnService("journal", { ...base, CLUSTER_ID: "c2" }));
  const sock = `unix://${path.join(env.dir, "controller.sock")}`;
  procs.push(await spawnService("controller", base, { args: ["--endpoint", sock] }));
  ctrl = csiClient(sock, "Controller");
  groups = csiClient(sock, "GroupController");
  identity = csiClient(sock, "Identity");
  nc = await connect({ servers: env.nats.url });
  journal = new JournalClient(nc, 20_000);
});

after(async () => {
  for (const c of [ctrl, groups, identity]) c?.close();
  await Promise.all([c1, ...procs].map((p) => p?.stop()));
  await nc?.close();
  await env?.dispose();
});

describe("GroupController", () => {
  test("the plugin offers the service and its one capability", async () => {
    const caps = (await identity.GetPluginCapabilities({})).capabilities;
    assert.ok(caps.some((c) => c.service?.type === "GROUP_CONTROLLER_SERVICE"));
    const rpcs = (await groups.GroupControllerGetCapabilities({})).capabilities.map((c) => c.rpc?.type);
    assert.deepEqual(rpcs, ["CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"]);
  });

  test("bad requests get their CSI code and leave nothing behind", async () => {
    const a = await createVolume("pvc-args-a");
    const other = await createVolume("pvc-args-c2", { parameters: { clusterID: "c2" } });
    const fast = await createVolume("pvc-args-fast", { parameters: { pool: "fast" } });
    const before = await snapImages();
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ source_volume_ids: [a.volume_id] })), 3, "no name");
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args" })), 3, "no source volumes");
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: [a.volume_id, other.volume_id] })), 3, "two clusters");
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: [a.volume_id, a.volume_id] })), 3, "a volume twice");
    const tooMany = Array.from({ length: 129 }, () => composeVolumeId({ clusterID: "c1", poolID: 1, uuid: randomUUID() }));
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: tooMany })), 3, "past the bound");
    const missing = composeVolumeId({ clusterID: "c1", poolID: 1, uuid: randomUUID() });
    assert.equal(
      await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: [a.volume_id, missing] })),
      5,
      "a volume that does not exist",
    );
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: ["not-an-id"] })), 5, "a malformed id");
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: [a.volume_id, fast.volume_id] })), 9, "two pools");
    assert.equal(await code(groups.GetVolumeGroupSnapshot({})), 3, "get without an id");
    assert.equal(await code(groups.GetVolumeGroupSnapshot({ group_snapshot_id: missing })), 5, "get of a group that does not exist");
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({})), 3, "delete without an id");
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({ group_snapshot_id: missing })), 0, "delete of a group that does not exist");
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({ group_snapshot_id: "not-an-id" })), 0, "delete of a malformed id");
    assert.deepEqual(await snapImages(), before, "no snapshot was cut");
    // The name was never taken: it makes a group now.
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-args", source_volume_ids: [a.volume_id] })), 0);
  });

  test("a group of two volumes: restorable members, idempotent, AlreadyExists, members deleted only with the group", async () => {
    const v1 = await createVolume("pvc-grp-1");
    const v2 = await createVolume("pvc-grp-2");
    const before1 = Buffer.from("first volume, before the group ".repeat(40));
    const before2 = Buffer.from("second volume, before the group ".repeat(40));
    await writeAt(volumeFile(v1.volume_id), before1);
    await writeAt(volumeFile(v2.volume_id), before2);

    const g = (await groups.CreateVolumeGroupSnapshot({ name: "grp-1", source_volume_ids: [v1.volume_id, v2.volume_id], parameters: { retain: "yes" } }))
      .group_snapshot!;
    const gid = decomposeVolumeId(g.group_snapshot_id);
    assert.deepEqual([gid.clusterID, gid.poolID], ["c1", 1], "the group id uses the volume id codec, in the members' pool");
    assert.equal(g.ready_to_use, true);
    assert.equal(g.snapshots.length, 2);
    assert.deepEqual(g.snapshots.map((s) => s.source_volume_id).sort(), [v1.volume_id, v2.volume_id].sort());
    for (const s of g.snapshots) {
      assert.equal(s.group_snapshot_id, g.group_snapshot_id, "every member names its group");
      assert.equal(s.ready_to_use, true);
      assert.deepEqual(s.creation_time, g.creation_time, "the members were recorded together");
      assert.equal(s.size_bytes, String(4 * MiB));
    }
    const memberOf = (v: { volume_id: string }) => g.snapshots.find((s) => s.source_volume_id === v.volume_id)!;

    // The volumes change after the cut; restores from the members have the bytes of the cut.
    await writeAt(volumeFile(v1.volume_id), Buffer.alloc(before1.length, 0x41));
    await writeAt(volumeFile(v2.volume_id), Buffer.alloc(before2.length, 0x42));
    const r1 = await createVolume("pvc-grp-restore-1", { volume_content_source: { snapshot: { snapshot_id: memberOf(v1).snapshot_id } } });
    const r2 = await createVolume("pvc-grp-restore-2", { volume_content_source: { snapshot: { snapshot_id: memberOf(v2).snapshot_id } } });
    assert.deepEqual(await readAt(volumeFile(r1.volume_id), before1.length), before1);
    assert.deepEqual(await readAt(volumeFile(r2.volume_id), before2.length), before2);

    // Idempotent by name and source set (in any order); other members or parameters are AlreadyExists.
    const again = (await groups.CreateVolumeGroupSnapshot({ name: "grp-1", source_volume_ids: [v2.volume_id, v1.volume_id], parameters: { retain: "yes" } }))
      .group_snapshot;
    assert.deepEqual(again, g);
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-1", source_volume_ids: [v1.volume_id], parameters: { retain: "yes" } })), 6);
    assert.equal(await code(groups.CreateVolumeGroupSnapshot({ name: "grp-1", source_volume_ids: [v1.volume_id, v2.volume_id] })), 6);

    // Members are snapshots like any other, that name their group.
    const got = (await ctrl.GetSnapshot({ snapshot_id: memberOf(v1).snapshot_id })).snapshot;
    assert.deepEqual(got, memberOf(v1));
    const listed = (await ctrl.ListSnapshots({ source_volume_id: v2.volume_id })).entries.map((e) => e.snapshot);
    assert.deepEqual(listed, [memberOf(v2)]);
    // ... but cannot be deleted on their own (CSI: DeleteSnapshot of a group member → INVALID_ARGUMENT).
    assert.equal(await code(ctrl.DeleteSnapshot({ snapshot_id: memberOf(v1).snapshot_id })), 3);
    assert.equal(await code(ctrl.GetSnapshot({ snapshot_id: memberOf(v1).snapshot_id })), 0, "still there");

    // Get, with and without the members' ids; the wrong ids are a mismatch.
    const ids = g.snapshots.map((s) => s.snapshot_id);
    assert.deepEqual((await groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id })).group_snapshot, g);
    assert.deepEqual((await groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: [...ids].reverse() })).group_snapshot, g);
    assert.equal(await code(groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: [ids[0]!] })), 3);
    assert.equal(await code(groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: [...ids, r1.volume_id] })), 3);
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: [ids[1]!] })), 3);
    assert.equal(await code(groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id })), 0, "a refused delete deletes nothing");

    // Delete deletes the members and the group; again is OK; the restored volumes stay.
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: ids })), 0);
    assert.equal(await code(groups.GetVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id })), 5);
    for (const s of g.snapshots) {
      assert.equal(await code(ctrl.GetSnapshot({ snapshot_id: s.snapshot_id })), 5, "the member is gone");
      assert.ok(!(await snapImages()).includes(path.basename(snapshotFile(uuidOf(s.snapshot_id)))), "its image is gone");
    }
    assert.equal(await code(groups.DeleteVolumeGroupSnapshot({ group_snapshot_id: g.group_snapshot_id, snapshot_ids: ids })), 0);
    assert.deepEqual(await readAt(volumeFile(r1.volume_id), before1.length), before1);

    // The group's own history; its name is free again.
    const history = await journal.call("c1", "volume.history", { uuid: gid.uuid });
    assert.deepEqual(
      history.events.map((e) => e.event.type),
      ["NameReserved", "GroupSnapshotReserved", "GroupSnapshotCreated", "GroupSnapshotDeleted", "NameReleased"],
    );
    const fresh = (await groups.CreateVolumeGroupSnapshot({ name: "grp-1", source_volume_ids: [v1.volume_id, v2.volume_id] })).group_snapshot!;
    assert.notEqual(fresh.group_snapshot_id, g.group_snapshot_id);
  });

  test("concurrent creates of one group make one group", async () => {
    const vols = [await createVolume("pvc-storm-1"), await createVolume("pvc-storm-2"), await createVolume("pvc-storm-3")];
    const ids = vols.map((v) => v.volume_id);
    const before = (await snapImages()).length;
    const results = await Promise.allSettled(Array.from({ length: 12 }, () => groups.CreateVolumeGroupSnapshot({ name: "grp-storm", source_volume_ids: ids })));
    const ok = results.flatMap((r) => (r.status === "fulfilled" ? [r.value.group_snapshot!] : []));
    for (const r of results) if (r.status === "rejected") assert.equal((r.reason as { code: number }).code, 10, "the others are Aborted");
    assert.ok(ok.length > 0);
    assert.equal(new Set(ok.map((g) => g.group_snapshot_id)).size, 1);
    assert.equal((await snapImages()).length, before + 3, "three members cut, once");
  });
});

describe("a journal killed half way through a group", () => {
  const lastOn = async (subject: string) =>
    (await (await jetstreamManager(nc)).streams.getMessage(subjects.streamName("c1"), { last_by_subj: subject }))?.json() as Record<string, unknown>;
  async function crashDuring(name: string, sourceUuids: string[], after: string) {
    await c1.stop();
    const crashing = await startC1({ JOURNAL_CRASH_AFTER: after, LOCK_TTL_MS: "1000" });
    const dying = journal.call("c1", "groupsnapshot.create", { requestId: randomUUID(), name, sourceUuids }, { timeoutMs: 10_000 });
    assert.equal(
      await dying.then(
        () => "OK",
        (e: DriverError) => e.code,
      ),
      "Unavailable", // it never answers; the client notices its silence and, with no other replica up, says so at once
    );
    assert.equal(await crashing.exited, null, "killed by signal");
    const reserved = (await lastOn(subjects.nameEvents("c1", "grp", "default", name))) as { type: string; uuid: string };
    assert.equal(reserved.type, "NameReserved");
    c1 = await startC1();
    return reserved.uuid;
  }
  async function retryCreate(name: string, sourceUuids: string[]) {
    for (let i = 0; ; i++) {
      try {
        return await journal.call("c1", "groupsnapshot.create", { requestId: randomUUID(), name, sourceUuids });
      } catch (e) {
        if (i > 30 || !(e instanceof DriverError) || e.code !== "Aborted") throw e; // the dead writer's locks, until their TTL
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  test("killed after reserving the group, before any cut: the next create undoes it and cuts afresh", async () => {
    const vols = [await createVolume("pvc-crash-a1"), await createVolume("pvc-crash-a2")];
    const sources = vols.map((v) => uuidOf(v.volume_id));
    const before = await snapImages();
    const dead = await crashDuring("grp-crash-undo", sources, "GroupSnapshotReserved");
    const g = await retryCreate("grp-crash-undo", sources);
    assert.notEqual(g.uuid, dead, "a new group");
    assert.equal(g.readyToUse, true);
    assert.deepEqual(g.snapshots.map((s) => s.sourceUuid).sort(), [...sources].sort());
    const types = (await journal.call("c1", "volume.history", { uuid: dead })).events.map((e) => String(e.event.type));
    assert.deepEqual(
      [...types.slice(0, 2), ...types.slice(2).sort()],
      ["NameReserved", "GroupSnapshotReserved", "NameReleased", "ReservationUndone"],
      "undone (the last two land in one batch)",
    );
    assert.deepEqual(await snapImages(), [...before, ...g.snapshots.map((s) => `csi-snap-${s.uuid}.img`)].sort(), "no orphan image");
  });

  test("killed after cutting every member, before recording the cuts: the next create completes the same group", async () => {
    const vols = [await createVolume("pvc-crash-b1"), await createVolume("pvc-crash-b2")];
    const sources = vols.map((v) => uuidOf(v.volume_id));
    const dead = await crashDuring("grp-crash-complete", sources, "SnapshotReserved");
    const reserved = (await journal.call("c1", "volume.history", { uuid: dead })).events.find((e) => e.event.type === "GroupSnapshotReserved")?.event as {
      members: { volumeUuid: string; snapshotUuid: string }[];
    };
    // The members' reservations were sent together, so all of them landed; the dead writer had got as far as its cuts.
    for (const m of reserved.members) {
      assert.equal((await lastOn(subjects.snapshotEvents("c1", m.snapshotUuid))).type, "SnapshotReserved");
      await copyFile(path.join(poolDir("c1"), `csi-vol-${m.volumeUuid}.img`), snapshotFile(m.snapshotUuid));
      await chmod(snapshotFile(m.snapshotUuid), 0o444);
    }
    const g = await retryCreate("grp-crash-complete", sources);
    assert.equal(g.uuid, dead, "the crashed writer's group, completed");
    assert.equal(g.readyToUse, true);
    assert.deepEqual(g.snapshots.map((s) => s.uuid).sort(), reserved.members.map((m) => m.snapshotUuid).sort());
    assert.ok(g.snapshots.every((s) => s.readyToUse && s.groupSnapshotUuid === dead));
    assert.deepEqual(await journal.call("c1", "groupsnapshot.get", { uuid: dead }), g);
    const types = (await journal.call("c1", "volume.history", { uuid: dead })).events.map((e) => e.event.type);
    assert.deepEqual(types, ["NameReserved", "GroupSnapshotReserved", "GroupSnapshotCreated"]);
  });

  test("killed after reserving the members, before cutting them: the next create undoes the group and its members", async () => {
    const vols = [await createVolume("pvc-crash-c1"), await createVolume("pvc-crash-c2")];
    const sources = vols.map((v) => uuidOf(v.volume_id));
    const dead = await crashDuring("grp-crash-uncut", sources, "SnapshotReserved");
    const reserved = (await journal.call("c1", "volume.history", { uuid: dead })).events.find((e) => e.event.type === "GroupSnapshotReserved")?.event as {
      members: { snapshotUuid: string }[];
    };
    // Reserved, not cut: get shows a member not ready; a list does not show it (CSI: not cut, not listed).
    const first = reserved.members[0]?.snapshotUuid as string;
    assert.equal((await journal.call("c1", "snapshot.get", { uuid: first })).readyToUse, false);
    assert.deepEqual((await journal.call("c1", "snapshot.list", { snapshotUuid: first })).entries, []);
    assert.deepEqual((await journal.call("c1", "snapshot.list", { sourceUuid: sources[0] as string })).entries, []);
    const g = await retryCreate("grp-crash-uncut", sources);
    assert.notEqual(g.uuid, dead);
    for (const m of reserved.members) {
      assert.equal((await lastOn(subjects.snapshotEvents("c1", m.snapshotUuid))).type, "ReservationUndone", "the uncut member is undone");
      assert.equal(
        await journal.call("c1", "snapshot.get", { uuid: m.snapshotUuid }).then(
          () => "OK",
          (e: DriverError) => e.code,
        ),
        "NotFound",
      );
    }
  });
});
