/**
 * Node registration and heartbeat: the agent publishes its NodeRegistration on
 * `csi.nodes.<nodeId>` into the CSI_NODES stream (last message per subject kept) at start and
 * every heartbeat interval; the controller reads it to know the node exists and is healthy.
 *
 * After each publish the agent reads its registration back, the way the controller reads it (the
 * last message of its subject). When that fails (a damaged or misconfigured stream keeps
 * acknowledging publishes but does not return them) the controller would answer "node is not
 * registered" to every ControllerPublishVolume: the agent logs an error at each heartbeat and
 * reports itself not ready (Identity Probe) until the read-back works again. It keeps serving
 * the Node RPCs: volumes already published here must still be unpublishable.
 */
import { NODES_STREAM, NodeRegistration, nodeSubjects } from "@csi/contracts";
import { type FleetAccess, failureStreak, fleetManager, lastMessageOf } from "@csi/runtime";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";

/** Why the registration just published cannot be read back, or undefined when it can. */
export async function whyNotReadBack(nc: NatsConnection, fleet: FleetAccess, sent: NodeRegistration): Promise<string | undefined> {
  const msg = await lastMessageOf(fleetManager(nc, fleet), NODES_STREAM, nodeSubjects.registration(sent.nodeId)).catch((err: unknown) =>
    String((err as Error).cause ?? err),
  );
  if (typeof msg === "string" || !msg) return `no registration of this node in ${NODES_STREAM}${msg ? ` (${msg.slice(0, 200)})` : ""}`;
  const got = NodeRegistration.safeParse(msg.json());
  if (!got.success || got.data.nodeId !== sent.nodeId) return `the last registration of this node in ${NODES_STREAM} is not a valid one`;
  if (got.data.time < sent.time) return `${NODES_STREAM} returns an older registration (${got.data.time}) than the one just sent (${sent.time})`;
  return undefined;
}

const READ_BACK_TRIES = 3;

export function startHeartbeat(
  nc: NatsConnection,
  fleet: FleetAccess,
  reg: () => NodeRegistration,
  log: Logger,
): { stop(): void; beat(): Promise<void>; announce(timeoutMs: number): Promise<void>; registered(): boolean } {
  const js = jetstream(nc);
  let registered = false;
  const beat = async () => {
    const r = reg();
    await js.publish(nodeSubjects.registration(r.nodeId), JSON.stringify(r));
    let why: string | undefined;
    for (let i = 0; i < READ_BACK_TRIES; i++) {
      why = await whyNotReadBack(nc, fleet, r);
      if (!why) break;
      await new Promise((res) => setTimeout(res, 100 * (i + 1)));
    }
    if (why)
      log.error(
        { stream: NODES_STREAM, why },
        "node registration cannot be read back: the controller cannot publish volumes to this node; reporting not ready",
      );
    else if (!registered) log.info({ stream: NODES_STREAM }, "node registration read back");
    registered = why === undefined;
  };
  const beats = failureStreak(log, "heartbeat");
  const timer = setInterval(
    () =>
      beat().then(
        () => beats.ok(),
        (err: unknown) => beats.failed(err),
      ),
    reg().heartbeatMs,
  );
  timer.unref();
  // The registration published now, not read back (a node step waits for it: bounded by `timeoutMs`).
  const announce = async (timeoutMs: number) => {
    const r = reg();
    await js.publish(nodeSubjects.registration(r.nodeId), JSON.stringify(r), { timeout: timeoutMs });
  };
  return { stop: () => clearInterval(timer), beat, announce, registered: () => registered };
}
