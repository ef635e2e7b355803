/**
 * `npm start -- --ceph` (scripts/start.ts) end to end, on a real single-node Ceph the stack starts
 * itself under <dataDir>/ceph (skipped, with the reason, only where Ceph's packages cannot be
 * installed): the stack comes up, a CreateVolume through the controller's socket (no parameters:
 * the default pool is the RBD one) makes an RBD image (`rbd ls`), SIGTERM stops everything (exit 0,
 * the Ceph daemons gone), and a second start over the same data directory finds the volume and its
 * image again; DeleteVolume removes it.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rm } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { decomposeVolumeId, MiB } from "@csi/contracts";
import { csiClient } from "@csi/runtime";
import { spawnStart, tempDir, whyNoCeph } from "@csi/testkit";
import { processStart } from "../scripts/lib/stack-lock.js";

const run = promisify(execFile);
const noCeph = whyNoCeph();

/** `npm start -- --ceph` over `dir` until ready: its process and the ready line's fields. */
async function startWithCeph(dir: string) {
  const started = spawnStart(dir, { CEPH: "1" });
  let out = "";
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      const line = out.split("\n").find((l) => l.includes('"msg":"csi stack ready"'));
      if (line) resolve(JSON.parse(line) as Record<string, unknown>);
    };
    started.child.stdout.on("data", onData);
    started.child.stderr.on("data", onData);
    started.exited.then((c) => reject(new Error(`npm start exited ${c}:\n${out.slice(-4000)}`)));
  });
  const stop = async () => {
    if (started.child.exitCode !== null || started.child.signalCode !== null) return started.exited;
    started.child.kill("SIGTERM");
    return started.exited;
  };
  return { ...started, ready, stop, output: () => out };
}

const alive = (pid: number) => processStart(pid) !== undefined;

test("npm start -- --ceph: the stack on a local Ceph it starts itself; a volume is an RBD image; Ctrl-C stops it all; the next start finds it again", {
  skip: noCeph,
}, async (t) => {
  const dir = await tempDir("csi-stack-ceph-");
  const stops: (() => Promise<unknown>)[] = [];
  t.after(async () => {
    for (const s of stops.reverse()) await s();
    await rm(dir, { recursive: true, force: true });
  });
  const conf = path.join(dir, "data", "ceph", "ceph.conf");
  const ls = async () => JSON.parse((await run("rbd", ["ls", "rbd", "--format", "json"], { env: { ...process.env, CEPH_CONF: conf } })).stdout) as string[];
  const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4" } };

  const first = await startWithCeph(dir);
  stops.push(first.stop);
  const ceph = first.ready.ceph as { dir: string; pids: Record<string, number> };
  assert.equal(ceph.dir, path.join(dir, "data", "ceph"), "its data under <dataDir>/ceph");
  const ctrl = csiClient(`unix://${path.join(first.runDir, "csi-controller.sock")}`, "Controller");
  let volumeId: string;
  try {
    const v = (await ctrl.CreateVolume({ name: "pvc-on-ceph", volume_capabilities: [cap], capacity_range: { required_bytes: String(8 * MiB) } })).volume!;
    volumeId = v.volume_id;
  } finally {
    ctrl.close();
  }
  const image = `csi-vol-${decomposeVolumeId(volumeId).uuid}`;
  assert.ok((await ls()).includes(image), "rbd ls shows the volume's image");

  assert.equal(await first.stop(), 0, "SIGTERM (Ctrl-C) stops the stack cleanly");
  const pids = Object.values(ceph.pids);
  assert.equal(pids.length, 3);
  assert.deepEqual(pids.filter(alive), [], "the Ceph daemons are gone");

  // Started again over the same data: the same cluster, the volume and its image are there.
  const second = await startWithCeph(dir);
  stops.push(second.stop);
  const again = csiClient(`unix://${path.join(second.runDir, "csi-controller.sock")}`, "Controller");
  try {
    const listed = (await again.ListVolumes({})).entries.map((e) => e.volume?.volume_id);
    assert.deepEqual(listed, [volumeId]);
    assert.ok((await ls()).includes(image), "the image survived the restart");
    await again.DeleteVolume({ volume_id: volumeId });
    assert.ok(!(await ls()).includes(image));
  } finally {
    again.close();
  }
  assert.equal(await second.stop(), 0);
  assert.deepEqual(Object.values((second.ready.ceph as { pids: Record<string, number> }).pids).filter(alive), []);
});
