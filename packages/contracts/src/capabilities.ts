/**
 * What the control plane and the nodes reason about a volume capability, in one place: the
 * filesystems we make, which access modes are reader-only or single-node, and what we refuse.
 */
import type { AccessMode, Capability } from "./common.js";

/** Filesystems the node-agent makes and grows ("" = the default, ext4). */
export const SUPPORTED_FS = ["ext4", "xfs"] as const;
export type SupportedFs = (typeof SUPPORTED_FS)[number];
export const DEFAULT_FS: SupportedFs = "ext4";
export const isSupportedFs = (fs: string): fs is SupportedFs => (SUPPORTED_FS as readonly string[]).includes(fs);

const READER_ONLY: ReadonlySet<AccessMode> = new Set(["SINGLE_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"]);
const SINGLE_NODE: ReadonlySet<AccessMode> = new Set([
  "SINGLE_NODE_WRITER",
  "SINGLE_NODE_READER_ONLY",
  "SINGLE_NODE_SINGLE_WRITER",
  "SINGLE_NODE_MULTI_WRITER",
]);
/** Plain filesystems cannot be written from two nodes; raw block can (the user coordinates). */
const MULTI_WRITER: ReadonlySet<AccessMode> = new Set(["MULTI_NODE_MULTI_WRITER", "MULTI_NODE_SINGLE_WRITER"]);

/** Reader-only access modes: the volume is attached and mounted read-only. */
export const isReaderOnlyMode = (m: AccessMode) => READER_ONLY.has(m);
export const readerOnly = (c: Pick<Capability, "accessMode">) => isReaderOnlyMode(c.accessMode);
export const isSingleNode = (m: AccessMode) => SINGLE_NODE.has(m);

/** Why this driver cannot serve a capability, or undefined if it can. */
export function unsupported(c: Capability): string | undefined {
  if (c.accessType === "mount" && c.fsType && !isSupportedFs(c.fsType))
    return `filesystem ${JSON.stringify(c.fsType.slice(0, 32))}${c.fsType.length > 32 ? "…" : ""} is not supported (${SUPPORTED_FS.join(", ")})`;
  if (c.accessType === "mount" && MULTI_WRITER.has(c.accessMode))
    return `${c.accessMode} needs a block volume: a filesystem cannot be written from several nodes`;
  return undefined;
}
