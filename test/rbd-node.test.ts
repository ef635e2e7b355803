/**
 * The node side of RBD on a real single-node Ceph (skipped, with the reason, only where Ceph's
 * packages cannot be installed or the machine has no loop devices): a volume the journal made on
 * an RBD pool, through the controller, staged and published through the node-agent's CSI socket —
 * mapped by rbd-fuse + a loop device (this machine has no rbd or nbd module) — written,
 * unpublished and unstaged (no mount, loop device, rbd-fuse process or watcher left), staged and
 * published again with its data, grown online (xfs), deleted; the same for a block volume. Then the failures: rbd-fuse
 * SIGKILLed under a published volume (the running agent's healer replaces the mapping), the
 * node-agent SIGKILLed (rbd-fuse lives on) and rbd-fuse killed while the agent is down (the
 * healer at start replaces it). `after` takes down every mount, loop device and rbd-fuse under
 * the test's directory, then Ceph, pass or fail.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { open, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { RBD_MAPPING_KEY, TOPOLOGY_KEY } from "@csi/contracts";
import {
  blockCap,
  type CephCluster,
  codeOf,
  FS_MIN_BYTES,
  FS_TYPE,
  loopsUnder,
  MiB,
  mountCap,
  mountsLeftUnder,
  NodeStack,
  type PublishedVolume,
  rbdFuseProcesses,
  rbdTestPool,
  startCeph,
  whyNoCeph,
  whyNoDevices,
} from "@csi/testkit";

const skip = whyNoDevices() ?? whyNoCeph();
let ceph: CephCluster;
let stack: NodeStack;

const imageOf = (v: PublishedVolume) => `csi-vol-${v.uuid}`;
const fuseDirOf = (v: PublishedVolume) => path.join(stack.root, "node-state", "rbd", `c1-1-${imageOf(v)}`);
const watchers = async (v: PublishedVolume) => ((await ceph.rbdJson(["status", `rbd/${imageOf(v)}`])) as { watchers: unknown[] }).watchers.length;
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function stage(v: PublishedVolume, staging: string): Promise<void> {
  await stack.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: mountCap(), publish_context: v.ctx });
}
async function publish(v: PublishedVolume, staging: string, target: string): Promise<void> {
  await stack.node.NodePublishVolume({
    volume_id: v.id,
    staging_target_path: staging,
    target_path: target,
    volume_capability: mountCap(),
    publish_context: v.ctx,
    readonly: false,
  });
}
async function unpublishUnstage(v: PublishedVolume, staging: string, target: string): Promise<void> {
  await stack.node.NodeUnpublishVolume({ volume_id: v.id, target_path: target });
  await stack.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
}
/** A file of random bytes written through the mount and fsynced; its hash. */
async function writeData(dir: string, bytes = MiB): Promise<string> {
  const data = randomBytes(bytes);
  await writeFile(path.join(dir, "data"), data, { flush: true });
  return sha(data);
}
const readData = async (dir: string) => sha(await readFile(path.join(dir, "data")));

/** A new RBD volume staged and published here (as pod `name`), with data written: the hash of it. */
async function publishedWithData(name: string) {
  const v = await stack.createAndPublish(`pvc-rbd-${name}`, mountCap(), FS_MIN_BYTES);
  const staging = stack.kubelet(`stage-${name}`);
  const target = stack.kubelet("pods", name, "vol");
  await stage(v, staging);
  await publish(v, staging, target);
  return { v, staging, target, hash: await writeData(target) };
}

/** Waits (polling the volume's history, up to `timeoutMs`) until a healer report after `since` says `state`; the ms from `since` to that report. */
async function healerReport(v: PublishedVolume, state: string, since: string, timeoutMs = 90_000): Promise<number> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const reports = await stack.deviceReports(v.uuid, () => true);
    const found = reports.find((r) => r.via === "healer" && r.state === state && r.at > since);
    if (found) return Date.parse(found.at) - Date.parse(since);
    if (Date.now() > end) {
      const log = stack.agent.logs.filter((l) => /heal|fuse|mapping|"level":[45]0/.test(l)).slice(-20);
      assert.fail(`no "${state}" report from the healer: ${JSON.stringify(reports.map((r) => [r.state, r.via, r.reason]))}\n${log.join("\n")}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("RBD volumes on a node: rbd-fuse + loop", { skip }, () => {
  before(async () => {
    ceph = await startCeph();
    stack = await NodeStack.start({ pools: [rbdTestPool("ceph", ceph)], agentEnv: { NODE_OP_TIMEOUT_MS: "180000" } });
  });
  after(async () => {
    await stack?.stop(); // unmounts, detaches and takes down the rbd-fuse mounts under its directory, pass or fail
    const left = stack ? await rbdFuseProcesses(stack.root) : [];
    for (const p of left) process.kill(p.pid, "SIGKILL");
    await ceph?.stop();
  });

  test("NodeGetInfo names how the node maps RBD images (a topology segment a pool can require)", async () => {
    const info = await stack.node.NodeGetInfo({});
    assert.deepEqual(info.accessible_topology?.segments, { [TOPOLOGY_KEY]: stack.nodeId, [RBD_MAPPING_KEY]: "fuse" });
  });

  test("stage, publish, write; unpublish, unstage leave nothing; stage and publish again: the data is there; grow online; delete", async () => {
    const v = await stack.createAndPublish("pvc-rbd-node", mountCap(), FS_MIN_BYTES);
    assert.equal(v.ctx.poolKind, "rbd");
    const staging = stack.kubelet("stage-1");
    const target = stack.kubelet("pods", "p1", "vol");
    const t0 = performance.now();
    await stage(v, staging);
    const stageMs = performance.now() - t0;
    await publish(v, staging, target);
    const attached = await stack.deviceReports(v.uuid, (rs) => rs.some((r) => r.state === "attached"));
    assert.equal(attached.find((r) => r.state === "attached")?.mapping, "fuse", "the attached report names the mapping");
    assert.equal((await rbdFuseProcesses(stack.root)).length, 1, "one rbd-fuse, for this image");
    assert.equal(await watchers(v), 1);
    const hash = await writeData(target);
    const dd = spawnSync("dd", ["if=/dev/zero", `of=${path.join(target, "dd")}`, "bs=1M", "count=64", "conv=fsync"], { encoding: "utf8" });
    console.log(
      `# rbd-fuse stage (first, mkfs.${FS_TYPE} on ${FS_MIN_BYTES / MiB} MiB): ${stageMs.toFixed(0)} ms; dd 64 MiB, fsync: ${dd.stderr.trim().split("\n").at(-1)}`,
    );

    await unpublishUnstage(v, staging, target);
    assert.deepEqual(await mountsLeftUnder(stack.root), [], "no mount left, the rbd-fuse one included");
    assert.deepEqual(await loopsUnder(stack.root), []);
    assert.deepEqual(await rbdFuseProcesses(stack.root), []);
    assert.equal(existsSync(fuseDirOf(v)), false, "its directory removed");
    assert.equal(await watchers(v), 0, "nothing on this node holds the image any more");

    const t1 = performance.now();
    await stage(v, staging);
    console.log(`# rbd-fuse stage again (filesystem there): ${(performance.now() - t1).toFixed(0)} ms`);
    await publish(v, staging, target);
    assert.equal(await readData(target), hash, "the data survived unpublish, unstage and a new mapping");

    await stack.ctrl.ControllerExpandVolume({ volume_id: v.id, capacity_range: { required_bytes: String(2 * FS_MIN_BYTES) } });
    const grown = await stack.node.NodeExpandVolume({ volume_id: v.id, volume_path: target, capacity_range: { required_bytes: String(2 * FS_MIN_BYTES) } });
    assert.equal(grown.capacity_bytes, String(2 * FS_MIN_BYTES));
    const stats = await stack.node.NodeGetVolumeStats({ volume_id: v.id, volume_path: target });
    assert.ok(Number(stats.usage?.[0]?.total) > FS_MIN_BYTES, `the filesystem grew: ${JSON.stringify(stats.usage)}`);
    assert.equal(stats.volume_condition?.abnormal, false);

    await unpublishUnstage(v, staging, target);
    await stack.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: stack.nodeId });
    await stack.ctrl.DeleteVolume({ volume_id: v.id });
    assert.ok(!((await ceph.rbdJson(["ls", "rbd"])) as string[]).includes(imageOf(v)), "deleted: no watcher of this node was in the way");
  });

  test("a block volume: its loop device published at a file, written, unpublished, unstaged; staged and published again with its bytes", async () => {
    const v = await stack.createAndPublish("pvc-rbd-block", blockCap(), 16 * MiB);
    const staging = stack.kubelet("stage-block");
    const target = stack.kubelet("pods", "block", "dev");
    const data = randomBytes(MiB);
    const once = async (body: () => Promise<void>) => {
      await stack.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
      await stack.node.NodePublishVolume({
        volume_id: v.id,
        staging_target_path: staging,
        target_path: target,
        volume_capability: blockCap(),
        readonly: false,
      });
      await body();
      await unpublishUnstage(v, staging, target);
    };
    await once(async () => {
      const fh = await open(target, "r+");
      await fh.write(data, 0, data.length, 4 * MiB);
      await fh.sync();
      await fh.close();
    });
    assert.deepEqual(await rbdFuseProcesses(stack.root), []);
    await once(async () => {
      const fh = await open(target, "r");
      const back = Buffer.alloc(MiB);
      await fh.read(back, 0, MiB, 4 * MiB);
      await fh.close();
      assert.equal(sha(back), sha(data));
    });
    await stack.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: stack.nodeId });
    await stack.ctrl.DeleteVolume({ volume_id: v.id });
  });

  test("a publish context naming another image or Ceph pool is refused, and a volume without an image is NotFound: nothing is left mounted", async () => {
    const v = await stack.createAndPublish("pvc-rbd-ctx", mountCap(), FS_MIN_BYTES);
    const staging = stack.kubelet("stage-ctx");
    const other = (ctx: Record<string, string>) =>
      codeOf(
        stack.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: mountCap(), publish_context: { ...v.ctx, ...ctx } }),
      );
    assert.equal(await other({ imageName: "csi-vol-00000000-0000-4000-8000-000000000000" }), 3);
    assert.equal(await other({ cephPool: "elsewhere" }), 3);
    await stack.ctrl.ControllerUnpublishVolume({ volume_id: v.id, node_id: stack.nodeId });
    await stack.ctrl.DeleteVolume({ volume_id: v.id });
    assert.equal(await codeOf(stage(v, staging)), 5, "its image is gone");
    assert.deepEqual(await mountsLeftUnder(stack.root), []);
    assert.deepEqual(await rbdFuseProcesses(stack.root), []);
  });

  test("rbd-fuse SIGKILLed under a published volume: the agent replaces the loop device and the mounts; the data is read back from Ceph", async () => {
    const { v, staging, target, hash } = await publishedWithData("kill");
    const [fuse] = await rbdFuseProcesses(stack.root);
    assert.ok(fuse);
    const killedAt = new Date().toISOString();
    process.kill(fuse.pid, "SIGKILL");
    const healMs = await healerReport(v, "published", killedAt); // the last step of the repair: the target bound again
    console.log(`# rbd-fuse SIGKILLed → the target bound again on a new mapping by the running agent: ${healMs} ms (checks every 5 s)`);
    const now = await rbdFuseProcesses(stack.root);
    assert.equal(now.length, 1);
    assert.notEqual(now[0]?.pid, fuse.pid, "a new rbd-fuse");
    assert.equal(await readData(target), hash, "the data, through the new mapping");
    assert.equal((await loopsUnder(stack.root)).length, 1, "the stale loop device was detached");
    const stats = await stack.node.NodeGetVolumeStats({ volume_id: v.id, volume_path: target });
    assert.equal(stats.volume_condition?.abnormal, false, stats.volume_condition?.message);
    await unpublishUnstage(v, staging, target);
    assert.deepEqual(await mountsLeftUnder(stack.root), []);
    assert.deepEqual(await rbdFuseProcesses(stack.root), []);
    // The killed rbd-fuse's watch on the image stays until the OSD times it out (~30 s; docs/backends.md): not waited for here.
  });

  test("rbd-fuse SIGKILLed while a process holds a file open on the volume: the repair waits (reported failed) until it lets go", async () => {
    const { v, target, staging, hash } = await publishedWithData("busy");
    const held = await open(path.join(target, "data"), "r");
    const [fuse] = await rbdFuseProcesses(stack.root);
    assert.ok(fuse);
    const killedAt = new Date().toISOString();
    process.kill(fuse.pid, "SIGKILL");
    await healerReport(v, "failed", killedAt); // the target cannot be unmounted: busy; never unmounted lazily
    assert.equal((await stack.deviceReports(v.uuid, () => true)).filter((r) => r.via === "healer" && r.at > killedAt && r.state === "published").length, 0);
    await held.close();
    const healMs = await healerReport(v, "published", killedAt);
    console.log(`# rbd-fuse SIGKILLed under an open file: repaired ${healMs} ms after the kill (the first retry comes 10 s after the failed repair)`);
    assert.equal(await readData(target), hash);
    await unpublishUnstage(v, staging, target);
    assert.deepEqual(await mountsLeftUnder(stack.root), []);
  });

  test("node-agent SIGKILLed: rbd-fuse lives on and the restarted agent leaves it; rbd-fuse killed while the agent is down: the healer at start replaces it", async () => {
    const { v, staging, target, hash } = await publishedWithData("agent");
    const [before] = await rbdFuseProcesses(stack.root);
    await stack.restartAgent({ kill: true });
    const [after] = await rbdFuseProcesses(stack.root);
    assert.equal(after?.pid, before?.pid, "the same rbd-fuse: a node-agent restart does not touch a live mapping");
    assert.equal(await readData(target), hash);

    const killedAt = new Date().toISOString();
    await stack.restartAgent({
      kill: true,
      meanwhile: async () => {
        for (const p of await rbdFuseProcesses(stack.root)) process.kill(p.pid, "SIGKILL");
      },
    });
    console.log(
      `# rbd-fuse killed while the agent was down → target bound again by the healer at start: ${await healerReport(v, "published", killedAt)} ms after the kill (agent start included)`,
    );
    assert.equal(await readData(target), hash, "the data, through the mapping the healer made at start");
    await unpublishUnstage(v, staging, target);
    assert.deepEqual(await mountsLeftUnder(stack.root), []);
    assert.deepEqual(await rbdFuseProcesses(stack.root), []);
  });
});
