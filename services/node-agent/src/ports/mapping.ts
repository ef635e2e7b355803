/**
 * The mapping port: how a volume's image becomes a block device on this node, and stops being one.
 *
 * NodeService keeps the CSI rules (what may be staged where, what is ours to undo) and asks a
 * mapping for the device under them. One implementation per kind (`MappingKind`):
 *
 *   - "loop": a file pool's image file on a loop device (adapters/loop-mapping.ts);
 *   - "fuse": an RBD image shown as a file by an rbd-fuse of the agent's own, with a loop device
 *     on that file (adapters/fuse-mapping.ts);
 *   - krbd and rbd-nbd later: each a new implementation of this port, nothing else changes.
 *
 * Every implementation passes test/contracts/mapping.contract.ts (test/mapping.test.ts): map makes
 * a device of the image's size, a second map gives the same device, unmap takes away only what
 * the volume's map made, unmap of an unknown volume is a no-op, and a new instance (as after a
 * restart) finds what an earlier one made, reports what broke, and maps it again.
 *
 * A mapping is keyed by the volume's `imagePath` (what the state file records): the file a loop
 * device maps, or a stable name of the image for a mapping without a file.
 */
import type { MappingKind } from "@csi/contracts";

/** A volume as a mapping sees it: its id, the key of its image (from `locate`), and how it is attached. */
export interface MappedVolume {
  volumeId: string;
  imagePath: string;
  readOnly: boolean;
}

/** Where a volume's image is, from its id alone (never from a field a caller sets). */
export interface VolumeImage {
  volumeId: string;
  clusterID: string;
  poolID: number;
  /** The image's name in its pool (volumeImageName of the uuid). */
  imageName: string;
}

/** Whether what carries a volume's device is alive: "up"; "dead" (its process is gone); "absent" (nothing there). */
export type CarrierHealth = "up" | "dead" | "absent";

/** A device a mapping finds on the machine: the device node and the image key it maps. */
export interface SeenDevice {
  device: string;
  backingFile: string;
}

/** What the healer needs to know of a mapping's work on the machine (domain/heal.ts's Observed, this mapping's part). */
export interface MappingSeen {
  devices: SeenDevice[];
  /** Devices whose image was deleted under them (shown at the key they were made from). */
  deletedDevices: SeenDevice[];
  /** The carriers (rbd-fuse mount directories) of this mapping on the machine, alive or dead (scope "all"; else none). */
  carriers: string[];
  /** The carriers whose process is gone (of those found, and of those the wanted volumes need). */
  deadCarriers: string[];
}

export interface BlockMapping {
  readonly kind: MappingKind;
  /** Where this mapping keeps what carries its devices (its own directory), if it has one: leftovers are looked for there. */
  readonly root: string | undefined;
  /** Ready the mapping (its directory made); called once, before any other call. */
  prepare(): Promise<void>;
  /** The key of a volume's image (MappedVolume.imagePath); NotFound where the mapping can tell that the image does not exist. */
  locate(image: VolumeImage): Promise<string>;
  /** The device now mapping the volume, if any; `evenDeleted`: also one whose image was deleted under it. Never maps. */
  find(v: MappedVolume, opts?: { evenDeleted?: boolean }): Promise<string | undefined>;
  /** The volume's device, made if there is none (`made`: this call made it). Idempotent. */
  map(v: MappedVolume): Promise<{ device: string; made: boolean }>;
  /**
   * Take away what `map` made for this volume (its device, then what carried it), nothing else;
   * a volume with nothing mapped is a no-op. `detached` hears of the device as soon as it is gone.
   */
  unmap(v: MappedVolume, detached?: (device: string) => void): Promise<void>;
  /** Make the device see the image's current size (after it grew). */
  refreshSize(device: string): Promise<void>;
  /** The health of what carries each volume's device, by volume id ("up" for a mapping without a carrier). */
  health(vs: readonly MappedVolume[]): Promise<Map<string, CarrierHealth>>;
  /** Why a volume's mapping is not serving it, else undefined; and its device, if it has one. */
  condition(v: MappedVolume): Promise<{ device: string | undefined; abnormal: string | undefined }>;
  /**
   * What the healer sees of this mapping's devices and carriers; `wanted`: the volumes of this
   * mapping the state file holds. `scope` "wanted": only their carriers (no leftovers are looked for).
   */
  seen(wanted: readonly MappedVolume[], scope: "all" | "wanted"): Promise<MappingSeen>;
  /** Take down a device `seen` reported (only while it still maps `backingFile`). */
  release(device: string, backingFile: string): Promise<void>;
  /** Take down a carrier `seen` reported that no volume wants (only under `root`). */
  releaseCarrier(dir: string): Promise<void>;
}
