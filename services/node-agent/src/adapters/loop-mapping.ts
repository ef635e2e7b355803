/**
 * The "loop" mapping (ports/mapping.ts): a file pool's image file (`<root>/<image>.img`) on a loop
 * device. The device is found again by its backing file, so a restarted agent finds what an
 * earlier one attached; nothing carries it but the kernel, so its health is always "up".
 */
import { realpath } from "node:fs/promises";
import { type Clusters, DriverError, notFound, quote } from "@csi/contracts";
import type { BlockMapping, CarrierHealth, MappedVolume, MappingSeen, VolumeImage } from "../ports/mapping.js";
import * as loop from "./loop.js";
import { safeJoin } from "./paths.js";

export class LoopMapping implements BlockMapping {
  readonly kind = "loop";
  readonly root = undefined;

  constructor(private readonly clusters: Clusters) {}

  async prepare(): Promise<void> {}

  async locate(image: VolumeImage): Promise<string> {
    const pool = this.clusters.get(image.clusterID)?.pools.find((p) => p.id === image.poolID);
    if (pool?.root === undefined) throw new DriverError("FailedPrecondition", `volume ${quote(image.volumeId)}: its pool has no directory on this node`);
    const file = safeJoin(pool.root, `${image.imageName}.img`);
    const imagePath = await realpath(file).catch(() => {
      throw notFound(`volume ${quote(image.volumeId)}: image ${image.imageName} does not exist in pool ${pool.name}`);
    });
    if (!imagePath.startsWith(`${await realpath(pool.root)}/`)) throw new DriverError("InvalidArgument", `image ${image.imageName} resolves outside its pool`);
    return imagePath;
  }

  find(v: MappedVolume, opts: { evenDeleted?: boolean } = {}): Promise<string | undefined> {
    return loop.findByBackingFile(v.imagePath, opts);
  }

  async map(v: MappedVolume): Promise<{ device: string; made: boolean }> {
    const there = await this.find(v);
    if (there) return { device: there, made: false };
    return { device: await loop.attach(v.imagePath, { readOnly: v.readOnly }), made: true };
  }

  async unmap(v: MappedVolume, detached: (device: string) => void = () => {}): Promise<void> {
    const device = await this.find(v, { evenDeleted: true });
    if (!device) return;
    await loop.detach(device, { backingFile: v.imagePath });
    detached(device);
  }

  refreshSize(device: string): Promise<void> {
    return loop.refreshSize(device);
  }

  async health(vs: readonly MappedVolume[]): Promise<Map<string, CarrierHealth>> {
    return new Map(vs.map((v) => [v.volumeId, "up"]));
  }

  async condition(v: MappedVolume): Promise<{ device: string | undefined; abnormal: string | undefined }> {
    const device = await this.find(v);
    return { device, abnormal: device ? undefined : "the volume's loop device is gone" };
  }

  async seen(): Promise<MappingSeen> {
    const listed = (await loop.list()).flatMap((l) => (l.backingFile ? [{ device: l.device, backingFile: l.backingFile, deleted: l.deleted }] : []));
    const strip = ({ device, backingFile }: { device: string; backingFile: string }) => ({ device, backingFile });
    return {
      devices: listed.filter((l) => !l.deleted).map(strip),
      deletedDevices: listed.filter((l) => l.deleted).map(strip),
      carriers: [],
      deadCarriers: [],
    };
  }

  release(device: string, backingFile: string): Promise<void> {
    return loop.detach(device, { backingFile });
  }

  async releaseCarrier(): Promise<void> {}
}
