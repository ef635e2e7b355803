/**
 * The node's side of ControllerModifyVolume: puts a volume's I/O limits on its loop device in
 * the configured cgroup when it is staged (limits from the publish context), when a modification
 * arrives as node work while it is staged, and after the healer ran; removes them on unstage.
 *
 * Limits come from two places — the publish context (as of ControllerPublishVolume) and node work
 * (each later modification) — each with the volume's log sequence; the newest wins, whatever the
 * order of arrival. Work for a volume not staged here yet is remembered (io-limits.json) so a later
 * stage with an older publish context still gets the newer limits.
 *
 * It only writes rules for the device that maps the volume's own image right now, and removes a
 * rule it left on another device only when that device maps nothing any more. When the machine
 * cannot throttle (no cgroup, no io controller) or a write fails, the step is reported `failed`
 * with the reason and the stage or unstage goes on: limits are not worth an unusable volume.
 */
import { randomUUID } from "node:crypto";
import { limitsFromContext, type MutableParameters } from "@csi/contracts";
import type { Logger } from "pino";
import { majMinOf, resolveIoCgroup, writeLimits } from "../adapters/io-limits.js";
import * as loop from "../adapters/loop.js";
import type { StateFile } from "../adapters/state-file.js";
import { describeLimits, emptyLimitsState, hear, type LimitsEntry, type LimitsState, planSync, prunePending } from "../domain/io-limits.js";
import type { VolumeState } from "../domain/node-state.js";
import type { Origin, Reporter } from "./reporter.js";

/** At most this many remembered limits of volumes not staged here (oldest dropped first). */
const MAX_PENDING = 1024;

type Volume = Pick<VolumeState, "volumeId" | "clusterID" | "uuid" | "imagePath" | "staging">;

export interface IoLimiterDeps {
  file: StateFile<LimitsState>;
  /** IO_LIMITS_CGROUP; undefined = the kubepods cgroup when there is one. */
  cgroup: string | undefined;
  reporter: Reporter;
  log: Logger;
}

export class IoLimiter {
  #state: LimitsState = emptyLimitsState();

  constructor(private readonly d: IoLimiterDeps) {}

  async load(): Promise<void> {
    this.#state = (await this.d.file.load()) ?? emptyLimitsState();
  }

  /** Refuse a publish context with malformed limits before a stage touches anything (InvalidArgument). */
  check(publishContext: Record<string, string>): void {
    limitsFromContext(publishContext);
  }

  /** After a stage: the context's limits (or newer ones heard before) onto the device. Never fails the stage. */
  async staged(v: Volume, publishContext: Record<string, string>, origin: Origin): Promise<void> {
    const heard = limitsFromContext(publishContext);
    if (heard) this.#hear(v.volumeId, heard);
    await this.#sync(v, origin);
    await this.#save().catch((err) => this.d.log.error({ err: String(err) }, "could not save the I/O limits state"));
  }

  /** A modification (node work): remembered, and applied at once if the volume is staged here. */
  async modified(v: Volume | undefined, work: { volumeId: string; mutableParameters: MutableParameters; seq: number }, origin: Origin): Promise<void> {
    this.#hear(work.volumeId, { limits: work.mutableParameters, seq: work.seq });
    if (v?.staging) await this.#sync(v, origin);
    for (const id of prunePending(this.#state.volumes, MAX_PENDING)) delete this.#state.volumes[id];
    await this.#save();
  }

  /** Before an unstage detaches the device: remove our rules and forget the volume. Never fails the unstage. */
  async unstaging(v: Volume, origin: Origin): Promise<void> {
    const entry = this.#state.volumes[v.volumeId];
    delete this.#state.volumes[v.volumeId];
    try {
      if (entry?.applied?.written) {
        const own = (await loop.findByBackingFile(v.imagePath)) === entry.applied.device;
        await this.#remove(v, entry.applied, own, origin);
      }
      await this.#save();
    } catch (err) {
      this.d.log.error({ err: String(err), volumeId: v.volumeId }, "I/O limits clean-up on unstage failed");
    }
  }

  /** After the healer (before serving): forget volumes that are gone, put every staged volume's limits on its device now. */
  async reconcile(volumes: Volume[], origin: Origin = { via: "healer", requestId: randomUUID() }): Promise<void> {
    const staged = new Map(volumes.filter((v) => v.staging).map((v) => [v.volumeId, v]));
    for (const [id, entry] of Object.entries(this.#state.volumes)) {
      if (staged.has(id) || !entry.applied) continue;
      delete this.#state.volumes[id];
      if (entry.applied.written) await this.#remove(undefined, entry.applied, false, origin);
    }
    for (const v of staged.values()) await this.#sync(v, origin);
    await this.#save();
  }

  #hear(volumeId: string, heard: { limits: MutableParameters; seq: number }): void {
    this.#state.volumes[volumeId] = hear(this.#state.volumes[volumeId], heard, new Date().toISOString());
  }

  async #save(): Promise<void> {
    await this.d.file.save(this.#state);
  }

  #report(v: Volume, state: "limited" | "failed", origin: Origin, device: string | undefined, reason: string): void {
    this.d.reporter.report({ clusterID: v.clusterID, uuid: v.uuid, state, ...origin, ...(device ? { device } : {}), reason: reason.slice(0, 1000) });
  }

  /** Bring the volume's device in line with the newest limits known; a failure is reported, not thrown. */
  async #sync(v: Volume, origin: Origin): Promise<void> {
    await this.#trySync(v, origin).catch((err) => this.#report(v, "failed", origin, undefined, `I/O limits not applied: ${(err as Error).message}`));
  }

  async #trySync(v: Volume, origin: Origin): Promise<void> {
    const entry = this.#state.volumes[v.volumeId];
    if (!entry) return;
    const device = await loop.findByBackingFile(v.imagePath); // the device of our own image, checked now
    if (!device) return;
    const majMin = await majMinOf(device);
    const plan = planSync(entry, majMin);
    const applied = (written: boolean): LimitsEntry["applied"] => ({ seq: entry.seq, device, majMin, written });
    if (plan.kind === "none") {
      entry.applied = applied(entry.applied?.majMin === majMin && entry.applied.written);
      return;
    }
    if (plan.clearFirst) await this.#remove(v, plan.clearFirst, false, origin);
    const cg = await resolveIoCgroup(this.d.cgroup);
    if ("unavailable" in cg) {
      entry.applied = applied(false);
      this.#report(v, "failed", origin, device, `I/O limits (${describeLimits(plan.limits)}) not applied: ${cg.unavailable}`);
      return;
    }
    const any = Object.keys(plan.limits).length > 0;
    try {
      await writeLimits(cg, majMin, plan.limits);
      entry.applied = applied(any);
      this.#report(v, "limited", origin, device, `I/O limits ${any ? describeLimits(plan.limits) : "removed"} on ${majMin} in cgroup ${cg.mode} ${cg.dir}`);
    } catch (err) {
      entry.applied = applied(true); // a v1 write may have landed in part: remove it on unstage
      this.#report(v, "failed", origin, device, `I/O limits (${describeLimits(plan.limits)}) not applied: ${(err as Error).message}`);
    }
  }

  /** Remove our rules from a device: it is the volume's own, or it maps nothing any more (never someone else's). */
  async #remove(v: Volume | undefined, at: { device: string; majMin: string }, own: boolean, origin: Origin): Promise<void> {
    const free = own || !(await loop.list()).some((l) => l.device === at.device && l.backingFile);
    if (!free) {
      this.d.log.warn({ device: at.device, majMin: at.majMin }, "I/O limit rules left on a device that now maps another file");
      return;
    }
    const cg = await resolveIoCgroup(this.d.cgroup);
    if ("unavailable" in cg) return; // no cgroup to remove from (it was never written, or it is gone)
    try {
      await writeLimits(cg, at.majMin, {});
      if (v) this.#report(v, "limited", origin, at.device, `I/O limits removed from ${at.majMin} in cgroup ${cg.mode} ${cg.dir}`);
    } catch (err) {
      this.d.log.error({ err: (err as Error).message, device: at.device }, "could not remove I/O limits");
      if (v) this.#report(v, "failed", origin, at.device, `I/O limits not removed: ${(err as Error).message}`);
    }
  }
}
