/**
 * `nodes`: every node-agent that ever registered (the CSI_NODES stream keeps each node's last
 * registration, re-published at every heartbeat), healthy while its last heartbeat is younger
 * than MISSED_HEARTBEATS of its own intervals; healthy / expected as Nomad shows plugin health.
 */
import { allNodeRegistrations, fleetManager } from "@csi/runtime";
import { ago, MISSED_HEARTBEATS, nodeHealth } from "../domain/health.js";
import { EXIT } from "../errors.js";
import { table } from "../output.js";
import type { Session } from "../session.js";

export async function nodes(s: Session): Promise<number> {
  // Stream info and a message read per node: what csictl may do across accounts (no consumer).
  const registrations = await allNodeRegistrations(fleetManager(await s.nats(), s.fleet()));
  const now = new Date();
  const health = registrations.map((r) => nodeHealth(r, now)).sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  const healthy = health.filter((h) => h.healthy).length;
  s.out.result({ healthy, expected: health.length, nodes: health }, () => {
    const t = table(
      ["NODE", "HEALTHY", "LAST HEARTBEAT", "EVERY", "VERSION", "MAX VOLUMES", "TOPOLOGY"],
      health.map((h) => [
        h.nodeId,
        h.healthy ? "yes" : "no",
        `${h.lastHeartbeat} (${ago(h.ageMs)})`,
        `${h.heartbeatMs / 1000}s`,
        h.version,
        h.maxVolumes || "no limit",
        Object.entries(h.topology)
          .map(([k, v]) => `${k}=${v}`)
          .join(","),
      ]),
    );
    return `${t}\n${healthy}/${health.length} healthy (a node is unhealthy after ${MISSED_HEARTBEATS} missed heartbeats)`;
  });
  return healthy === health.length ? EXIT.ok : EXIT.failed;
}
