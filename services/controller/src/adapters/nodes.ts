/** Reads node registrations (published by node-agents into the CSI_NODES stream). */
import { NODES_STREAM, NodeRegistration, nodeSubjects } from "@csi/contracts";
import { lastMessageOf } from "@csi/runtime";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeDirectory {
  #jsm?: Promise<JetStreamManager>;
  constructor(private readonly nc: NatsConnection) {}

  async get(nodeId: string): Promise<NodeRegistration | undefined> {
    this.#jsm ??= jetstreamManager(this.nc);
    // Unavailable (not "not registered") while the stream cannot be read: the CO retries.
    const msg = await lastMessageOf(this.#jsm, NODES_STREAM, nodeSubjects.registration(nodeId));
    if (!msg) return undefined;
    const parsed = NodeRegistration.safeParse(msg.json());
    return parsed.success && parsed.data.nodeId === nodeId ? parsed.data : undefined;
  }
}
