/** Reads node registrations (published by node-agents into the CSI_NODES stream). */
import { NODES_STREAM, NodeRegistration, nodeSubjects } from "@csi/contracts";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeDirectory {
  #jsm?: Promise<JetStreamManager>;
  constructor(private readonly nc: NatsConnection) {}

  async get(nodeId: string): Promise<NodeRegistration | undefined> {
    this.#jsm ??= jetstreamManager(this.nc);
    const jsm = await this.#jsm;
    const msg = await jsm.streams.getMessage(NODES_STREAM, { last_by_subj: nodeSubjects.registration(nodeId) }).catch(() => null);
    if (!msg) return undefined;
    const parsed = NodeRegistration.safeParse(msg.json());
    return parsed.success && parsed.data.nodeId === nodeId ? parsed.data : undefined;
  }
}
