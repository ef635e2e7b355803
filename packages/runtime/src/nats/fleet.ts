/**
 * Where the node fleet's streams live — node registrations (CSI_NODES), node work (CSI_NODE_WORK_<node>, one per node),
 * device reports (CSI_REPORTS_<cluster>) — and who makes them (docs/security.md).
 *
 * One account (an open NATS: tests, `npm start`): every service makes what it uses, if missing.
 * Accounts (`NATS_ACCOUNTS=1`): they live in the FLEET account, made with their durable consumers by
 * `csictl fleet init` (`initFleet`); a service makes nothing there and reaches them through the
 * JetStream API its own account imports at FLEET_API. Publishing a registration, a report or node
 * work is a plain JetStream publish either way: the subject is imported as a service.
 */
import { FLEET_API, nodeQueues } from "@csi/contracts";
import { type JetStreamManager, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { ensureQueue, type StreamOptions } from "./durable-queue.js";
import type { FleetAccess } from "./fleet-access.js";
import { ensureNodeStreams, migrateLegacyNodeWork } from "./node-streams.js";

export type { FleetAccess } from "./fleet-access.js";

export const fleetAccess = (accounts: boolean): FleetAccess => (accounts ? { apiPrefix: FLEET_API, makes: false } : { makes: true });

const apiOptions = (f: FleetAccess) => (f.apiPrefix ? { apiPrefix: f.apiPrefix, checkAPI: false } : {});

/** A JetStream manager for the fleet's streams (reads only, when they are another account's). */
export function fleetManager(nc: NatsConnection, f: FleetAccess): Promise<JetStreamManager> {
  return jetstreamManager(nc, apiOptions(f));
}

/** A JetStream client for pulling from the fleet's consumers. */
export function fleetClient(nc: NatsConnection, f: FleetAccess) {
  return jetstream(nc, apiOptions(f));
}

/** The node streams, when this process makes them (a no-op in the account layout). */
export async function ensureFleetStreams(nc: NatsConnection, f: FleetAccess, o: StreamOptions = {}): Promise<void> {
  if (f.makes) await ensureNodeStreams(nc, o);
}

/**
 * Everything of the FLEET account, made as its operator (`csictl fleet init`; idempotent): the node
 * streams, each cluster's report queue and its journals' consumer, each node's work consumer.
 */
export async function initFleet(nc: NatsConnection, clusters: readonly string[], nodeIds: readonly string[], o: StreamOptions = {}): Promise<void> {
  await ensureNodeStreams(nc, o);
  for (const c of clusters) await ensureQueue(nc, nodeQueues.reports(c), o);
  for (const n of nodeIds) await ensureQueue(nc, nodeQueues.work(n), o);
  await migrateLegacyNodeWork(nc, o); // the upgrade from the one shared work stream (node-streams.ts)
}
