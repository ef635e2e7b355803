/**
 * The mapping contract (test/contracts/mapping.contract.ts) held against each mapping of the
 * node-agent, for real: the loop mapping over sparse files of a file pool in a temporary directory
 * (loop devices, as root), and the rbd-fuse + loop mapping on a real single-node Ceph started for
 * this file (skipped, with the reason, only where Ceph's packages cannot be installed).
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { open, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { type Clusters, composeVolumeId, MiB, resolveClusters, volumeImageName } from "@csi/contracts";
import { FuseMapping, LoopMapping, type MappedVolume } from "@csi/node-agent/testing";
import { type CephCluster, rbdFuseProcesses, rbdTestPool, startCeph, tempDir, whyNoCeph } from "@csi/testkit";
import { mappingContract } from "./contracts/mapping.contract.js";

const losetup = (...args: string[]): string => {
  const r = spawnSync("losetup", args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`losetup ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
};

/** A loop device over a file of a directory of its own: what no mapping of ours made. */
async function foreignLoops(): Promise<{ make(): Promise<string>; close(): Promise<void> }> {
  const dir = await tempDir("csi-foreign-loop-");
  const devices: string[] = [];
  return {
    make: async () => {
      const file = path.join(dir, `f${devices.length}.img`);
      await sparseFile(file, MiB);
      const device = losetup("--find", "--show", file);
      devices.push(device);
      return device;
    },
    close: async () => {
      for (const d of devices) spawnSync("losetup", ["--detach", d]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function sparseFile(file: string, bytes: number): Promise<void> {
  const fh = await open(file, "wx");
  await fh.truncate(bytes);
  await fh.close();
}

const fileClusters = (root: string): Clusters => resolveClusters({ clusters: [{ clusterID: "c1", pools: [{ name: "files", id: 1, root }] }] }, root);

mappingContract("loop over a file pool's files", async () => {
  const root = await tempDir("csi-mapping-loop-");
  const clusters = fileClusters(root);
  const foreign = await foreignLoops();
  const mapping = new LoopMapping(clusters);
  await mapping.prepare();
  return {
    mapping,
    newImage: async (bytes) => {
      const uuid = randomUUID();
      await sparseFile(path.join(root, `${volumeImageName(uuid)}.img`), bytes);
      return { volumeId: composeVolumeId({ clusterID: "c1", poolID: 1, uuid }), clusterID: "c1", poolID: 1, imageName: volumeImageName(uuid) };
    },
    restarted: async () => new LoopMapping(clusters),
    breakCarrier: async (_v: MappedVolume, device: string) => void losetup("--detach", device),
    foreignDevice: () => foreign.make(),
    close: async () => {
      await foreign.close();
      await rm(root, { recursive: true, force: true });
    },
  };
});

const noCeph = whyNoCeph();
let ceph: CephCluster | undefined;
before(async () => {
  if (!noCeph) ceph = await startCeph();
});
after(() => ceph?.stop());

if (noCeph) test("mapping contract: rbd-fuse + loop", { skip: noCeph }, () => {});
else
  mappingContract("rbd-fuse + loop on a real Ceph", async () => {
    const c = ceph as CephCluster;
    const dir = await tempDir("csi-mapping-fuse-");
    const rbdDir = path.join(dir, "rbd");
    const clusters = resolveClusters({ clusters: [{ clusterID: "c2", pools: [{ ...rbdTestPool("ceph", c), id: 2 }] }] }, dir);
    const foreign = await foreignLoops();
    const make = async () => {
      const m = new FuseMapping(clusters, rbdDir);
      await m.prepare();
      return m;
    };
    return {
      mapping: await make(),
      newImage: async (bytes) => {
        const uuid = randomUUID();
        await c.rbd(["create", "--size", `${bytes / MiB}M`, `rbd/${volumeImageName(uuid)}`]);
        return { volumeId: composeVolumeId({ clusterID: "c2", poolID: 2, uuid }), clusterID: "c2", poolID: 2, imageName: volumeImageName(uuid) };
      },
      restarted: make,
      breakCarrier: async (v: MappedVolume) => {
        const [p] = (await rbdFuseProcesses(dir)).filter((x) => x.dir === path.dirname(v.imagePath));
        if (!p) throw new Error(`no rbd-fuse serves ${v.imagePath}`);
        process.kill(p.pid, "SIGKILL");
        // Gone (or a zombie) before the test looks: the kill is what a crash does.
        for (let i = 0; i < 200; i++) {
          const stat = await readFile(`/proc/${p.pid}/stat`, "utf8").catch(() => "");
          if (!stat || stat.split(") ")[1]?.startsWith("Z")) return;
          await new Promise((r) => setTimeout(r, 25));
        }
        throw new Error(`rbd-fuse ${p.pid} outlived SIGKILL`);
      },
      foreignDevice: () => foreign.make(),
      close: async () => {
        await foreign.close();
        for (const p of await rbdFuseProcesses(dir)) process.kill(p.pid, "SIGKILL");
        await rm(dir, { recursive: true, force: true });
      },
    };
  });
