/**
 * Claims (Nomad's model): ControllerPublishVolume records that a node uses a volume with an
 * access mode. Pure rules deciding whether a new claim fits the existing ones.
 */
import { type Claim, isReaderOnlyMode, isSingleNode } from "@csi/contracts";

export type ClaimVerdict =
  | { kind: "exists" }
  | { kind: "new" }
  | { kind: "refused"; code: "AlreadyExists" | "FailedPrecondition" | "ResourceExhausted"; reason: string };

/** A claim that can write: not read-only, and not a reader-only access mode. */
const writes = (c: Claim) => !c.readOnly && !isReaderOnlyMode(c.accessMode);

export function decideClaim(existing: Claim[], ask: Claim, opts: { nodeVolumes: number; maxVolumes: number }): ClaimVerdict {
  const mine = existing.find((c) => c.nodeId === ask.nodeId);
  if (mine) {
    const same = mine.readOnly === ask.readOnly && mine.accessMode === ask.accessMode && mine.accessType === ask.accessType;
    return same
      ? { kind: "exists" }
      : { kind: "refused", code: "AlreadyExists", reason: `volume is already published to node ${ask.nodeId} with another capability or read-only flag` };
  }
  const others = existing.filter((c) => c.nodeId !== ask.nodeId);
  const first = others[0];
  if (first && (isSingleNode(ask.accessMode) || others.some((c) => isSingleNode(c.accessMode)))) {
    return { kind: "refused", code: "FailedPrecondition", reason: `volume is published to node ${first.nodeId} with a single-node access mode` };
  }
  if (ask.accessMode === "MULTI_NODE_SINGLE_WRITER" && writes(ask) && others.some(writes)) {
    return { kind: "refused", code: "FailedPrecondition", reason: "volume already has a writer on another node (MULTI_NODE_SINGLE_WRITER)" };
  }
  if (opts.maxVolumes > 0 && opts.nodeVolumes >= opts.maxVolumes) {
    return { kind: "refused", code: "ResourceExhausted", reason: `node ${ask.nodeId} already has its maximum of ${opts.maxVolumes} volumes` };
  }
  return { kind: "new" };
}
