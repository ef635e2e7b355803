/**
 * Nodes as the journal sees them: the last heartbeat of nodes (their registrations in CSI_NODES,
 * kept one per node), what `verify` judges claims by; and each node's work queue, made here.
 */
import { nodeQueues, nodeSubjects, sanitizeMessage } from "@csi/contracts";
import { ensureQueue, type FleetAccess, fleetManager, nodeRegistration, parseRegistration, type StreamOptions } from "@csi/runtime";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { Heartbeat } from "./audit/findings.js";

/** Unavailable when the stream cannot be read: a node is never judged silent because NATS was. */
export async function lastHeartbeats(nc: NatsConnection, fleet: FleetAccess, nodeIds: string[]): Promise<Map<string, Heartbeat | undefined>> {
  const jsm = fleetManager(nc, fleet);
  const regs = await Promise.all(nodeIds.map((nodeId) => nodeRegistration(jsm, nodeId)));
  return new Map(
    nodeIds.map((nodeId, i) => {
      const r = regs[i];
      return [nodeId, r ? { time: r.time, heartbeatMs: r.heartbeatMs, ...(r.holding ? { holding: r.holding } : {}) } : undefined];
    }),
  );
}

/**
 * On one account, a node's work queue (its durable consumer on CSI_NODE_WORK) is made by the
 * journals, the first time one sees the node's registration (every heartbeat is one): a node-agent
 * makes no consumer where it may not, since a push consumer can deliver to subjects its maker may
 * not publish to (docs/security.md). In the account layout `csictl fleet init` makes them.
 * The node's token comes from the subject, which only that node may publish on;
 * a message there that is not a registration of that node (not JSON, not of the schema, another
 * node's id) is logged (sequence-less: it is a live message; its subject, never its body), told to
 * `onMalformed` (the metric) and ignored: readers of the stream skip it too (parseRegistration).
 */
export function makeNodeQueues(nc: NatsConnection, log: Logger, streams: StreamOptions = {}, onMalformed: () => void = () => {}): { stop(): void } {
  const made = new Set<string>();
  const sub = nc.subscribe(nodeSubjects.wildcard, {
    callback: (err, msg) => {
      if (err) return;
      const token = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
      const parsed = parseRegistration(msg.subject, msg.data);
      if ("malformed" in parsed) {
        log.warn({ subject: sanitizeMessage(msg.subject, 256), bytes: msg.data.byteLength, problem: parsed.malformed }, "malformed node registration ignored");
        onMalformed();
        return;
      }
      if (made.has(token)) return;
      made.add(token);
      const nodeId = parsed.registration.nodeId;
      ensureQueue(nc, nodeQueues.work(nodeId), streams).then(
        () => log.debug({ nodeId }, "node work queue there"),
        (e: unknown) => {
          made.delete(token); // its next heartbeat tries again
          log.warn({ nodeId, err: String((e as Error)?.message ?? e) }, "could not make the node's work queue");
        },
      );
    },
  });
  return { stop: () => sub.unsubscribe() };
}
