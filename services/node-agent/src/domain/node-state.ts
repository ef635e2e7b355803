/**
 * What this node has done, persisted in a small state file so that after a restart the healer
 * knows what should be attached, staged and published. Pure: the schema, the usage tracking
 * (Nomad's: stage once per volume, unstage only when the last publish is gone) and the
 * compatibility rules of repeated stage/publish calls.
 */
import { Capability, type ErrorName, MappingKind, PodInfo, quote } from "@csi/contracts";
import { z } from "zod";

export const Publish = z.object({
  target: z.string(),
  readOnly: z.boolean(),
  /** The agent created the target (directory or file), so unpublish removes it; absent in records older than this field. */
  made: z.boolean().optional(),
  /** The pod it was published for (podInfoOnMount), named again by its unpublish and heals; absent without it. */
  pod: PodInfo.optional(),
});
export type Publish = z.infer<typeof Publish>;

export const VolumeState = z.object({
  volumeId: z.string(),
  clusterID: z.string(),
  uuid: z.string(),
  /** The file a loop device maps: a file pool's image, or an RBD image's file in its rbd-fuse mount. */
  imagePath: z.string(),
  /** How the image is mapped: absent or "loop" for a file pool's image, "fuse" for an RBD image through rbd-fuse. */
  mapping: MappingKind.optional(),
  /** Attached read-only (reader-only access mode or a read-only publish context). */
  readOnly: z.boolean(),
  /** The loop device it was last attached to (devices can change across restarts). */
  device: z.string().optional(),
  staging: z.object({ path: z.string(), capability: Capability }).optional(),
  publishes: z.array(Publish),
});
export type VolumeState = z.infer<typeof VolumeState>;

export const NodeState = z.object({ version: z.literal(1), volumes: z.record(z.string(), VolumeState) });
export type NodeState = z.infer<typeof NodeState>;
export const emptyState = (): NodeState => ({ version: 1, volumes: {} });

/** A path in a message (paths are already checked: no control characters, at most 1024 bytes). */
const q = (p: string) => quote(p, 128);

export type Refusal = { code: ErrorName; reason: string } | undefined;

const sameCapability = (a: Capability, b: Capability) =>
  a.accessType === b.accessType &&
  a.accessMode === b.accessMode &&
  (a.fsType ?? "") === (b.fsType ?? "") &&
  JSON.stringify(a.mountFlags ?? []) === JSON.stringify(b.mountFlags ?? []);

/** A repeated NodeStageVolume: same path and capability → fine (idempotent), else AlreadyExists. */
export function checkRestage(v: VolumeState, path: string, cap: Capability): Refusal {
  if (!v.staging) return undefined;
  if (v.staging.path !== path) return { code: "AlreadyExists", reason: `volume is already staged at ${q(v.staging.path)}` };
  if (!sameCapability(v.staging.capability, cap)) return { code: "AlreadyExists", reason: "volume is already staged with another capability" };
  return undefined;
}

/** NodePublishVolume needs the volume staged at the given staging path; a repeat must match. */
export function checkPublish(v: VolumeState | undefined, stagingPath: string, target: string, readOnly: boolean): Refusal {
  if (!v?.staging) return { code: "FailedPrecondition", reason: "volume is not staged on this node" };
  if (v.staging.path !== stagingPath) return { code: "FailedPrecondition", reason: `volume is staged at ${q(v.staging.path)}, not ${q(stagingPath)}` };
  const existing = v.publishes.find((p) => p.target === target);
  if (existing && existing.readOnly !== readOnly)
    return { code: "AlreadyExists", reason: `${q(target)} is already published with read-only=${existing.readOnly}` };
  // CSI: a SINGLE_NODE_SINGLE_WRITER volume is published at one target path at a time.
  const other = v.publishes.find((p) => p.target !== target);
  if (!existing && other && v.staging.capability.accessMode === "SINGLE_NODE_SINGLE_WRITER")
    return { code: "FailedPrecondition", reason: `volume is SINGLE_NODE_SINGLE_WRITER and already published at ${q(other.target)}` };
  return undefined;
}

/**
 * NodeUnstageVolume of a volume staged here: at another staging path → NotFound (the CO keeps one
 * staging path per volume; the volume is not at the one given, and answering OK would let the CO
 * release its claim while the volume stays attached here). Usage tracking: refused while any
 * publish of the volume remains on this node.
 */
export function checkUnstage(v: VolumeState, stagingPath: string): Refusal {
  if (v.staging && v.staging.path !== stagingPath)
    return { code: "NotFound", reason: `the volume is not staged at ${q(stagingPath)} (it is staged at another path on this node)` };
  if (v.publishes.length > 0)
    return {
      code: "FailedPrecondition",
      reason: `volume is still published at ${v.publishes
        .slice(0, 3)
        .map((p) => q(p.target))
        .join(", ")}${v.publishes.length > 3 ? ` and ${v.publishes.length - 3} more` : ""}`,
    };
  return undefined;
}

/** The paths a volume is reachable at on this node (for stats and expand). */
export function pathsOf(v: VolumeState): string[] {
  return [...(v.staging ? [v.staging.path] : []), ...v.publishes.map((p) => p.target)];
}
