/**
 * The node's volume operations (ceph-csi's rbd node server + Nomad's csimanager in one):
 * attach an image to a loop device, make a filesystem on first stage, mount it at the staging
 * path, bind-mount it at each target; the reverse on unpublish/unstage; grow; report usage.
 * Each step is idempotent, persisted in the state file, and reported to the journal. The same
 * operations serve kubelet (gRPC), front-ends (NATS work) and the healer.
 */
import { randomUUID } from "node:crypto";
import { lstat, realpath } from "node:fs/promises";
import {
  type Capability,
  type Clusters,
  DEFAULT_FS,
  type DeviceState,
  DriverError,
  decomposeVolumeId,
  IMAGE_NAME_RE,
  type MutableParameters,
  notFound,
  readerOnly,
  volumeImageName,
} from "@csi/contracts";
import { KeyedMutex } from "@csi/runtime";
import type { Logger } from "pino";
import * as fsx from "../adapters/filesystem.js";
import * as loop from "../adapters/loop.js";
import * as mnt from "../adapters/mount.js";
import { ensureDir, ensureFile, removeFile, removeIfEmptyDir, safeJoin } from "../adapters/paths.js";
import type { StateFile } from "../adapters/state-file.js";
import { type HealAction, planHeal } from "../domain/heal.js";
import { checkPublish, checkRestage, checkUnstage, emptyState, type NodeState, pathsOf, type VolumeState } from "../domain/node-state.js";
import type { IoLimiter } from "./io-limiter.js";
import type { Origin, Reporter } from "./reporter.js";

export interface NodeServiceDeps {
  nodeId: string;
  clusters: Clusters;
  stateFile: StateFile<NodeState>;
  reporter: Reporter;
  log: Logger;
  /** I/O limits (ControllerModifyVolume) on the volumes' devices; absent = none are applied. */
  ioLimits?: IoLimiter;
}

export class NodeService {
  #state: NodeState = emptyState();
  readonly #mutex = new KeyedMutex();

  constructor(private readonly d: NodeServiceDeps) {}

  get poolRoots(): string[] {
    return this.d.clusters.clusters.flatMap((c) => c.pools.map((p) => p.root));
  }

  volumes(): VolumeState[] {
    return Object.values(this.#state.volumes);
  }

  async load(): Promise<void> {
    this.#state = (await this.d.stateFile.load()) ?? emptyState();
  }

  async #save(): Promise<void> {
    await this.d.stateFile.save(this.#state);
  }

  #report(
    v: Pick<VolumeState, "clusterID" | "uuid">,
    state: DeviceState,
    origin: Origin,
    more: { device?: string; path?: string; reason?: string } = {},
  ): void {
    this.d.reporter.report({ clusterID: v.clusterID, uuid: v.uuid, state, ...origin, ...more });
  }

  /** Where a volume's image is: its id names cluster and pool; the pool's root holds `<image>.img`. */
  async #locate(volumeId: string, publishContext: Record<string, string>): Promise<Pick<VolumeState, "clusterID" | "uuid" | "imagePath">> {
    const parts = decomposeVolumeId(volumeId); // malformed → NotFound
    const cluster = this.d.clusters.get(parts.clusterID);
    const pool = cluster?.pools.find((p) => p.id === parts.poolID);
    if (!cluster || !pool) throw notFound(`volume ${volumeId}: cluster ${parts.clusterID} pool ${parts.poolID} is not configured on this node`);
    const imageName = publishContext.imageName ?? volumeImageName(parts.uuid);
    if (!IMAGE_NAME_RE.test(imageName)) throw new DriverError("InvalidArgument", `publish context imageName ${JSON.stringify(imageName)} is not an image name`);
    const file = safeJoin(pool.root, `${imageName}.img`);
    const imagePath = await realpath(file).catch(() => {
      throw notFound(`volume ${volumeId}: image ${imageName} does not exist in pool ${pool.name}`);
    });
    if (!imagePath.startsWith(`${await realpath(pool.root)}/`)) throw new DriverError("InvalidArgument", `image ${imageName} resolves outside its pool`);
    return { clusterID: cluster.clusterID, uuid: parts.uuid, imagePath };
  }

  /** The volume's loop device, attaching it if it is not attached. */
  async #ensureAttached(v: VolumeState, origin: Origin): Promise<string> {
    let device = await loop.findByBackingFile(v.imagePath);
    if (!device) {
      device = await loop.attach(v.imagePath, { readOnly: v.readOnly });
      this.#report(v, "attached", origin, { device });
    }
    v.device = device;
    return device;
  }

  async #mountStaging(v: VolumeState, device: string, origin: Origin): Promise<void> {
    const staging = v.staging;
    if (staging?.capability.accessType !== "mount") return;
    const cap = staging.capability;
    let fs = await fsx.detectFs(device);
    if (!fs) {
      if (v.readOnly) throw new DriverError("FailedPrecondition", "the volume has no filesystem and is attached read-only: it cannot be formatted");
      fs = cap.fsType || DEFAULT_FS;
      await fsx.makeFs(device, fs);
      this.d.log.info({ volumeId: v.volumeId, device, fs }, "made filesystem");
    } else if (cap.fsType && cap.fsType !== fs) {
      throw new DriverError("FailedPrecondition", `volume holds ${fs}, not the requested ${cap.fsType}`);
    }
    await ensureDir(staging.path);
    const current = (await mnt.mountsAt(staging.path)).at(-1);
    if (current?.source === device) return;
    if (current) await mnt.unmount(staging.path);
    await mnt.mount(device, staging.path, { fsType: fs, flags: cap.mountFlags ?? [], readOnly: v.readOnly });
    this.#report(v, "staged", origin, { device, path: staging.path });
  }

  async #bind(v: VolumeState, target: string, readOnly: boolean, origin: Origin): Promise<void> {
    const block = v.staging?.capability.accessType === "block";
    if (await mnt.isMountPoint(target)) return;
    const device = await this.#ensureAttached(v, origin);
    if (block) await ensureFile(target);
    else await ensureDir(target);
    await mnt.bindMount(block ? device : (v.staging?.path as string), target, { readOnly: readOnly || v.readOnly });
    this.#report(v, "published", origin, { device, path: target });
  }

  // ------------------------------------------------------------------ operations

  stage(req: { volumeId: string; stagingPath: string; capability: Capability; publishContext: Record<string, string>; origin: Origin }): Promise<void> {
    return this.#mutex.run(req.volumeId, async () => {
      this.d.ioLimits?.check(req.publishContext);
      const known = this.#state.volumes[req.volumeId];
      if (known) {
        const refusal = checkRestage(known, req.stagingPath, req.capability);
        if (refusal) throw new DriverError(refusal.code, refusal.reason);
      }
      const readOnly = readerOnly(req.capability) || req.publishContext.readOnly === "true";
      const v: VolumeState = known ?? { volumeId: req.volumeId, ...(await this.#locate(req.volumeId, req.publishContext)), readOnly, publishes: [] };
      const wasAttached = (await loop.findByBackingFile(v.imagePath)) !== undefined;
      try {
        const device = await this.#ensureAttached(v, req.origin);
        v.staging = { path: req.stagingPath, capability: req.capability };
        await this.#mountStaging(v, device, req.origin);
        if (req.capability.accessType === "block") this.#report(v, "staged", req.origin, { device, path: req.stagingPath });
      } catch (err) {
        // Leave nothing half done: a device this call attached for a new volume goes again.
        if (!known) {
          if (v.device && !wasAttached) await loop.detach(v.device, { backingFile: v.imagePath }).catch(() => {});
          this.#report(v, "failed", req.origin, { path: req.stagingPath, reason: (err as Error).message });
        }
        throw err;
      }
      this.#state.volumes[req.volumeId] = v;
      await this.#save();
      await this.d.ioLimits?.staged(v, req.publishContext, req.origin);
    });
  }

  publish(req: { volumeId: string; stagingPath: string; targetPath: string; readOnly: boolean; origin: Origin }): Promise<void> {
    return this.#mutex.run(req.volumeId, async () => {
      const v = this.#state.volumes[req.volumeId];
      const refusal = checkPublish(v, req.stagingPath, req.targetPath, req.readOnly);
      if (refusal || !v) throw new DriverError(refusal?.code ?? "FailedPrecondition", refusal?.reason ?? "not staged");
      await this.#bind(v, req.targetPath, req.readOnly, req.origin);
      if (!v.publishes.some((p) => p.target === req.targetPath)) v.publishes.push({ target: req.targetPath, readOnly: req.readOnly });
      await this.#save();
    });
  }

  unpublish(req: { volumeId: string; targetPath: string; origin: Origin }): Promise<void> {
    return this.#mutex.run(req.volumeId, async () => {
      const v = this.#state.volumes[req.volumeId];
      while (await mnt.isMountPoint(req.targetPath)) await mnt.unmount(req.targetPath);
      // Remove the target the agent made: an empty directory or a (block bind target) file, never recursively.
      const st = await lstat(req.targetPath).catch(() => undefined);
      if (st?.isDirectory()) await removeIfEmptyDir(req.targetPath);
      else if (st) await removeFile(req.targetPath);
      if (!v) return;
      v.publishes = v.publishes.filter((p) => p.target !== req.targetPath);
      await this.#save();
      this.#report(v, "unpublished", req.origin, { path: req.targetPath });
    });
  }

  unstage(req: { volumeId: string; stagingPath: string; origin: Origin }): Promise<void> {
    return this.#mutex.run(req.volumeId, async () => {
      const v = this.#state.volumes[req.volumeId];
      if (!v) return; // never staged here, or already unstaged
      const refusal = checkUnstage(v);
      if (refusal) throw new DriverError(refusal.code, refusal.reason);
      const path = v.staging?.path ?? req.stagingPath;
      while (await mnt.isMountPoint(path)) await mnt.unmount(path);
      if (v.staging) this.#report(v, "unstaged", req.origin, { path });
      await this.d.ioLimits?.unstaging(v, req.origin); // before the detach frees the device number for another volume
      const device = await loop.findByBackingFile(v.imagePath);
      if (device) {
        await loop.detach(device, { backingFile: v.imagePath });
        this.#report(v, "detached", req.origin, { device });
      }
      delete this.#state.volumes[req.volumeId];
      await this.#save();
    });
  }

  /** New I/O limits for a volume (node work after ControllerModifyVolume), under the volume's lock. */
  limits(req: { volumeId: string; mutableParameters: MutableParameters; seq: number; origin: Origin }): Promise<void> {
    return this.#mutex.run(req.volumeId, async () => this.d.ioLimits?.modified(this.#state.volumes[req.volumeId], req, req.origin));
  }

  /** The volume staged or published here at `volumePath` (a clean path; undefined: an invalid one, shown as `shown`), else NotFound. */
  #volumeAt(volumeId: string, volumePath: string | undefined, shown: string = volumePath ?? ""): VolumeState {
    const v = this.#state.volumes[volumeId];
    if (!v) throw notFound(`volume ${volumeId} is not staged on this node`);
    if (volumePath === undefined || !pathsOf(v).includes(volumePath)) throw notFound(`volume ${volumeId} is not at ${JSON.stringify(shown.slice(0, 256))}`);
    return v;
  }

  // ------------------------------------------------------------------ where volumes are (the NOT_FOUND checks)

  /** NotFound unless the volume is staged here or its image is in one of this node's pools. */
  async requireInPool(volumeId: string, publishContext: Record<string, string>): Promise<void> {
    if (!this.#state.volumes[volumeId]) await this.#locate(volumeId, publishContext);
  }

  /** NotFound unless the volume is staged or published here at `path`. */
  requireAt(volumeId: string, path: string | undefined, shown: string): void {
    this.#volumeAt(volumeId, path, shown);
  }

  /** Grow the device and the filesystem to the image's size; returns the new capacity. */
  expand(req: { volumeId: string; volumePath: string; origin: Origin }): Promise<number> {
    return this.#mutex.run(req.volumeId, async () => {
      const v = this.#volumeAt(req.volumeId, req.volumePath);
      const device = await this.#ensureAttached(v, req.origin);
      await loop.refreshSize(device);
      if (v.staging?.capability.accessType === "mount") {
        const fs = (await fsx.detectFs(device)) ?? DEFAULT_FS;
        await fsx.growFs(device, v.staging.path, fs);
      }
      return fsx.blockDeviceSize(device);
    });
  }

  async stats(req: { volumeId: string; volumePath: string }) {
    const v = this.#volumeAt(req.volumeId, req.volumePath);
    const device = await loop.findByBackingFile(v.imagePath);
    const mounted = await mnt.isMountPoint(req.volumePath);
    const abnormal = !device ? "the volume's loop device is gone" : !mounted ? `${req.volumePath} is not mounted` : undefined;
    const usage = await fsx.stats(device && v.staging?.capability.accessType === "block" && !mounted ? device : req.volumePath).catch(() => undefined);
    return { usage, condition: { abnormal: !!abnormal, message: abnormal ?? "volume is attached and mounted" } };
  }

  // ------------------------------------------------------------------ healer

  /** Compare the state file with the machine and repair; each action is reported, with one request id per run. */
  async heal(): Promise<HealAction[]> {
    const origin: Origin = { via: "healer", requestId: randomUUID() };
    const loops = (await loop.list()).flatMap((l) => (l.backingFile && !l.deleted ? [{ device: l.device, backingFile: l.backingFile }] : []));
    const plan = planHeal(this.#state, { loops, mounts: await mnt.readMounts() }, await Promise.all(this.poolRoots.map((r) => realpath(r).catch(() => r))));
    for (const a of plan) {
      try {
        await this.#apply(a, origin);
      } catch (err) {
        this.d.log.error({ err: String(err), action: a }, "heal action failed");
        const v = "volumeId" in a ? this.#state.volumes[a.volumeId] : undefined;
        if (v) this.#report(v, "failed", origin, { reason: `heal ${a.kind}: ${(err as Error).message}` });
      }
    }
    if (plan.length) {
      await this.#save();
      this.d.log.info({ actions: plan.length, requestId: origin.requestId }, "healer repaired the node");
    }
    return plan;
  }

  async #apply(a: HealAction, origin: Origin): Promise<void> {
    if (a.kind === "unmount") return mnt.unmount(a.path);
    if (a.kind === "detach") return loop.detach(a.device, { backingFile: a.backingFile });
    const v = this.#state.volumes[a.volumeId] as VolumeState;
    if (a.kind === "attach") {
      const device = await this.#ensureAttached(v, origin);
      this.#report(v, "healed", origin, { device, reason: "re-attached a device that was gone" });
    } else if (a.kind === "mount-staging") {
      const device = await this.#ensureAttached(v, origin);
      await this.#mountStaging(v, device, origin);
      this.#report(v, "healed", origin, {
        device,
        path: v.staging?.path,
        reason: a.remountFrom ? `re-mounted staging (was ${a.remountFrom})` : "re-mounted staging",
      });
    } else if (a.kind === "publish") {
      const p = v.publishes.find((x) => x.target === a.target);
      if (await mnt.isMountPoint(a.target)) await mnt.unmount(a.target); // a bind of a stale device
      await this.#bind(v, a.target, p?.readOnly ?? false, origin);
      this.#report(v, "healed", origin, { path: a.target, reason: "re-published a target that was gone" });
    }
  }
}
