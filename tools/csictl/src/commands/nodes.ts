/**
 * `nodes`: every node-agent that ever registered (the CSI_NODES stream keeps each node's last
 * registration, re-published at every heartbeat), healthy while its last heartbeat is younger
 * than MISSED_HEARTBEATS of its own intervals; healthy / expected as Nomad shows plugin health.
 */
import { allNodeRegistrations, fleetManager } from "@csi/runtime";
import { ago, MISSED_HEARTBEATS, type NodeHealth, nodeHealth } from "../domain/health.js";
import { EXIT } from "../errors.js";
import { type Column, listing } from "../output.js";
import type { Session } from "../session.js";

const NODE_COLUMNS: Column<NodeHealth>[] = [
  { head: "NODE", cell: (h) => h.nodeId },
  { head: "HEALTHY", cell: (h) => (h.healthy ? "yes" : "no") },
  { head: "LAST HEARTBEAT", cell: (h) => `${h.lastHeartbeat} (${ago(h.ageMs)})` },
  { head: "EVERY", cell: (h) => `${h.heartbeatMs / 1000}s` },
  { head: "VERSION", cell: (h) => h.version },
  { head: "MAX VOLUMES", cell: (h) => h.maxVolumes || "no limit" },
  {
    head: "TOPOLOGY",
    cell: (h) =>
      Object.entries(h.topology)
        .map(([k, v]) => `${k}=${v}`)
        .join(","),
  },
];

export async function nodes(s: Session): Promise<number> {
  // Stream info and a message read per node: what csictl may do across accounts (no consumer).
  const registrations = await allNodeRegistrations(fleetManager(await s.nats(), s.fleet()));
  const now = new Date();
  const health = registrations.map((r) => nodeHealth(r, now)).sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  const healthy = health.filter((h) => h.healthy).length;
  s.out.result(
    { healthy, expected: health.length, items: health },
    (h) => listing(NODE_COLUMNS, health, h),
    () => health.map((n) => n.nodeId),
  );
  s.out.note(`${healthy}/${health.length} healthy (a node is unhealthy after ${MISSED_HEARTBEATS} missed heartbeats)`);
  return healthy === health.length ? EXIT.ok : EXIT.failed;
}
