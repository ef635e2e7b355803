/**
 * Sends durable node work (stream CSI_NODE_WORK): after a ControllerModifyVolume, each node
 * holding a claim on the volume gets the limits in force; after a ControllerUnpublishVolume that
 * released a node still holding the volume staged (a CO that skipped NodeUnstageVolume), the node
 * is asked to unstage it (it does only if its own state says it staged it there). The stream is a work queue made by the
 * journals: a message waits in it until the node's consumer (made with the node's first
 * registration) takes it, so a node that is down finds the work when it comes back. The
 * controller makes no stream and no consumer (docs/security.md). The work id is the JetStream
 * message id: a retried send inside the duplicate window is stored once.
 */
import { DriverError, type NodeLimitsWork, NodeQueueMessage, type NodeWork, nodeWorkSubjects } from "@csi/contracts";
import { retry } from "@csi/runtime";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeWorkSender {
  readonly #js;

  constructor(nc: NatsConnection) {
    this.#js = jetstream(nc);
  }

  /** Queue `work` for `nodeId`: on the node's own subject (its own stream), the node named in the body too. */
  async send(nodeId: string, work: Omit<NodeLimitsWork, "nodeId"> | Omit<NodeWork, "nodeId">): Promise<void> {
    const body = JSON.stringify(NodeQueueMessage.parse({ ...work, nodeId }));
    try {
      await retry(() => this.#js.publish(nodeWorkSubjects.forNode(nodeId), body, { msgID: work.id, timeout: 5000 }));
    } catch (err) {
      throw new DriverError("Unavailable", `could not queue ${work.op} work for node ${nodeId}: ${String((err as Error)?.message ?? err).slice(0, 200)}`, {
        cause: err,
      });
    }
  }
}
