/**
 * How this node maps RBD images, chosen once at start from facts an adapter reads
 * (adapters/rbd-mapping.ts): the kernel's rbd driver (`rbd device map`), rbd-nbd, or rbd-fuse
 * with a loop device on the image's file. Pure.
 *
 * The preference is ceph-csi's: krbd (in the kernel, fastest), then rbd-nbd (librbd in user
 * space, any image feature), then rbd-fuse + loop (user space, no kernel module but FUSE and
 * loop). Only kinds this node-agent can drive are chosen (`BUILT_MAPPINGS`); the others are
 * detected and reported as available, so a node's log says what it could use.
 */
import { RBD_MAPPING_KEY, type RbdMapping, TOPOLOGY_KEY } from "@csi/contracts";

/** What the machine offers, as read at start. */
export interface MappingFacts {
  /** /sys/bus/rbd exists (the rbd module is loaded or built in), or `modprobe rbd` worked. */
  rbdModule: boolean;
  /** The `rbd` CLI (for `rbd device map`). */
  rbdBinary: boolean;
  /** The nbd module is loaded (/sys/module/nbd), or `modprobe nbd` worked. */
  nbdModule: boolean;
  rbdNbdBinary: boolean;
  rbdFuseBinary: boolean;
  /** /dev/fuse exists. */
  fuseDevice: boolean;
  /** /dev/loop-control exists. */
  loopControl: boolean;
}

/** The kinds this node-agent can map with, in preference order. krbd and rbd-nbd are detected but not built (docs/backends.md). */
export const BUILT_MAPPINGS: readonly RbdMapping[] = ["fuse"];
const PREFERENCE: readonly RbdMapping[] = ["krbd", "rbd-nbd", "fuse"];

export interface MappingChoice {
  /** The kind used, or undefined: this node cannot map RBD images. */
  kind: RbdMapping | undefined;
  /** Every kind the machine offers (built or not), in preference order. */
  available: RbdMapping[];
  /** One line for the log and for a refused stage. */
  why: string;
}

const MISSING: Record<RbdMapping, (f: MappingFacts) => string[]> = {
  krbd: (f) => [...(f.rbdModule ? [] : ["the rbd kernel module"]), ...(f.rbdBinary ? [] : ["the rbd CLI"])],
  "rbd-nbd": (f) => [...(f.nbdModule ? [] : ["the nbd kernel module"]), ...(f.rbdNbdBinary ? [] : ["rbd-nbd"])],
  fuse: (f) => [...(f.rbdFuseBinary ? [] : ["rbd-fuse"]), ...(f.fuseDevice ? [] : ["/dev/fuse"]), ...(f.loopControl ? [] : ["/dev/loop-control"])],
};

export function chooseMapping(facts: MappingFacts, built: readonly RbdMapping[] = BUILT_MAPPINGS): MappingChoice {
  const available = PREFERENCE.filter((k) => MISSING[k](facts).length === 0);
  const kind = available.find((k) => built.includes(k));
  const notBuilt = available.filter((k) => !built.includes(k));
  const skipped = notBuilt.length ? `; ${notBuilt.join(", ")} available but not built in this node-agent` : "";
  if (kind) return { kind, available, why: `maps RBD images by ${kind}${skipped}` };
  const lacks = PREFERENCE.filter((k) => built.includes(k))
    .map((k) => `${k} needs ${MISSING[k](facts).join(", ")}`)
    .join("; ");
  return { kind: undefined, available, why: `cannot map RBD images: ${lacks}${skipped}` };
}

/**
 * The node's topology (NodeGetInfo and its registration): its own segment, and on a node whose
 * clusters file has an RBD pool, how it maps RBD images ("none" when it cannot), so a pool's
 * `topology` can require a mapping kind.
 */
export function nodeTopology(nodeId: string, rbd: MappingChoice | undefined): Record<string, string> {
  return { [TOPOLOGY_KEY]: nodeId, ...(rbd ? { [RBD_MAPPING_KEY]: rbd.kind ?? "none" } : {}) };
}
