/**
 * The healer: compares what the state file says a volume should have (its device, its staging
 * mount, its targets) with what the machine holds, and puts it back with the node service's own
 * steps — at start (every volume, and leftovers of ours under the pools' and mappings' roots) and
 * while running (a volume whose mapping's carrier died, e.g. a killed rbd-fuse). What to do is
 * the pure plan of domain/heal.ts; each mapping reports its own devices and carriers
 * (ports/mapping.ts); this file runs the plan and reports each action.
 */
import { randomUUID } from "node:crypto";
import { realpath } from "node:fs/promises";
import { type DeviceState, DriverError, type MappingKind, type PodInfo } from "@csi/contracts";
import type { Logger } from "pino";
import { withDeadline } from "../adapters/deadline.js";
import * as mnt from "../adapters/mount.js";
import { type HealAction, type Observed, planHeal } from "../domain/heal.js";
import { isMountOfDevice, type MountEntry } from "../domain/mountinfo.js";
import type { NodeState, VolumeState } from "../domain/node-state.js";
import type { BlockMapping, MappingSeen } from "../ports/mapping.js";
import type { Origin } from "./reporter.js";

/** The running agent's repairs of a volume's mapping that fail are tried again after 10 s, 20 s, ... at most 5 min apart. */
const HEAL_BACKOFF = { firstMs: 10_000, maxMs: 300_000 };

/** One healer action and whether it worked (a failure is logged and reported as a "failed" device step). */
export interface HealResult {
  action: HealAction;
  ok: boolean;
}

/** The volumes of `vs` that mapping `kind` maps (a volume without a recorded kind: "loop"). */
const mappedBy = (vs: readonly VolumeState[], kind: MappingKind) => vs.filter((v) => (v.mapping ?? "loop") === kind);

/** What a device report tells beside the volume, its state and its origin. */
export type ReportDetails = { device?: string; path?: string; reason?: string; pod?: PodInfo; mapping?: MappingKind };

/** What the healer uses of the node service: its state, its per-volume lock, and its steps (each idempotent, each reporting). */
export interface HealerHands {
  log: Logger;
  /** The deadline of one action. */
  timeoutMs: number;
  /** The mappings by kind; "loop" is always there. */
  mappings: ReadonlyMap<MappingKind, BlockMapping>;
  /** The pools' and the mappings' own directories: where leftovers of ours may be. */
  roots(): string[];
  state(): NodeState;
  op<T>(volumeId: string, what: string, fn: () => Promise<T>): Promise<T>;
  save(): Promise<void>;
  report(v: Pick<VolumeState, "clusterID" | "uuid">, state: DeviceState, origin: Origin, more?: ReportDetails): void;
  ensureAttached(v: VolumeState, origin: Origin): Promise<string>;
  mountStaging(v: VolumeState, device: string, origin: Origin, replace?: string): Promise<void>;
  bind(
    v: VolumeState,
    target: string,
    how: { readOnly: boolean; origin: Origin; stale?: (m: MountEntry) => boolean; pod?: PodInfo | undefined },
  ): Promise<boolean>;
}

export class Healer {
  /** Volumes whose last mapping repair failed: when to try again, and the wait before that try. */
  readonly #healBackoff = new Map<string, { at: number; ms: number }>();

  constructor(private readonly h: HealerHands) {}

  /** Compare the state file with the machine and repair; each action is reported, with one request id per run. Returns each action and whether it worked. */
  async heal(): Promise<HealResult[]> {
    const roots = await Promise.all(this.h.roots().map((r) => realpath(r).catch(() => r)));
    return this.#heal(this.h.state(), roots, "all");
  }

  /**
   * The running agent's repair of mappings: the volumes whose carrier (rbd-fuse mount) is dead or
   * gone (its process was killed, or it exited) are healed, each under its lock, by the same plan as
   * at start restricted to that volume (nothing else is touched: no leftovers are looked for).
   */
  async healMappings(): Promise<HealResult[]> {
    const results: HealResult[] = [];
    for (const volumeId of await this.#brokenMappings()) {
      // A repair that failed (Ceph unreachable, a pod holding the broken mount) is tried again later and later, not every check.
      const last = this.#healBackoff.get(volumeId);
      if (last && Date.now() < last.at) continue;
      const done = await this.h.op(volumeId, "heal", async () => {
        const v = this.h.state().volumes[volumeId];
        return v ? this.#heal({ version: 1, volumes: { [volumeId]: v } }, [], "wanted") : [];
      });
      if (done.every((r) => r.ok)) this.#healBackoff.delete(volumeId);
      else {
        const ms = Math.min(last ? last.ms * 2 : HEAL_BACKOFF.firstMs, HEAL_BACKOFF.maxMs);
        this.#healBackoff.set(volumeId, { at: Date.now() + ms, ms });
      }
      results.push(...done);
    }
    return results;
  }

  /** The volumes whose mapping's carrier is not up (each mapping asked once, for its own volumes). */
  async #brokenMappings(): Promise<string[]> {
    const broken: string[] = [];
    for (const [kind, mapping] of this.h.mappings) {
      const mine = mappedBy(Object.values(this.h.state().volumes), kind);
      if (mine.length === 0) continue;
      const health = await mapping.health(mine);
      broken.push(...mine.filter((v) => health.get(v.volumeId) !== "up").map((v) => v.volumeId));
    }
    return broken;
  }

  /** Run `healMappings` every `everyMs` (while any volume is mapped by rbd-fuse), each run's results to `onHealed`; stop() ends it. */
  watchMappings(everyMs: number, onHealed: (results: HealResult[]) => void = () => {}): { stop(): void } {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      this.healMappings()
        .then(onHealed)
        .catch((err) => this.h.log.warn({ err: String(err) }, "checking rbd-fuse mappings failed"))
        .finally(() => {
          running = false;
        });
    }, everyMs);
    timer.unref();
    return { stop: () => clearInterval(timer) };
  }

  /**
   * What the machine holds of the mappings' work, as the heal plan reads it. `scope` "wanted": only
   * what the state's volumes need (no leftover carriers, no dead carrier of another volume).
   */
  async #observe(state: NodeState, scope: "all" | "wanted"): Promise<Observed> {
    const seen: MappingSeen[] = [];
    for (const [kind, mapping] of this.h.mappings) seen.push(await mapping.seen(mappedBy(Object.values(state.volumes), kind), scope));
    const unique = (ds: MappingSeen["devices"]) => [...new Map(ds.map((d) => [d.device, d])).values()];
    return {
      loops: unique(seen.flatMap((x) => x.devices)),
      deletedLoops: unique(seen.flatMap((x) => x.deletedDevices)),
      mounts: await mnt.readMounts(),
      deadMappings: seen.flatMap((x) => x.deadCarriers),
      fuseMounts: seen.flatMap((x) => x.carriers),
    };
  }

  async #heal(state: NodeState, roots: string[], scope: "all" | "wanted"): Promise<HealResult[]> {
    const origin: Origin = { via: "healer", requestId: randomUUID() };
    const plan = planHeal(state, await this.#observe(state, scope), roots);
    const results: HealResult[] = [];
    /** Volumes whose stale device could not be taken down (busy): the rest of their repair waits for the next run. */
    const waiting = new Set<string>();
    for (const a of plan) {
      const volumeId = "volumeId" in a ? a.volumeId : undefined;
      if (volumeId !== undefined && waiting.has(volumeId)) {
        results.push({ action: a, ok: false });
        continue;
      }
      try {
        await withDeadline(this.h.timeoutMs, `heal ${a.kind}`, () => this.#apply(a, origin));
        results.push({ action: a, ok: true });
      } catch (err) {
        if (volumeId !== undefined && (a.kind === "unmount" || a.kind === "detach")) waiting.add(volumeId);
        results.push({ action: a, ok: false });
        this.h.log.error({ err: String(err), action: a }, "heal action failed");
        const v = volumeId === undefined ? undefined : this.h.state().volumes[volumeId];
        if (v) this.h.report(v, "failed", origin, { reason: `heal ${a.kind}: ${(err as Error).message}` });
      }
    }
    if (plan.length) {
      await this.h.save();
      this.h.log.info({ actions: plan.length, requestId: origin.requestId }, "healer repaired the node");
    }
    return results;
  }

  /** The mapping whose own directory holds `p` (rbd-fuse's), else the loop mapping. */
  #mappingAt(p: string): BlockMapping {
    const loop = this.h.mappings.get("loop") as BlockMapping; // NodeService requires it
    return [...this.h.mappings.values()].find((m) => m.root !== undefined && p.startsWith(`${m.root}/`)) ?? loop;
  }

  async #apply(a: HealAction, origin: Origin): Promise<void> {
    if (a.kind === "unmount") return mnt.unmount(a.path);
    if (a.kind === "detach") {
      await this.#mappingAt(a.backingFile).release(a.device, a.backingFile);
      const v = a.volumeId === undefined ? undefined : this.h.state().volumes[a.volumeId];
      if (v && a.reason === "its image was deleted") this.h.report(v, "detached", origin, { device: a.device, reason: a.reason });
      return;
    }
    if (a.kind === "unmap") return this.#mappingAt(a.path).releaseCarrier(a.path);
    const v = this.h.state().volumes[a.volumeId] as VolumeState;
    if (a.kind === "conflict") throw new DriverError("FailedPrecondition", `${a.reason}; left alone`);
    if (a.kind === "attach") {
      const device = await this.h.ensureAttached(v, origin);
      this.h.report(v, "healed", origin, { device, reason: "re-attached a device that was gone" });
    } else if (a.kind === "mount-staging") {
      const device = await this.h.ensureAttached(v, origin);
      await this.h.mountStaging(v, device, origin, a.remountFrom);
      this.h.report(v, "healed", origin, {
        device,
        path: v.staging?.path,
        reason: a.remountFrom ? `re-mounted staging (was ${a.remountFrom})` : "re-mounted staging",
      });
    } else if (a.kind === "publish") {
      const p = v.publishes.find((x) => x.target === a.target);
      const old = a.replace;
      // Replaces a bind of the old device.
      await this.h.bind(v, a.target, { readOnly: p?.readOnly ?? false, origin, stale: (m) => old !== undefined && isMountOfDevice(m, old), pod: p?.pod });
      this.h.report(v, "healed", origin, { path: a.target, reason: "re-published a target that was gone", ...(p?.pod ? { pod: p.pod } : {}) });
    }
  }
}
