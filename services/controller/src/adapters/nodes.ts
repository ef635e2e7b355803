/** Reads node registrations (published by node-agents into the CSI_NODES stream). */
import type { NodeRegistration } from "@csi/contracts";
import { nodeRegistration } from "@csi/runtime";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeDirectory {
  #jsm?: Promise<JetStreamManager>;
  constructor(private readonly nc: NatsConnection) {}

  /** Unavailable (not "not registered") while the stream cannot be read: the CO retries. */
  get(nodeId: string): Promise<NodeRegistration | undefined> {
    this.#jsm ??= jetstreamManager(this.nc);
    return nodeRegistration(this.#jsm, nodeId);
  }
}
