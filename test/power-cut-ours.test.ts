/**
 * What we write ourselves survives a power cut under the strict POSIX rule (a name is durable only
 * once its directory is fsynced; the power-cut harness's `strict`), not only under ext4's: the file
 * pool's images (create, resize, snapshot, clone, delete — each cut right after it returned), the
 * pool directory itself, the node-agent's state file and its directory, the durable-file helpers of
 * @csi/runtime, and the configuration files the stack writes for its servers. (What nats-server and
 * Redis write is theirs: docs/operations.md, "Durability", says which filesystems we need for it.)
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { FilePool } from "@csi/journal/pools";
import { StateFile } from "@csi/node-agent/testing";
import { mkdirDurable, writeFileDurable } from "@csi/runtime";
import { cleanupUnder, ensurePowercut, mountPowercut, type PowercutMount, tempDir, writeConfigDurable } from "@csi/testkit";
import { z } from "zod";

const skip = ensurePowercut();
const MiB = 1024 * 1024;

describe("what we write survives a power cut, under the strict rule", { skip }, () => {
  let root: string;
  let mnt: string;
  let disk = 0;
  let pc: PowercutMount;

  /** Cut the power now; the durable tree is put back at the same place (a new backing directory). */
  const cut = async () => {
    await pc.cut();
    const next = path.join(root, `disk-${++disk}`);
    await mkdir(next);
    await pc.reconstruct(next);
    await pc.unmount();
    pc = await mountPowercut({ backing: next, mountpoint: mnt, rule: "strict" });
  };

  before(async () => {
    root = await tempDir("csi-power-ours-");
    mnt = path.join(root, "mnt");
    await Promise.all([mkdir(mnt), mkdir(path.join(root, "disk-0"))]);
    pc = await mountPowercut({ backing: path.join(root, "disk-0"), mountpoint: mnt, rule: "strict" });
  });
  after(async () => {
    await pc?.unmount();
    await cleanupUnder(root);
  });

  it("the file pool: each change is on disk once the pool returns", async () => {
    const pool = () => new FilePool({ name: "p", id: 1, root: path.join(mnt, "pools", "c", "p") });
    const file = (name: string) => path.join(mnt, "pools", "c", "p", `${name}.img`);
    await pool().createImage("csi-vol-a", 8 * MiB);
    await cut();
    assert.equal(statSync(file("csi-vol-a")).size, 8 * MiB, "a created image (and the pool's directories) after a cut");
    await pool().resizeImage("csi-vol-a", 16 * MiB);
    await cut();
    assert.equal(statSync(file("csi-vol-a")).size, 16 * MiB, "a resized image keeps its new size");
    await pool().snapshotImage("csi-vol-a", "csi-snap-s");
    await cut();
    assert.equal(statSync(file("csi-snap-s")).size, 16 * MiB, "a snapshot's copy");
    assert.equal(statSync(file("csi-snap-s")).mode & 0o777, 0o444, "read-only, as built");
    await pool().cloneImage("csi-snap-s", "csi-vol-b", 32 * MiB);
    await cut();
    assert.equal(statSync(file("csi-vol-b")).size, 32 * MiB, "a clone, at its size");
    await pool().deleteImage("csi-vol-a");
    await cut();
    assert.equal(existsSync(file("csi-vol-a")), false, "a deleted image stays deleted");
    assert.deepEqual((await pool().listImages()).map((i) => i.name).sort(), ["csi-snap-s", "csi-vol-b"]);
  });

  it("the node-agent's state file, in a directory it made", async () => {
    const state = new StateFile(path.join(mnt, "node", "n1", "state.json"), z.object({ staged: z.array(z.string()) }));
    await state.save({ staged: ["v1"] });
    await cut();
    assert.deepEqual(await state.load(), { staged: ["v1"] });
    await state.save({ staged: ["v1", "v2"] });
    await cut();
    assert.deepEqual(await state.load(), { staged: ["v1", "v2"] });
  });

  it("the runtime's helpers and the servers' configuration files", async () => {
    await mkdirDurable(path.join(mnt, "a", "b", "c"));
    await writeFileDurable(path.join(mnt, "d", "e", "f.json"), "{}\n");
    writeConfigDurable(path.join(mnt, "nats", "x.server.conf"), "jetstream { sync_interval: always }\n");
    await cut();
    assert.ok(statSync(path.join(mnt, "a", "b", "c")).isDirectory());
    assert.equal(readFileSync(path.join(mnt, "d", "e", "f.json"), "utf8"), "{}\n");
    assert.equal(readFileSync(path.join(mnt, "nats", "x.server.conf"), "utf8"), "jetstream { sync_interval: always }\n");
  });
});
