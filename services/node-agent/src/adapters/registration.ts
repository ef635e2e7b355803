/**
 * Node registration and heartbeat: the agent publishes its NodeRegistration on
 * `csi.nodes.<nodeId>` into the CSI_NODES stream (last message per subject kept) at start and
 * every heartbeat interval; the controller reads it to know the node exists and is healthy.
 */
import { NODES_STREAM, type NodeRegistration, nodeSubjects } from "@csi/contracts";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";

export async function ensureNodesStream(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(NODES_STREAM);
  } catch {
    await jsm.streams
      .add({ name: NODES_STREAM, subjects: [nodeSubjects.wildcard], storage: StorageType.File, retention: RetentionPolicy.Limits, max_msgs_per_subject: 1 })
      .catch(async (err) => {
        await jsm.streams.info(NODES_STREAM).catch(() => {
          throw err;
        });
      });
  }
}

export function startHeartbeat(nc: NatsConnection, reg: () => NodeRegistration, log: Logger): { stop(): void; beat(): Promise<void> } {
  const js = jetstream(nc);
  const beat = async () => {
    const r = reg();
    await js.publish(nodeSubjects.registration(r.nodeId), JSON.stringify(r));
  };
  const timer = setInterval(() => beat().catch((err) => log.warn({ err: String(err) }, "heartbeat failed")), reg().heartbeatMs);
  timer.unref();
  return { stop: () => clearInterval(timer), beat };
}
