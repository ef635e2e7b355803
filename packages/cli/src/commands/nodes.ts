/**
 * `nodes`: every node-agent that ever registered (the CSI_NODES stream keeps each node's last
 * registration, re-published at every heartbeat), healthy while its last heartbeat is younger
 * than MISSED_HEARTBEATS of its own intervals; healthy / expected as Nomad shows plugin health.
 */
import { NODES_STREAM, type NodeRegistration, nodeSubjects } from "@csi/contracts";
import { parseRegistration } from "@csi/runtime";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { ago, MISSED_HEARTBEATS, nodeHealth } from "../domain/health.js";
import { EXIT } from "../errors.js";
import { table } from "../output.js";
import type { Session } from "../session.js";

export async function nodes(s: Session): Promise<number> {
  const nc = await s.nats();
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(NODES_STREAM).catch(() => undefined);
  const registrations: NodeRegistration[] = [];
  const count = info?.state.num_subjects ?? info?.state.messages ?? 0;
  if (count > 0) {
    // One ordered consumer delivering the last message of every node's subject.
    const consumer = await jetstream(nc).consumers.get(NODES_STREAM, { filter_subjects: nodeSubjects.wildcard, deliver_policy: DeliverPolicy.LastPerSubject });
    const msgs = await consumer.fetch({ max_messages: count, expires: Math.min(2000, s.timeoutMs) });
    for await (const m of msgs) {
      const r = parseRegistration(m.subject, m.data); // a malformed or foreign message there is skipped
      if ("registration" in r) registrations.push(r.registration);
      if (m.info.pending === 0) break;
    }
  }
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
