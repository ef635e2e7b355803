/** Reads node registrations (published by node-agents into the CSI_NODES stream). */
import type { NodeRegistration } from "@csi/contracts";
import { type FleetAccess, fleetManager, nodeRegistration } from "@csi/runtime";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

export class NodeDirectory {
  #jsm?: Promise<JetStreamManager>;
  constructor(
    private readonly nc: NatsConnection,
    private readonly fleet: FleetAccess,
  ) {}

  /** Unavailable (not "not registered") while the stream cannot be read: the CO retries. */
  get(nodeId: string): Promise<NodeRegistration | undefined> {
    this.#jsm ??= fleetManager(this.nc, this.fleet);
    return nodeRegistration(this.#jsm, nodeId);
  }
}
