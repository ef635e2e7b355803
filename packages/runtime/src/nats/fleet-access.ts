/**
 * How a process reaches the node fleet's streams (fleet.ts says where they live): its own account's
 * JetStream, or the FLEET account's through an imported API prefix. A file of its own, so the
 * queue code (durable-queue.ts) can name it without importing fleet.ts, which builds on the queues.
 */
export interface FleetAccess {
  /** The JetStream API prefix under which the fleet's streams are reached (undefined: this account's own). */
  apiPrefix?: string;
  /** Whether this process makes the fleet's streams and consumers when missing. */
  makes: boolean;
}
