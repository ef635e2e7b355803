/**
 * The node-agent runs as root, so it only undoes what it did (issue 10, node side). Each test is
 * the regression test of one way the agent used to touch what was not its own: real servers,
 * the real agent process over gRPC (and its NATS work queue), real loop devices, mounts and a
 * foreign tmpfs this test mounts itself. The stack's directory plays the CO: it creates the
 * staging directory's and the target's parents, as kubelet does.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { decomposeVolumeId, NODES_STREAM, nodeSubjects, snapshotImageName } from "@csi/contracts";
import { hasControlCharacter } from "@csi/node-agent/testing";
import { csiClient } from "@csi/runtime";
import {
  blockCap,
  codeOf,
  FS_MIN_BYTES,
  freePort,
  loopsUnder,
  MiB,
  mountCap,
  mountsLeftUnder,
  NodeStack,
  type PublishedVolume,
  readyzUntil,
  whyNoDevices,
} from "@csi/testkit";
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";

const skip = whyNoDevices();
const [OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, FAILED_PRECONDITION] = [0, 3, 4, 5, 9];
const TIMEOUT = -1;
let s: NodeStack;

/** The call's gRPC code, or TIMEOUT when it has not answered within `ms` (it used to hang for ever). */
const within = (ms: number, p: Promise<unknown>) => Promise.race([codeOf(p), new Promise<number>((r) => setTimeout(() => r(TIMEOUT), ms).unref())]);
/** The call's error message ("" when it succeeds). */
const messageOf = (p: Promise<unknown>) =>
  p.then(
    () => "",
    (e: { details?: string }) => String(e.details ?? ""),
  );

const mounted = async (p: string) => (await mountsLeftUnder(s.root)).filter((m) => m.mountPoint === p).map((m) => m.fsType);
/** A directory of the test's own (the CO's part: it exists, its parents too). */
const dir = async (...parts: string[]) => {
  const d = s.kubelet(...parts);
  await mkdir(d, { recursive: true });
  return d;
};
const foreignTmpfs = async (...parts: string[]) => {
  const d = await dir(...parts);
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "foreign", d]);
  await writeFile(path.join(d, "precious"), "not the agent's");
  return d;
};

const stageReq = (v: PublishedVolume, staging: string, cap: object = mountCap()) => ({
  volume_id: v.id,
  staging_target_path: staging,
  volume_capability: cap,
  publish_context: v.ctx,
});

describe("the node-agent only touches what is its own", { skip }, () => {
  before(async () => {
    s = await NodeStack.start({ agentEnv: { NODE_OP_TIMEOUT_MS: "20000" } });
  });
  after(async () => {
    await s?.stop();
  });

  test("1: unpublish of a volume the agent never saw leaves a file and a foreign mount alone (NOT_FOUND), over gRPC and NATS", async () => {
    const ghost = `0001-0002-c1-0000000000000001-${randomUUID()}`;
    const file = path.join(await dir("one", "pods", "f"), "target");
    await writeFile(file, "a file the agent did not create");
    const tmpfs = await foreignTmpfs("one", "pods", "tmpfs");
    assert.equal(await codeOf(s.node.NodeUnpublishVolume({ volume_id: ghost, target_path: file })), NOT_FOUND, "regular file");
    assert.equal(await codeOf(s.node.NodeUnpublishVolume({ volume_id: ghost, target_path: tmpfs })), NOT_FOUND, "foreign tmpfs");
    assert.equal(await codeOf(s.node.NodeUnpublishVolume({ volume_id: ghost, target_path: s.kubelet("one", "gone") })), OK, "nothing there");
    const capability = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
    for (const target of [file, tmpfs])
      await s.work({ id: randomUUID(), op: "unpublish", volumeId: ghost, stagingPath: target, targetPath: target, capability });
    assert.equal(await readFile(file, "utf8"), "a file the agent did not create");
    assert.deepEqual(await mounted(tmpfs), ["tmpfs"], "the foreign tmpfs is still mounted");
    assert.equal(await readFile(path.join(tmpfs, "precious"), "utf8"), "not the agent's");
  });

  test("1: unpublish of a staged volume at a target it did not publish leaves that target alone", async () => {
    const v = await s.createAndPublish("pvc-safety-known", blockCap(), 8 * MiB);
    const staging = await dir("known", "staging");
    await s.node.NodeStageVolume(stageReq(v, staging, blockCap()));
    const tmpfs = await foreignTmpfs("known", "pods", "tmpfs");
    assert.equal(await codeOf(s.node.NodeUnpublishVolume({ volume_id: v.id, target_path: tmpfs })), OK, "not published there: OK, nothing done");
    assert.deepEqual(await mounted(tmpfs), ["tmpfs"]);
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
  });

  test("2: stage and publish refuse a path where a foreign filesystem is mounted (FAILED_PRECONDITION)", async () => {
    const v = await s.createAndPublish("pvc-safety-foreign", mountCap(), FS_MIN_BYTES);
    const tmpfs = await foreignTmpfs("two", "staging");
    assert.equal(await codeOf(s.node.NodeStageVolume(stageReq(v, tmpfs))), FAILED_PRECONDITION);
    assert.deepEqual(await mounted(tmpfs), ["tmpfs"], "still the foreign tmpfs, and only it");
    assert.deepEqual(await loopsUnder(s.root), [], "nothing attached");

    const staging = await dir("two", "real-staging");
    await s.node.NodeStageVolume(stageReq(v, staging));
    const target = await foreignTmpfs("two", "pods", "t");
    const publish = { volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: mountCap() };
    assert.equal(await codeOf(s.node.NodePublishVolume(publish)), FAILED_PRECONDITION);
    assert.deepEqual(await mounted(target), ["tmpfs"]);
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
  });

  test("3: paths under /proc, /sys, /dev answer INVALID_ARGUMENT at once, and the volume's lock stays free", async () => {
    const v = await s.createAndPublish("pvc-safety-proc", mountCap(), FS_MIN_BYTES);
    for (const p of ["/proc/csi-x/y/z", "/proc/self/cwd/x", "/sys/kernel/csi-x", "/dev/csi-x/y"]) {
      assert.equal(await within(10_000, s.node.NodeStageVolume(stageReq(v, p))), INVALID_ARGUMENT, `stage at ${p}`);
    }
    const staging = await dir("three", "staging");
    assert.equal(await within(30_000, s.node.NodeStageVolume(stageReq(v, staging))), OK, "the lock is free");
    const publish = (target: string) => ({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: mountCap() });
    assert.equal(await within(10_000, s.node.NodePublishVolume(publish("/proc/csi-x/y"))), INVALID_ARGUMENT);
    assert.equal(await within(30_000, s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging })), OK);
  });

  test("3: a step that exceeds the operation's deadline fails with DEADLINE_EXCEEDED and frees the volume", async () => {
    // A small ext4 volume: its mkfs takes well under the deadline even on a busy machine.
    const ext4 = mountCap("SINGLE_NODE_WRITER", "ext4");
    const v = await s.createAndPublish("pvc-safety-deadline", ext4, 32 * MiB);
    const staging = await dir("deadline", "staging");
    // This agent's first mount(8) blocks (a real `sleep` of an hour runs before it) and its
    // deadline is 10 s: time enough for the next call's attach, mkfs and mount on a busy machine.
    await s.restartAgent({ env: { NODE_OP_TIMEOUT_MS: "10000", NODE_STALL_BEFORE: "mount" } });
    try {
      const started = Date.now();
      assert.equal(await within(90_000, s.node.NodeStageVolume(stageReq(v, staging, ext4))), DEADLINE_EXCEEDED);
      assert.ok(Date.now() - started < 60_000, `answered after ${Date.now() - started} ms: at its deadline, not when the stalled step ends`);
      assert.deepEqual(await mounted(staging), [], "nothing half done: not mounted");
      assert.equal(await within(30_000, s.node.NodeStageVolume(stageReq(v, staging, ext4))), OK, "the next call on the volume runs");
      assert.deepEqual(await mounted(staging), ["ext4"]);
      await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
    } finally {
      await s.restartAgent({ env: { NODE_OP_TIMEOUT_MS: "20000" } });
    }
  });

  test("4: the image a stage attaches comes from the volume id, never from publish_context.imageName", async () => {
    const v = await s.createAndPublish("pvc-safety-image", blockCap(), 8 * MiB);
    const snap = (await s.ctrl.CreateSnapshot({ name: "snap-safety-image", source_volume_id: v.id })).snapshot!;
    const snapImage = snapshotImageName(decomposeVolumeId(snap.snapshot_id).uuid);
    const staging = await dir("four", "staging");
    const hostile = { ...stageReq(v, staging, blockCap()), publish_context: { ...v.ctx, imageName: snapImage } };
    assert.equal(await codeOf(s.node.NodeStageVolume(hostile)), INVALID_ARGUMENT);
    assert.deepEqual(await loopsUnder(s.root), [], "the snapshot's image was not attached");
    // Without any publish context the volume's own image is found from its id.
    await s.node.NodeStageVolume({ ...stageReq(v, staging, blockCap()), publish_context: {} });
    const loops = await loopsUnder(s.root);
    assert.deepEqual(
      loops.map((l) => l.backingFile),
      [v.ctx.imagePath],
    );
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
  });

  test("5: publish refuses a non-empty directory, a missing parent and a symlink; unstage at another path is NOT_FOUND", async () => {
    const v = await s.createAndPublish("pvc-safety-five", mountCap(), FS_MIN_BYTES);
    const staging = await dir("five", "staging");
    await s.node.NodeStageVolume(stageReq(v, staging));
    const publish = (target: string) =>
      s.node.NodePublishVolume({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: mountCap() });

    const full = await dir("five", "pods", "full");
    await writeFile(path.join(full, "data"), "kept");
    assert.equal(await codeOf(publish(full)), FAILED_PRECONDITION, "non-empty directory");
    assert.deepEqual(await mounted(full), []);

    const deep = path.join(s.root, "kubelet", "five", "no", "such", "parent", "target"); // no parent made
    assert.equal(await codeOf(publish(deep)), FAILED_PRECONDITION, "the CO creates the target's parent");
    assert.ok(!existsSync(s.kubelet("five", "no")), "no directory tree was made");

    const elsewhere = await dir("five", "elsewhere");
    const link = path.join(s.root, "kubelet", "five", "link");
    await symlink(elsewhere, link);
    assert.equal(await codeOf(publish(path.join(link, "target"))), INVALID_ARGUMENT, "symlink component");
    assert.equal(await codeOf(publish(link)), INVALID_ARGUMENT, "symlink as the target");
    assert.deepEqual(await readdir(elsewhere), [], "nothing made through the link");
    assert.deepEqual(await mounted(elsewhere), []);

    const other = await dir("five", "other-staging");
    assert.equal(await codeOf(s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: other })), NOT_FOUND);
    assert.deepEqual(await mounted(staging), [hasFs(v)], "still staged at its own path");
    await s.node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
  });

  test("5: an oversized or control-character path is INVALID_ARGUMENT with a short, clean message", async () => {
    const v = await s.createAndPublish("pvc-safety-long", blockCap(), 8 * MiB);
    for (const p of [`/${"a".repeat(4095)}`, `${s.kubelet("x")}/${"b".repeat(300)}`, `${s.kubelet("x")}\n\u0007\u001b[31m`, `${s.kubelet("x")}\u0000y`]) {
      const msg = await messageOf(s.node.NodeStageVolume(stageReq(v, p, blockCap())));
      assert.equal(await codeOf(s.node.NodeStageVolume(stageReq(v, p, blockCap()))), INVALID_ARGUMENT);
      assert.ok(msg.length > 0 && msg.length <= 256, `short message (${msg.length} characters)`);
      assert.ok(!hasControlCharacter(msg), "no control character echoed");
    }
    assert.deepEqual(await loopsUnder(s.root), []);
  });

  test("6: a registration that cannot be read back makes the agent not ready (/readyz), loudly; its CSI Probe (the liveness probe) still answers", async () => {
    const identity = () => csiClient(`unix://${path.join(s.root, "node.sock")}`, "Identity");
    const ready = async () => {
      const c = identity();
      try {
        return (await c.Probe({})).ready?.value;
      } finally {
        c.close();
      }
    };
    assert.equal(await ready(), true);
    const jsm = await jetstreamManager(s.nc);
    const original = (await jsm.streams.info(NODES_STREAM)).config;
    // A damaged nodes stream: publishes are acknowledged, but nothing is kept to be read. The agent
    // never becomes ready (no READY_FILE), so it is not waited for: its /readyz (on a port of our
    // choosing) says when it has started, and names the failing check.
    const ops = `http://127.0.0.1:${await freePort()}`;
    await s.restartAgent({
      meanwhile: async () => {
        await jsm.streams.delete(NODES_STREAM);
        await jsm.streams.add({ name: NODES_STREAM, subjects: [nodeSubjects.wildcard], storage: StorageType.File, retention: RetentionPolicy.Interest });
      },
      env: { METRICS_ADDR: ops.slice("http://".length) },
      waitReady: false,
    });
    try {
      const r = await readyzUntil(ops, (x) => x.body.failing !== "starting", 30_000);
      assert.equal(r.status, 503);
      assert.equal(r.body.failing, "registration", JSON.stringify(r.body));
      // Not ready (/readyz), but alive: the CSI Probe is the kubelet's liveness probe (through the
      // livenessprobe sidecar), and a restart would not bring the registration back.
      assert.equal(await ready(), true);
      await s.agent.untilLog((l) => /"level":50/.test(l) && /registration/.test(l), "an error about its registration");
    } finally {
      await s.restartAgent({
        meanwhile: async () => {
          await jsm.streams.delete(NODES_STREAM);
          await jsm.streams.add(original);
        },
      });
    }
    assert.equal(await ready(), true);
  });
});

/** What the volume's staging mount shows in mountinfo. */
function hasFs(_v: PublishedVolume): string {
  return mountCap().mount.fs_type;
}
