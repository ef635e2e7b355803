/**
 * The "fuse" mapping (ports/mapping.ts): an RBD image shown as a file by an rbd-fuse of the
 * agent's own (one per image, mounted under the agent's rbd directory: domain/rbd-fuse.ts), with a
 * loop device on that file. What rbd-fuse needs (monitors, user, key file, Ceph pool) comes from
 * this node's clusters file, never from a caller. rbd-fuse outlives a restarted agent; a dead one
 * (its process gone: ENOTCONN) is reported by `health` and `seen`, and the healer replaces it.
 */
import { mkdir, realpath } from "node:fs/promises";
import path from "node:path";
import { type Clusters, DriverError, decomposeVolumeId, quote, volumeImageName } from "@csi/contracts";
import { type FuseImage, fuseImagePath, RBD_FUSE_FS } from "../domain/rbd-fuse.js";
import type { BlockMapping, CarrierHealth, MappedVolume, MappingSeen, VolumeImage } from "../ports/mapping.js";
import { LoopMapping } from "./loop-mapping.js";
import { readMounts } from "./mount.js";
import * as rbdFuse from "./rbd-fuse.js";

const inside = (root: string, p: string) => p.startsWith(`${root}/`);

export class FuseMapping implements BlockMapping {
  readonly kind = "fuse";
  #root: string;
  /** The device part: a loop device on the image's file, as a file pool's. */
  readonly #loop: LoopMapping;

  /** `rbdDir`: the agent's own directory for the rbd-fuse mounts and their ceph.conf files. */
  constructor(
    private readonly clusters: Clusters,
    rbdDir: string,
  ) {
    this.#root = path.resolve(rbdDir);
    this.#loop = new LoopMapping(clusters);
  }

  get root(): string {
    return this.#root;
  }

  async prepare(): Promise<void> {
    await mkdir(this.#root, { recursive: true, mode: 0o700 });
    this.#root = await realpath(this.#root); // as mountinfo and losetup name it
  }

  /** Whether the image exists is known only once rbd-fuse runs (map: NotFound then). */
  async locate(image: VolumeImage): Promise<string> {
    return fuseImagePath(this.#root, image);
  }

  find(v: MappedVolume, opts: { evenDeleted?: boolean } = {}): Promise<string | undefined> {
    return this.#loop.find(v, opts);
  }

  async map(v: MappedVolume): Promise<{ device: string; made: boolean }> {
    const there = await this.find(v);
    if (there) return { device: there, made: false };
    await rbdFuse.mountImage(this.#root, this.#image(v.volumeId));
    return this.#loop.map(v);
  }

  /** The loop device first (it holds the file on the mount), then the rbd-fuse mount: its process exits with it, closing the image. */
  async unmap(v: MappedVolume, detached?: (device: string) => void): Promise<void> {
    await this.#loop.unmap(v, detached);
    await rbdFuse.unmountDir(path.dirname(v.imagePath)); // the state file's own record: its directory is the agent's
  }

  refreshSize(device: string): Promise<void> {
    return this.#loop.refreshSize(device);
  }

  async health(vs: readonly MappedVolume[]): Promise<Map<string, CarrierHealth>> {
    const dirOf = (v: MappedVolume) => path.dirname(v.imagePath);
    const probed = vs.length ? await rbdFuse.probe(vs.map(dirOf)) : new Map<string, CarrierHealth>();
    return new Map(vs.map((v) => [v.volumeId, probed.get(dirOf(v)) ?? "absent"]));
  }

  async condition(v: MappedVolume): Promise<{ device: string | undefined; abnormal: string | undefined }> {
    const { device, abnormal } = await this.#loop.condition(v);
    if (abnormal) return { device, abnormal };
    const up = (await this.health([v])).get(v.volumeId) === "up";
    return { device, abnormal: up ? undefined : "the rbd-fuse process mapping the volume's image is gone (the healer replaces the mapping)" };
  }

  async seen(wanted: readonly MappedVolume[], scope: "all" | "wanted"): Promise<MappingSeen> {
    const loops = await this.#loop.seen();
    const ours = (d: { backingFile: string }) => inside(this.#root, d.backingFile);
    const carriers = scope === "all" ? await this.#carriers() : [];
    const dirs = [...new Set([...carriers, ...wanted.map((v) => path.dirname(v.imagePath))])];
    const health = await rbdFuse.probe(dirs);
    return {
      devices: loops.devices.filter(ours),
      deletedDevices: loops.deletedDevices.filter(ours),
      carriers,
      deadCarriers: dirs.filter((d) => health.get(d) === "dead"),
    };
  }

  /** The rbd-fuse mounts under the agent's rbd directory (canonical paths). */
  async #carriers(): Promise<string[]> {
    const under = `${this.#root}/`;
    return [...new Set((await readMounts()).filter((m) => m.fsType === RBD_FUSE_FS && m.mountPoint.startsWith(under)).map((m) => m.mountPoint))];
  }

  release(device: string, backingFile: string): Promise<void> {
    return this.#loop.release(device, backingFile);
  }

  async releaseCarrier(dir: string): Promise<void> {
    if (inside(this.#root, dir)) await rbdFuse.unmountDir(dir);
  }

  /** What rbd-fuse needs for a volume of an RBD pool, from this node's clusters file (never from a caller). */
  #image(volumeId: string): FuseImage {
    const parts = decomposeVolumeId(volumeId);
    const pool = this.clusters.get(parts.clusterID)?.pools.find((p) => p.id === parts.poolID);
    if (pool?.kind !== "rbd") throw new DriverError("FailedPrecondition", `volume ${quote(volumeId)}: its RBD pool is no longer in this node's clusters file`);
    return {
      clusterID: parts.clusterID,
      poolID: parts.poolID,
      cephPool: pool.cephPool ?? pool.name,
      user: pool.user,
      monitors: pool.monitors,
      keyFile: pool.keyFile,
      imageName: volumeImageName(parts.uuid),
    };
  }
}
