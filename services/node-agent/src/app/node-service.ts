/**
 * The node's volume operations (ceph-csi's rbd node server + Nomad's csimanager in one):
 * have the volume's mapping make its block device (ports/mapping.ts: a loop device on a file
 * pool's file, or on an RBD image's file in the rbd-fuse mount the agent starts for it), make a
 * filesystem on first stage, mount it at the staging path, bind-mount it at each target; the
 * reverse on unpublish/unstage; grow; report usage. Each step is idempotent, persisted in the
 * state file, and reported to the journal. The same operations serve kubelet (gRPC), front-ends
 * (NATS work) and the healer. What is the mapping's business (devices, what carries them, their
 * health) is behind the port: this class keeps the CSI rules.
 */
import path from "node:path";
import {
  type Capability,
  type Clusters,
  DEFAULT_FS,
  type DeviceState,
  DriverError,
  decomposeVolumeId,
  invalidArgument,
  type MappingKind,
  type MutableParameters,
  notFound,
  type PodInfo,
  quote,
  readerOnly,
  volumeImageName,
} from "@csi/contracts";
import { KeyedMutex } from "@csi/runtime";
import type { Logger } from "pino";
import { Deadline, outsideDeadline, withDeadline } from "../adapters/deadline.js";
import * as fsx from "../adapters/filesystem.js";
import { FuseMapping } from "../adapters/fuse-mapping.js";
import { LoopMapping } from "../adapters/loop-mapping.js";
import * as mnt from "../adapters/mount.js";
import { createLast, lookAt, removeFile, removeIfEmptyDir, requireNoSymlinks } from "../adapters/paths.js";
import type { StateFile } from "../adapters/state-file.js";
import { isMountOfDevice, type MountEntry, PSEUDO_FS } from "../domain/mountinfo.js";
import { checkPublish, checkRestage, checkUnstage, emptyState, type NodeState, pathsOf, type VolumeState } from "../domain/node-state.js";
import { DEFAULT_FORBIDDEN_ROOTS, validateCoPath } from "../domain/paths.js";
import { type PathSeen, placeMount, planUnpublish } from "../domain/placement.js";
import type { MappingChoice } from "../domain/rbd-mapping.js";
import type { BlockMapping } from "../ports/mapping.js";
import { Healer, type ReportDetails } from "./healer.js";
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
  /** No staging or target path may be one of these or under one (NODE_FORBIDDEN_ROOTS); the pools' roots and the state file's directory are added. */
  forbiddenRoots?: readonly string[];
  /** The deadline of each operation, waiting for the volume's lock included (NODE_OP_TIMEOUT_MS). */
  opTimeoutMs?: number;
  /** How this node maps RBD images (chosen at start, domain/rbd-mapping.ts); absent = it does not. */
  rbdMapping?: MappingChoice;
  /**
   * The mappings this node builds (ports/mapping.ts), one per kind; "loop" is required. Absent: the
   * loop mapping and the rbd-fuse one, which keeps its mounts under <state directory>/rbd.
   */
  mappings?: readonly BlockMapping[];
  /**
   * Tell the fleet at once what this node holds (its registration's `holding`), rather than at the
   * next heartbeat: after a volume entered or left the state. The journal trusts it over older
   * device reports, so a DeleteVolume right after NodeUnstageVolume finds the node let go. Best effort.
   */
  announce?: () => Promise<void>;
}

export const DEFAULT_OP_TIMEOUT_MS = 120_000;
/** A caller's volume id in a message: short and escaped. */
const qid = (id: string) => quote(id);

export class NodeService {
  #state: NodeState = emptyState();
  readonly #mutex = new KeyedMutex();

  readonly #forbidden: readonly string[];
  readonly #timeoutMs: number;
  /** The mappings by kind (ports/mapping.ts): a volume's `mapping` (absent: "loop") names its own. */
  readonly #mappings: ReadonlyMap<MappingKind, BlockMapping>;
  /** The healer (app/healer.ts): puts back what the state file says should be there, with this service's own steps. */
  readonly healer: Healer;

  constructor(private readonly d: NodeServiceDeps) {
    const own = [...this.poolRoots, path.dirname(d.stateFile.file)].map((p) => path.resolve(p));
    this.#forbidden = [...(d.forbiddenRoots ?? DEFAULT_FORBIDDEN_ROOTS), ...own];
    this.#timeoutMs = d.opTimeoutMs ?? DEFAULT_OP_TIMEOUT_MS;
    // The rbd-fuse mounts (one directory per staged RBD image) and their ceph.conf files: the agent's own, under its state directory.
    const mappings = d.mappings ?? [new LoopMapping(d.clusters), new FuseMapping(d.clusters, path.resolve(path.dirname(d.stateFile.file), "rbd"))];
    this.#mappings = new Map(mappings.map((m) => [m.kind, m]));
    if (!this.#mappings.has("loop")) throw new DriverError("Internal", "a node service needs the loop mapping");
    this.healer = new Healer({
      log: d.log,
      timeoutMs: this.#timeoutMs,
      mappings: this.#mappings,
      roots: () => [...this.poolRoots, ...this.#mappingRoots()],
      state: () => this.#state,
      op: (volumeId, what, fn) => this.#op(volumeId, what, fn),
      save: () => this.#save(),
      report: (v, state, origin, more) => this.#report(v, state, origin, more),
      ensureAttached: (v, origin) => this.#ensureAttached(v, origin),
      mountStaging: (v, device, origin, replace) => this.#mountStaging(v, device, origin, replace),
      bind: (v, target, how) => this.#bind(v, target, how),
    });
  }

  /** A volume's mapping (by its recorded kind; absent: "loop"). */
  #mappingOf(v: Pick<VolumeState, "mapping">): BlockMapping {
    const m = this.#mappings.get(v.mapping ?? "loop");
    if (!m) throw new DriverError("FailedPrecondition", `this node-agent does not build the ${v.mapping} mapping`);
    return m;
  }

  /** The directories of the mappings' own (rbd-fuse mounts): where the healer looks for leftovers too. */
  #mappingRoots(): string[] {
    return [...this.#mappings.values()].flatMap((m) => (m.root === undefined ? [] : [m.root]));
  }

  get poolRoots(): string[] {
    return this.d.clusters.clusters.flatMap((c) => c.pools.flatMap((p) => (p.root === undefined ? [] : [p.root])));
  }

  /** Run one operation on a volume: one at a time per volume, all of it (the wait for the lock too) within the deadline. */
  #op<T>(volumeId: string, what: string, fn: () => Promise<T>): Promise<T> {
    const deadline = new Deadline(this.#timeoutMs, what);
    return deadline.bound(this.#mutex.run(volumeId, () => deadline.run(fn)));
  }

  volumes(): VolumeState[] {
    return Object.values(this.#state.volumes);
  }

  async load(): Promise<void> {
    this.#state = (await this.d.stateFile.load()) ?? emptyState();
    // A mapping with a directory of its own (rbd-fuse's) makes it only on a node with an RBD pool.
    const rbd = this.d.clusters.clusters.some((c) => c.pools.some((p) => p.kind === "rbd"));
    for (const m of this.#mappings.values()) if (m.root === undefined || rbd) await m.prepare();
  }

  async #save(): Promise<void> {
    await this.d.stateFile.save(this.#state);
  }

  #report(v: Pick<VolumeState, "clusterID" | "uuid">, state: DeviceState, origin: Origin, more: ReportDetails = {}): void {
    this.d.reporter.report({ clusterID: v.clusterID, uuid: v.uuid, state, ...origin, ...more });
  }

  /**
   * Where a volume's image is: its id names cluster, pool and uuid; the journal names a volume's
   * image after its uuid (`volumeImageName`, the one function both use), and the pool's root holds
   * `<image>.img`. The publish context's imageName is never used to pick the image: when it is
   * given and names another one, the call is refused.
   */
  async #locate(volumeId: string, publishContext: Record<string, string>): Promise<Pick<VolumeState, "clusterID" | "uuid" | "imagePath" | "mapping">> {
    const parts = decomposeVolumeId(volumeId); // malformed → NotFound
    const cluster = this.d.clusters.get(parts.clusterID);
    const pool = cluster?.pools.find((p) => p.id === parts.poolID);
    if (!cluster || !pool) throw notFound(`volume ${qid(volumeId)}: cluster ${parts.clusterID} pool ${parts.poolID} is not configured on this node`);
    const imageName = volumeImageName(parts.uuid);
    /** The publish context's imageName, when given, must be the volume's own (checked once the image is known to exist: NotFound first). */
    const sameImage = () => {
      const given = publishContext.imageName;
      if (given !== undefined && given !== imageName)
        throw invalidArgument(
          `publish_context imageName ${quote(given)} is not the image of volume ${qid(volumeId)}; the node takes the image from the volume id`,
        );
    };
    const image = { volumeId, clusterID: parts.clusterID, poolID: parts.poolID, imageName };
    if (pool.kind === "rbd") {
      sameImage(); // an RBD image is known to exist only once it is mapped
      const mapping = this.#rbdMapping(volumeId, publishContext, pool.cephPool ?? pool.name);
      return { clusterID: cluster.clusterID, uuid: parts.uuid, imagePath: await mapping.locate(image), mapping: mapping.kind };
    }
    const imagePath = await this.#mappingOf({}).locate(image); // NotFound when the file is not there
    sameImage();
    return { clusterID: cluster.clusterID, uuid: parts.uuid, imagePath };
  }

  /**
   * An RBD volume: its image (named after the uuid, as in a file pool) is mapped by this node's
   * kind (through rbd-fuse, in a directory of the agent's own). Whether the image exists is known
   * only once it is mapped (stage: NotFound then). A publish context naming another Ceph pool is
   * refused, as one naming another image.
   */
  #rbdMapping(volumeId: string, publishContext: Record<string, string>, cephPool: string): BlockMapping {
    for (const [key, want] of [
      ["poolKind", "rbd"],
      ["cephPool", cephPool],
    ] as const) {
      const given = publishContext[key];
      if (given !== undefined && given !== want)
        throw invalidArgument(
          `publish_context ${key} ${quote(given)} is not that of volume ${qid(volumeId)} (${want}); the node takes it from its clusters file`,
        );
    }
    const kind = this.d.rbdMapping?.kind;
    const mapping = kind === undefined ? undefined : this.#mappings.get(kind);
    if (!mapping)
      throw new DriverError(
        "FailedPrecondition",
        kind
          ? `this node-agent does not build the ${kind} mapping of RBD images`
          : `volume ${qid(volumeId)} is an RBD volume and this node ${this.d.rbdMapping?.why ?? "cannot map RBD images"}`,
      );
    return mapping;
  }

  /** What is at a (checked) path now, with the mounts there. */
  async #look(p: string): Promise<PathSeen> {
    return lookAt(p, await mnt.mountsAt(p));
  }

  /** The volume's block device, its mapping making it if there is none. */
  async #ensureAttached(v: VolumeState, origin: Origin): Promise<string> {
    const mapping = this.#mappingOf(v);
    const { device, made } = await mapping.map(v);
    if (made) this.#report(v, "attached", origin, { device, mapping: mapping.kind });
    v.device = device;
    return device;
  }

  /**
   * Mount the volume's filesystem at its staging path, making it first if the device has none.
   * A mount there from `replace` (the volume's old device, as the healer found it) is replaced;
   * any other mount that is not of `device` is refused, never unmounted.
   */
  async #mountStaging(v: VolumeState, device: string, origin: Origin, replace?: string): Promise<void> {
    const staging = v.staging;
    if (staging?.capability.accessType !== "mount") return;
    const cap = staging.capability;
    let seen = await this.#look(staging.path);
    const top = seen.mounts.at(-1);
    if (top && replace !== undefined && top.source === replace && top.source !== device) {
      await mnt.unmount(staging.path);
      seen = await this.#look(staging.path);
    }
    const place = placeMount(seen, "dir", (m) => m.source === device);
    if (place.kind === "refuse") throw new DriverError(place.code, place.reason);
    if (place.kind === "mounted") return;
    let fs = await fsx.detectFs(device);
    if (!fs) {
      if (v.readOnly) throw new DriverError("FailedPrecondition", "the volume has no filesystem and is attached read-only: it cannot be formatted");
      fs = cap.fsType || DEFAULT_FS;
      await fsx.makeFs(device, fs);
      this.d.log.info({ volumeId: v.volumeId, device, fs }, "made filesystem");
    } else if (cap.fsType && cap.fsType !== fs) {
      throw new DriverError("FailedPrecondition", `volume holds ${fs}, not the requested ${cap.fsType}`);
    }
    if (place.create) await createLast(staging.path, "dir");
    await mnt.mount(device, staging.path, { fsType: fs, flags: cap.mountFlags ?? [], readOnly: v.readOnly });
    this.#report(v, "staged", origin, { device, path: staging.path });
  }

  /**
   * Bind the volume at `target` (the staging mount, or for a block volume its device onto a
   * file) unless it is there already. The target must be free (see domain/placement.ts); the agent
   * creates it only as the last component of an existing directory. `stale` tells a mount of the
   * volume's old device that the healer replaces; `pod` is whom the bind is for (its report says so).
   * Returns whether this call created the target.
   */
  async #bind(
    v: VolumeState,
    target: string,
    how: { readOnly: boolean; origin: Origin; stale?: (m: MountEntry) => boolean; pod?: PodInfo | undefined },
  ): Promise<boolean> {
    const { readOnly, origin, stale, pod } = how;
    const block = v.staging?.capability.accessType === "block";
    const current = await this.#mappingOf(v).find(v);
    const ours = (m: MountEntry) => current !== undefined && isMountOfDevice(m, current);
    let seen = await this.#look(target);
    const top = seen.mounts.at(-1);
    if (top && stale?.(top) && !ours(top)) {
      await mnt.unmount(target);
      seen = await this.#look(target);
    }
    const place = placeMount(seen, block ? "file" : "dir", ours);
    if (place.kind === "refuse") throw new DriverError(place.code, place.reason);
    if (place.kind === "mounted") return false;
    const device = await this.#ensureAttached(v, origin);
    const made = place.create && (await createLast(target, block ? "file" : "dir"));
    try {
      await mnt.bindMount(block ? device : (v.staging?.path as string), target, { readOnly: readOnly || v.readOnly });
    } catch (err) {
      if (made) await outsideDeadline(() => (block ? removeFile(target) : removeIfEmptyDir(target).then(() => {}))).catch(() => {});
      throw err;
    }
    this.#report(v, "published", origin, { device, path: target, ...(pod ? { pod } : {}) });
    return made;
  }

  // ------------------------------------------------------------------ operations

  stage(req: { volumeId: string; stagingPath: string; capability: Capability; publishContext: Record<string, string>; origin: Origin }): Promise<void> {
    return this.#op(req.volumeId, "NodeStageVolume", async () => {
      this.d.ioLimits?.check(req.publishContext);
      const known = this.#state.volumes[req.volumeId];
      if (known) {
        const refusal = checkRestage(known, req.stagingPath, req.capability);
        if (refusal) throw new DriverError(refusal.code, refusal.reason);
      }
      const readOnly = readerOnly(req.capability) || req.publishContext.readOnly === "true";
      const v: VolumeState = known ?? { volumeId: req.volumeId, ...(await this.#locate(req.volumeId, req.publishContext)), readOnly, publishes: [] };
      const attached = await this.#mappingOf(v).find(v);
      if (req.capability.accessType === "mount") {
        // Before anything changes: the staging path must be free, or hold this volume already.
        const place = placeMount(await this.#look(req.stagingPath), "dir", (m) => attached !== undefined && m.source === attached);
        if (place.kind === "refuse") throw new DriverError(place.code, place.reason);
      }
      try {
        const device = await this.#ensureAttached(v, req.origin);
        v.staging = { path: req.stagingPath, capability: req.capability };
        await this.#mountStaging(v, device, req.origin);
        if (req.capability.accessType === "block") this.#report(v, "staged", req.origin, { device, path: req.stagingPath });
      } catch (err) {
        // Leave nothing half done: what this call mapped for a new volume goes again.
        if (!known) {
          if (!attached) await outsideDeadline(() => this.#mappingOf(v).unmap(v)).catch(() => {});
          this.#report(v, "failed", req.origin, { path: req.stagingPath, reason: (err as Error).message });
        }
        throw err;
      }
      this.#state.volumes[req.volumeId] = v;
      await this.#save();
      if (!known) await this.#announce();
      await this.d.ioLimits?.staged(v, req.publishContext, req.origin);
    });
  }

  /** `pod`: whom the kubelet publishes it for (podInfoOnMount); kept with the publish, so its unpublish and heals name it too. */
  publish(req: { volumeId: string; stagingPath: string; targetPath: string; readOnly: boolean; origin: Origin; pod?: PodInfo | undefined }): Promise<void> {
    return this.#op(req.volumeId, "NodePublishVolume", async () => {
      const v = this.#state.volumes[req.volumeId];
      const refusal = checkPublish(v, req.stagingPath, req.targetPath, req.readOnly);
      if (refusal || !v) throw new DriverError(refusal?.code ?? "FailedPrecondition", refusal?.reason ?? "not staged");
      const made = await this.#bind(v, req.targetPath, { readOnly: req.readOnly, origin: req.origin, pod: req.pod });
      if (!v.publishes.some((p) => p.target === req.targetPath))
        v.publishes.push({ target: req.targetPath, readOnly: req.readOnly, made, ...(req.pod ? { pod: req.pod } : {}) });
      await this.#save();
    });
  }

  /** Undo a publish — only what the agent did there (domain/placement.ts, planUnpublish). */
  unpublish(req: { volumeId: string; targetPath: string; origin: Origin }): Promise<void> {
    return this.#op(req.volumeId, "NodeUnpublishVolume", async () => {
      const v = this.#state.volumes[req.volumeId];
      const ours = await this.#oursFor(v);
      const target = req.targetPath;
      const seen = await this.#look(target);
      const plan = planUnpublish(v, seen, ours);
      if (plan.kind === "refuse") throw new DriverError(plan.code, plan.reason);
      if (plan.kind === "nothing" || !v) return;
      const pod = v.publishes.find((p) => p.target === target)?.pod;
      await this.#unmountOurs(target, ours, seen.mounts);
      const left = await this.#look(target);
      if (left.mounts.length === 0) {
        // Remove the target the agent made: an empty directory or a (block bind target) file, never recursively.
        if (plan.remove === "made" && left.kind === "file") await removeFile(target);
        else if ((plan.remove === "made" || plan.remove === "empty-dir") && left.kind === "dir") await removeIfEmptyDir(target);
      }
      if (plan.recorded) {
        v.publishes = v.publishes.filter((p) => p.target !== target);
        await this.#save();
      }
      this.#report(v, "unpublished", req.origin, { path: target, ...(pod ? { pod } : {}) });
    });
  }

  unstage(req: { volumeId: string; stagingPath: string; origin: Origin }): Promise<void> {
    return this.#op(req.volumeId, "NodeUnstageVolume", async () => {
      const v = this.#state.volumes[req.volumeId];
      if (!v) return; // never staged here, or already unstaged
      const refusal = checkUnstage(v, req.stagingPath);
      if (refusal) throw new DriverError(refusal.code, refusal.reason);
      const path = v.staging?.path ?? req.stagingPath;
      const ours = await this.#oursFor(v);
      const top = await this.#unmountOurs(path, ours, await mnt.mountsAt(path));
      if (top) throw new DriverError("FailedPrecondition", `a ${top.fsType} filesystem this node did not mount covers ${quote(path, 128)}`);
      if (v.staging) this.#report(v, "unstaged", req.origin, { path });
      await this.d.ioLimits?.unstaging(v, req.origin); // before the detach frees the device number for another volume
      // Whatever became of the image's file: nothing of this node holds it any more (rbd-fuse exits with its mount, closing the image).
      await this.#mappingOf(v).unmap(v, (device) => this.#report(v, "detached", req.origin, { device }));
      delete this.#state.volumes[req.volumeId];
      await this.#save();
      await this.#announce();
    });
  }

  /** The registration re-sent now (NodeServiceDeps.announce); a failure leaves it to the next heartbeat. */
  async #announce(): Promise<void> {
    await this.d.announce?.().catch((err: unknown) => this.d.log.debug({ err: String(err) }, "registration not re-sent; the next heartbeat sends it"));
  }

  /** Unmount the mounts at `p` while the visible one is ours (`mounts`: those there now); returns the one left visible, if any. */
  async #unmountOurs(p: string, ours: (m: MountEntry) => boolean, mounts: readonly MountEntry[]): Promise<MountEntry | undefined> {
    let top = mounts.at(-1);
    while (top && ours(top)) {
      await mnt.unmount(p);
      top = (await mnt.mountsAt(p)).at(-1);
    }
    return top;
  }

  /** Tells a mount of the volume (of its loop device now, or of the one the state file recorded) from any other. */
  async #oursFor(v: VolumeState | undefined): Promise<(m: MountEntry) => boolean> {
    if (!v) return () => false;
    const devices = [await this.#mappingOf(v).find(v), v.device].filter((d): d is string => d !== undefined);
    return (m) => devices.some((d) => isMountOfDevice(m, d));
  }

  /** New I/O limits for a volume (node work after ControllerModifyVolume), under the volume's lock. */
  limits(req: { volumeId: string; mutableParameters: MutableParameters; seq: number; origin: Origin }): Promise<void> {
    return this.#op(req.volumeId, "limits", async () => this.d.ioLimits?.modified(this.#state.volumes[req.volumeId], req, req.origin));
  }

  /** The volume staged or published here at `volumePath` (a clean path; undefined: an invalid one, shown as `shown`), else NotFound. */
  #volumeAt(volumeId: string, volumePath: string | undefined, shown: string = volumePath ?? ""): VolumeState {
    const v = this.#state.volumes[volumeId];
    if (!v) throw notFound(`volume ${qid(volumeId)} is not staged on this node`);
    if (volumePath === undefined || !pathsOf(v).includes(volumePath)) throw notFound(`volume ${qid(volumeId)} is not at ${quote(shown, 128)}`);
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

  // ------------------------------------------------------------------ paths a caller gives (the INVALID_ARGUMENT checks)

  /** `p` in clean form if its text is a valid staging/target path here (domain/paths.ts), else undefined. */
  cleanPath(p: string): string | undefined {
    try {
      return validateCoPath(p, "path", this.#forbidden);
    } catch {
      return undefined;
    }
  }

  /**
   * A staging/target path checked in full, before anything is changed: its text (domain/paths.ts,
   * with this node's forbidden roots), no symlink among its existing components, and not in a
   * kernel pseudo filesystem (proc, sysfs, ... wherever mounted). INVALID_ARGUMENT otherwise.
   */
  async checkPath(p: string, what: string): Promise<string> {
    const clean = validateCoPath(p, what, this.#forbidden);
    await withDeadline(this.#timeoutMs, `checking ${what}`, async () => {
      await requireNoSymlinks(clean, what);
      // The filesystem the path lies in (its parent's): a mount at the path itself is the placement's business (ours, or foreign).
      const fs = await mnt.fsTypeAt(path.dirname(clean));
      if (fs && PSEUDO_FS.has(fs)) throw invalidArgument(`${what} ${quote(clean, 128)} lies in a ${fs} filesystem, where the node never stages or publishes`);
    });
    return clean;
  }

  /** Grow the device and the filesystem to the image's size; returns the new capacity. */
  expand(req: { volumeId: string; volumePath: string; origin: Origin }): Promise<number> {
    return this.#op(req.volumeId, "NodeExpandVolume", async () => {
      const v = this.#volumeAt(req.volumeId, req.volumePath);
      const device = await this.#ensureAttached(v, req.origin);
      await this.#mappingOf(v).refreshSize(device);
      if (v.staging?.capability.accessType === "mount") {
        const fs = (await fsx.detectFs(device)) ?? DEFAULT_FS;
        await fsx.growFs(device, v.staging.path, fs);
      }
      return fsx.blockDeviceSize(device);
    });
  }

  stats(req: { volumeId: string; volumePath: string }) {
    return withDeadline(this.#timeoutMs, "NodeGetVolumeStats", () => this.#stats(req));
  }

  async #stats(req: { volumeId: string; volumePath: string }) {
    const v = this.#volumeAt(req.volumeId, req.volumePath);
    const { device, abnormal: unmapped } = await this.#mappingOf(v).condition(v);
    const mounted = await mnt.isMountPoint(req.volumePath);
    const abnormal = unmapped ?? (!mounted ? `${req.volumePath} is not mounted` : undefined);
    const usage = await fsx.stats(device && v.staging?.capability.accessType === "block" && !mounted ? device : req.volumePath).catch(() => undefined);
    return { usage, condition: { abnormal: !!abnormal, message: abnormal ?? "volume is attached and mounted" } };
  }
}
