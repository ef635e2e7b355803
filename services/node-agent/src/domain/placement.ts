/**
 * Whether the agent may mount at a path, and what unpublish may undo there: the node's rule
 * "only undo what we did" as pure decisions over what is at the path. Pure: the adapters look
 * (lstat, readdir, mountinfo) and do; these functions decide.
 *
 * Mounting (stage, publish): the visible mount at the path is ours → already done; a mount that
 * is not ours → FAILED_PRECONDITION (never mount over, never unmount, a foreign filesystem); a
 * directory (for a filesystem) or a file (for a block volume's device) must be empty; nothing
 * there → the agent creates the last component, and only when its parent exists (the CO creates
 * the parent: CSI spec, NodePublishVolume).
 *
 * Unpublish: see `planUnpublish`.
 */
import { quote } from "@csi/contracts";
import type { MountEntry } from "./mountinfo.js";
import type { Refusal as MaybeRefusal, VolumeState } from "./node-state.js";

/** What is at a path, as the agent saw it just before it decides. */
export interface PathSeen {
  path: string;
  /** What lstat found there ("other": a symlink, device node, socket, FIFO). */
  kind: "absent" | "dir" | "file" | "other";
  /** A directory without entries, or a file of 0 bytes. */
  empty: boolean;
  /** The path's parent exists and is a directory. */
  parentIsDir: boolean;
  /** The mounts at the path, the visible one last. */
  mounts: readonly MountEntry[];
}

type Refusal = NonNullable<MaybeRefusal>;
export type Placement = { kind: "mounted" } | { kind: "mount"; create: boolean } | ({ kind: "refuse" } & Refusal);

const refuse = (reason: string): Placement => ({ kind: "refuse", code: "FailedPrecondition", reason });
const shown = (p: string) => quote(p, 128);

/**
 * May the agent mount at `seen.path`? `want` is what the mount needs there: a directory (a
 * filesystem) or a file (a block volume's device); `ours` tells a mount the agent made for this
 * volume from any other.
 */
export function placeMount(seen: PathSeen, want: "dir" | "file", ours: (m: MountEntry) => boolean): Placement {
  const top = seen.mounts.at(-1);
  if (top) return ours(top) ? { kind: "mounted" } : refuse(`${shown(seen.path)} has a ${top.fsType} filesystem mounted that this node did not mount there`);
  switch (seen.kind) {
    case "absent":
      return seen.parentIsDir ? { kind: "mount", create: true } : refuse(`the parent directory of ${shown(seen.path)} does not exist (the CO creates it)`);
    case "dir":
      if (want === "file") return refuse(`${shown(seen.path)} is a directory; a block volume is published onto a file`);
      return seen.empty ? { kind: "mount", create: false } : refuse(`${shown(seen.path)} is not empty: mounting there would hide what it holds`);
    case "file":
      if (want === "dir") return refuse(`${shown(seen.path)} exists and is not a directory`);
      return seen.empty ? { kind: "mount", create: false } : refuse(`${shown(seen.path)} is a file that is not empty`);
    default:
      return refuse(`${shown(seen.path)} exists and is neither a directory nor a regular file`);
  }
}

export type UnpublishPlan =
  /** Nothing of this volume is at the path: OK, and nothing is touched. */
  | { kind: "nothing" }
  | ({ kind: "refuse" } & Refusal)
  /** Unmount the volume's mounts at the path (while the visible one is ours), then remove what the agent made there. */
  | { kind: "undo"; remove: "made" | "empty-dir" | "none"; recorded: boolean };

/**
 * NodeUnpublishVolume. `v` is the volume as the state file has it (undefined: never seen, or
 * gone); `ours` tells a mount of this volume (from mountinfo and its loop device).
 *
 *   - unknown volume: OK when nothing is at the path (a retry after success), else NOT_FOUND —
 *     and never touched: the agent did not put it there;
 *   - the state file records the publish: unmount our mounts (a foreign mount on top →
 *     FAILED_PRECONDITION), then remove the target if the agent made it (a publish recorded
 *     before the state file said so: only an empty directory);
 *   - not recorded, but the visible mount is this volume's (the agent stopped between the mount
 *     and saving its state): unmount it, remove nothing;
 *   - otherwise the volume is not published there: OK, nothing touched.
 */
export function planUnpublish(v: VolumeState | undefined, seen: PathSeen, ours: (m: MountEntry) => boolean): UnpublishPlan {
  if (!v) {
    if (seen.kind === "absent") return { kind: "nothing" };
    return { kind: "refuse", code: "NotFound", reason: `the volume is not published on this node; ${shown(seen.path)} is left as it is` };
  }
  const top = seen.mounts.at(-1);
  const recorded = v.publishes.find((p) => p.target === seen.path);
  if (!recorded) return top && ours(top) ? { kind: "undo", remove: "none", recorded: false } : { kind: "nothing" };
  if (top && !ours(top)) {
    return { kind: "refuse", code: "FailedPrecondition", reason: `a ${top.fsType} filesystem this node did not mount covers ${shown(seen.path)}` };
  }
  return { kind: "undo", remove: recorded.made === true ? "made" : recorded.made === false ? "none" : "empty-dir", recorded: true };
}
