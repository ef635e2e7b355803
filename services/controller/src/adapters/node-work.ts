/**
 * Sends durable node work (stream CSI_NODE_WORK): after a ControllerModifyVolume, each node
 * holding a claim on the volume gets the limits in force. The node's queue is made if missing
 * (stream + its durable consumer), so a node that is down finds the work when it comes back.
 * The work id is the JetStream message id: a retried send inside the duplicate window is stored once.
 */
import { DriverError, type NodeLimitsWork, NodeQueueMessage, nodeQueues, nodeWorkSubjects } from "@csi/contracts";
import { ensureQueue, retry } from "@csi/runtime";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeWorkSender {
  readonly #js;
  /** Nodes whose queue is known to exist (made once per process). */
  readonly #ready = new Set<string>();

  constructor(private readonly nc: NatsConnection) {
    this.#js = jetstream(nc);
  }

  async send(nodeId: string, work: NodeLimitsWork): Promise<void> {
    const body = JSON.stringify(NodeQueueMessage.parse(work));
    try {
      await retry(async () => {
        if (!this.#ready.has(nodeId)) {
          await ensureQueue(this.nc, nodeQueues.work(nodeId));
          this.#ready.add(nodeId);
        }
        await this.#js.publish(nodeWorkSubjects.forNode(nodeId), body, { msgID: work.id, timeout: 5000 });
      });
    } catch (err) {
      throw new DriverError("Unavailable", `could not queue the new I/O limits for node ${nodeId}: ${String((err as Error)?.message ?? err).slice(0, 200)}`, {
        cause: err,
      });
    }
  }
}
