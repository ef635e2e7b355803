/**
 * What the nodes hold of a volume, from their own device reports (DeviceStateReported, the
 * volume's device subject of the log, in log order): per node, the device attached, the staging
 * path mounted, the targets published — each set by its report and cleared by the report of its
 * undo. A volume a node holds is in use: DeleteVolume refuses it (docs/journal.md, "In use means
 * in use"), whatever its claims say — a CO may release the claim without the node letting go
 * (Docker Swarm never sends NodeUnstageVolume). Pure.
 */
import { holdingKey, type JournalEvent } from "@csi/contracts";

type Report = Extract<JournalEvent, { type: "DeviceStateReported" }>;

export interface DeviceHold {
  nodeId: string;
  /** The node's time of its last report of the volume (ISO): a registration later than it corrects it. */
  lastAt?: string;
  /** The device attached to the volume's image (a loop device), if any. */
  device?: string;
  /** The staging path mounted, if any. */
  staged?: string;
  /** Targets published, in the order they were. */
  published: string[];
}

/** What the nodes' reports of a volume say: who holds it now, and how many reports there were (any: a node had it). */
export interface DeviceUse {
  holds: DeviceHold[];
  reported: number;
}

/** The nodes' reports of a volume (its DeviceStateReported events, in log order) as what they hold now. */
export function deviceUse(events: readonly JournalEvent[]): DeviceUse {
  return { holds: deviceHolds(events), reported: events.filter((e) => e.type === "DeviceStateReported").length };
}

/** Whether a hold still holds anything. */
const holds = (h: DeviceHold) => h.device !== undefined || h.staged !== undefined || h.published.length > 0;

/** The nodes that hold the volume after these reports (those holding nothing left out), in the order they first reported. */
export function deviceHolds(events: readonly JournalEvent[]): DeviceHold[] {
  const byNode = new Map<string, DeviceHold>();
  for (const e of events) {
    if (e.type !== "DeviceStateReported") continue;
    const h = byNode.get(e.nodeId) ?? { nodeId: e.nodeId, published: [] };
    byNode.set(e.nodeId, { ...step(h, e), lastAt: e.at });
  }
  return [...byNode.values()].filter(holds);
}

function step(h: DeviceHold, r: Report): DeviceHold {
  switch (r.state) {
    case "attached":
      return { ...h, ...(r.device ? { device: r.device } : {}) };
    case "detached": {
      const { device: _, ...rest } = h;
      return rest;
    }
    case "staged":
      return { ...h, ...(r.path ? { staged: r.path } : {}), ...(r.device && !h.device ? { device: r.device } : {}) };
    case "unstaged": {
      const { staged: _, ...rest } = h;
      return rest;
    }
    case "published":
      return r.path && !h.published.includes(r.path) ? { ...h, published: [...h.published, r.path] } : h;
    case "unpublished":
      return { ...h, published: h.published.filter((p) => p !== r.path) };
    default:
      // healed (a repair of what the node holds already), failed (a step that did nothing), limited (I/O limits).
      return h;
  }
}

/** What a node's registration says it holds, by its own state as of `time` (its clock, as its reports'). */
export interface NodeHolding {
  time: string;
  holding?: readonly string[];
}

/**
 * The holds of `uuid` that stand once each node's registration had its say: a node whose latest
 * registration is later than its last report of the volume and does not list it has let go (a
 * report of that was lost: the agent crashed before sending it); one that lists it still holds it,
 * whatever the reports. A registration that lists nothing (an older agent) changes nothing. Pure.
 */
export function reconcileHolds(use: DeviceUse, volume: { clusterID: string; uuid: string }, regs: ReadonlyMap<string, NodeHolding | undefined>): DeviceUse {
  const key = holdingKey(volume.clusterID, volume.uuid);
  const holds = use.holds.filter((h) => {
    const r = regs.get(h.nodeId);
    if (!r?.holding || r.holding.includes(key)) return true;
    return h.lastAt !== undefined && Date.parse(h.lastAt) >= Date.parse(r.time);
  });
  return { ...use, holds };
}

/** One line of what a node holds, for an error a CO shows its user: "node n1 has it staged at /p (device /dev/loop3)". */
export function describeHold(h: DeviceHold): string {
  const what = [
    ...(h.published.length ? [`published at ${h.published.slice(0, 2).join(", ")}${h.published.length > 2 ? ` and ${h.published.length - 2} more` : ""}`] : []),
    ...(h.staged ? [`staged at ${h.staged}`] : []),
    ...(h.device ? [`attached as ${h.device}`] : []),
  ];
  return `node ${h.nodeId} has it ${what.join(", ")}`;
}
