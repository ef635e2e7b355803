/**
 * The healer's plan: compare what the state file says should be on this node with what the
 * machine has (loop devices, /proc/self/mountinfo) and list the repairs, in order. Pure.
 *
 *   - a volume whose image is not attached        → attach
 *   - a staged filesystem not mounted at staging  → mount-staging (after attach); mounted from
 *     the volume's old device (recorded in the state file) → mount-staging replacing that mount
 *   - a publish whose target is not a mount point → publish (after staging); a bind of the
 *     volume's old device → publish replacing it
 *   - a staging path or target covered by a mount that is not the volume's → conflict: reported,
 *     never unmounted (the agent only undoes what it did)
 *   - a loop device of one of our pools that no volume wants → unmount its mounts, detach it
 *   - a loop device of one of our pools whose image was deleted under it (docs/journal.md, "In use
 *     means in use") → detach it when nothing mounts it; mounted, its data lives only in the device
 *     now: a conflict, reported, never taken down
 *
 * RBD images mapped by rbd-fuse (`mapping: "fuse"`): the image's file lies in the node's own
 * rbd-fuse mount. When that mount is dead (its rbd-fuse process died: ENOTCONN), the loop device
 * on the file cannot be revived (it holds the dead FUSE connection's file; the kernel rebinds a
 * loop device to another file only read-only), so it is replaced, as a file pool's device that is
 * gone: first every mount of the stale device is unmounted (targets, then staging: all of them,
 * because xfs refuses to mount a second device holding a filesystem whose UUID is still mounted)
 * and the device detached; then `attach` starts a new rbd-fuse and attaches the file anew, and
 * staging and targets are mounted again. An rbd-fuse mount of ours that no volume wants is
 * unmounted (`unmap`) once its loop devices are gone.
 */
import path from "node:path";
import { isMountOfDevice, type MountEntry } from "./mountinfo.js";
import type { NodeState } from "./node-state.js";

export interface Observed {
  loops: { device: string; backingFile: string }[];
  /** Loop devices whose backing file was unlinked since they were attached (the path they were attached at). */
  deletedLoops?: { device: string; backingFile: string }[];
  mounts: MountEntry[];
  /** The rbd-fuse mount directories of ours whose process is gone. */
  deadMappings?: readonly string[];
  /** Every rbd-fuse mount directory of ours (alive or dead). */
  fuseMounts?: readonly string[];
}

export type HealAction =
  | { kind: "attach"; volumeId: string }
  | { kind: "mount-staging"; volumeId: string; remountFrom?: string }
  /** `replace`: the old device whose bind is at the target (to be replaced by one of the current device). */
  | { kind: "publish"; volumeId: string; target: string; replace?: string }
  | { kind: "conflict"; volumeId: string; path: string; reason: string }
  /** `volumeId`: the volume whose stale device this takes down (its repair depends on it: if this fails, the rest of it waits). */
  | { kind: "unmount"; path: string; reason: string; volumeId?: string }
  | { kind: "detach"; device: string; backingFile: string; reason: string; volumeId?: string }
  /** Take down an rbd-fuse mount of ours (no volume wants it). */
  | { kind: "unmap"; path: string; reason: string };

const inside = (root: string, p: string) => p.startsWith(root.endsWith(path.sep) ? root : root + path.sep);

/** `poolRoots`: where the images of this node's pools lie (file pools' roots, the rbd-fuse directory): loop devices there that no volume wants are leftovers. */
export function planHeal(state: NodeState, observed: Observed, poolRoots: string[]): HealAction[] {
  const actions: HealAction[] = [];
  const seen = withoutStale(state, observed, actions);
  const deviceOf = new Map(seen.loops.map((l) => [l.backingFile, l.device]));
  const mountAt = new Map(seen.mounts.map((m) => [m.mountPoint, m]));
  const wanted = new Set<string>();

  for (const v of Object.values(state.volumes)) {
    wanted.add(v.imagePath);
    const device = deviceOf.get(v.imagePath);
    if (!device) actions.push({ kind: "attach", volumeId: v.volumeId });
    /** A mount of this volume: of its device now, or of the one it had when the state was saved. */
    const ours = (m: MountEntry) => [device, v.device].some((d) => d !== undefined && isMountOfDevice(m, d));
    const current = (m: MountEntry) => device !== undefined && isMountOfDevice(m, device);
    const conflict = (at: string, m: MountEntry) =>
      actions.push({ kind: "conflict", volumeId: v.volumeId, path: at, reason: `a ${m.fsType} filesystem this node did not mount is at ${at}` });
    if (v.staging?.capability.accessType === "mount") {
      const m = mountAt.get(v.staging.path);
      if (!m) actions.push({ kind: "mount-staging", volumeId: v.volumeId });
      else if (!ours(m)) conflict(v.staging.path, m);
      // A staging mount from an old device (before a re-attach) has to be replaced.
      else if (!current(m)) actions.push({ kind: "mount-staging", volumeId: v.volumeId, remountFrom: m.source });
    }
    for (const p of v.publishes) {
      const m = mountAt.get(p.target);
      if (!m) actions.push({ kind: "publish", volumeId: v.volumeId, target: p.target });
      else if (!ours(m)) conflict(p.target, m);
      else if (!current(m) && v.device !== undefined) actions.push({ kind: "publish", volumeId: v.volumeId, target: p.target, replace: v.device });
    }
  }

  for (const l of seen.loops) {
    if (wanted.has(l.backingFile) || !poolRoots.some((r) => inside(r, l.backingFile))) continue;
    for (const m of seen.mounts.filter((m) => m.source === l.device).reverse()) {
      actions.push({ kind: "unmount", path: m.mountPoint, reason: `leftover mount of ${l.device}` });
    }
    actions.push({ kind: "detach", device: l.device, backingFile: l.backingFile, reason: "no volume on this node wants it" });
  }

  const volumeOf = new Map(Object.values(state.volumes).map((v) => [v.imagePath, v.volumeId]));
  for (const l of observed.deletedLoops ?? []) {
    if (!poolRoots.some((r) => inside(r, l.backingFile))) continue; // only images of our pools
    const volumeId = volumeOf.get(l.backingFile);
    const of = volumeId === undefined ? {} : { volumeId };
    if (seen.mounts.some((m) => isMountOfDevice(m, l.device))) {
      if (volumeId !== undefined)
        actions.push({
          kind: "conflict",
          volumeId,
          path: l.device,
          reason: `the image of ${l.device} was deleted while it was mounted: its data lives only in the device now`,
        });
      continue;
    }
    actions.push({ kind: "detach", device: l.device, backingFile: l.backingFile, reason: "its image was deleted", ...of });
  }

  const mappedAt = new Set(Object.values(state.volumes).flatMap((v) => (v.mapping === "fuse" ? [path.dirname(v.imagePath)] : [])));
  for (const dir of observed.fuseMounts ?? []) {
    if (!mappedAt.has(dir)) actions.push({ kind: "unmap", path: dir, reason: "no volume on this node wants this rbd-fuse mount" });
  }
  return actions;
}

/**
 * The loop devices on files in dead rbd-fuse mounts are stale: plan to unmount everything
 * mounted from them (latest first) and detach them, and return what is seen without them.
 */
function withoutStale(state: NodeState, seen: Observed, actions: HealAction[]): Observed {
  const dead = seen.deadMappings ?? [];
  const stale = seen.loops.filter((l) => dead.some((d) => inside(d, l.backingFile)));
  if (stale.length === 0) return seen;
  const staleMount = (m: MountEntry) => stale.some((l) => isMountOfDevice(m, l.device));
  const volumeOf = new Map(Object.values(state.volumes).map((v) => [v.imagePath, v.volumeId]));
  for (const l of stale) {
    const volumeId = volumeOf.get(l.backingFile);
    const of = volumeId === undefined ? {} : { volumeId };
    for (const m of seen.mounts.filter((m) => isMountOfDevice(m, l.device)).reverse())
      actions.push({ kind: "unmount", path: m.mountPoint, reason: `mount of ${l.device}, whose rbd-fuse process is gone`, ...of });
    actions.push({ kind: "detach", device: l.device, backingFile: l.backingFile, reason: "its rbd-fuse process is gone", ...of });
  }
  return { ...seen, loops: seen.loops.filter((l) => !stale.includes(l)), mounts: seen.mounts.filter((m) => !staleMount(m)) };
}
