/**
 * CSI message helpers both gRPC services need: argument checks and the VolumeCapability
 * translation (proto-loader objects: keepCase, longs as strings, enums as strings, oneofs named).
 * Pure.
 */
import { AccessMode, type Capability, invalidArgument, quote } from "@csi/contracts";
import type { VolumeCapability__Output } from "./generated/csi/v1/VolumeCapability.js";

export type VolumeCapabilityMsg = VolumeCapability__Output;

/** A field the caller must set (proto3 leaves unset strings empty). */
export function required<T>(value: T | null | undefined | "", field: string): asserts value is T {
  if (value === undefined || value === null || value === "") throw invalidArgument(`${field} is required`);
}

/** A VolumeCapability → our Capability (structure only; `unsupported` says what we refuse). */
export function toCapability(vc: VolumeCapabilityMsg | null | undefined, field = "volume_capability"): Capability {
  if (!vc) throw invalidArgument(`${field} is required`);
  const mode = vc.access_mode?.mode;
  const parsed = AccessMode.safeParse(mode);
  if (!parsed.success) throw invalidArgument(`${field}.access_mode must be set to a known mode, got ${quote(mode ?? null)}`);
  if (vc.block) return { accessType: "block", accessMode: parsed.data };
  if (vc.mount) {
    const fsType = String(vc.mount.fs_type ?? "");
    const mountFlags = vc.mount.mount_flags ?? [];
    return { accessType: "mount", accessMode: parsed.data, ...(fsType ? { fsType } : {}), ...(mountFlags.length ? { mountFlags } : {}) };
  }
  throw invalidArgument(`${field} must have an access type (mount or block)`);
}

export function toCapabilities(list: VolumeCapabilityMsg[] | undefined, field = "volume_capabilities"): Capability[] {
  if (!list || list.length === 0) throw invalidArgument(`${field} is required`);
  return list.map((vc, i) => toCapability(vc, `${field}[${i}]`));
}
