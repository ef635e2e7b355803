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
    return nodeRegistration(this.#manager(), nodeId);
  }

  /**
   * The JetStream manager, made once it could be made: nats.js asks for the account's JetStream
   * info first, and a manager whose ask failed (NATS frozen, no meta leader yet) is forgotten, so
   * the next lookup asks again. Kept, it failed every lookup for good ("stream CSI_NODES
   * unavailable" on a controller started during a node freeze: test/node-directory-rebind.test.ts).
   */
  #manager(): Promise<JetStreamManager> {
    if (this.#jsm) return this.#jsm;
    const made = fleetManager(this.nc, this.fleet);
    this.#jsm = made;
    made.catch(() => {
      if (this.#jsm === made) this.#jsm = undefined;
    });
    return made;
  }
}
