/**
 * CSI message helpers both gRPC services need: argument checks and the VolumeCapability
 * translation (proto-loader objects: keepCase, longs as strings, oneofs named). Pure.
 */
import { AccessMode, type Capability } from "./common.js";
import { invalidArgument } from "./errors.js";

export const SUPPORTED_FS = new Set(["", "ext4", "xfs"]);
/** Plain filesystems cannot be written from two nodes; raw block can (the user coordinates). */
const MULTI_WRITER_MODES = new Set(["MULTI_NODE_MULTI_WRITER", "MULTI_NODE_SINGLE_WRITER"]);

// biome-ignore lint/suspicious/noExplicitAny: proto-loader messages are plain objects
export type CsiMsg = any;

export function required(value: unknown, field: string): asserts value {
  if (value === undefined || value === null || value === "") throw invalidArgument(`${field} is required`);
}

/** A VolumeCapability → our Capability (structure only; `unsupported` says what we refuse). */
export function toCapability(vc: CsiMsg, field = "volume_capability"): Capability {
  if (!vc) throw invalidArgument(`${field} is required`);
  const mode = vc.access_mode?.mode;
  const parsed = AccessMode.safeParse(mode);
  if (!parsed.success) throw invalidArgument(`${field}.access_mode must be set to a known mode, got ${JSON.stringify(mode ?? null)}`);
  if (vc.block) return { accessType: "block", accessMode: parsed.data };
  if (vc.mount) {
    const fsType = String(vc.mount.fs_type ?? "");
    const mountFlags = (vc.mount.mount_flags ?? []) as string[];
    return { accessType: "mount", accessMode: parsed.data, ...(fsType ? { fsType } : {}), ...(mountFlags.length ? { mountFlags } : {}) };
  }
  throw invalidArgument(`${field} must have an access type (mount or block)`);
}

/** Why this driver cannot serve a capability, or undefined if it can. */
export function unsupported(c: Capability): string | undefined {
  if (c.accessType === "mount" && !SUPPORTED_FS.has(c.fsType ?? "")) return `filesystem ${c.fsType} is not supported (ext4, xfs)`;
  if (c.accessType === "mount" && MULTI_WRITER_MODES.has(c.accessMode)) return `${c.accessMode} needs a block volume: a filesystem cannot be written from several nodes`;
  return undefined;
}

export function toCapabilities(list: CsiMsg[] | undefined, field = "volume_capabilities"): Capability[] {
  if (!list || list.length === 0) throw invalidArgument(`${field} is required`);
  return list.map((vc, i) => toCapability(vc, `${field}[${i}]`));
}


/** Reader-only access modes: the volume is attached and mounted read-only. */
export const readerOnly = (c: Capability) => c.accessMode.endsWith("READER_ONLY");
