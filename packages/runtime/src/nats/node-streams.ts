/**
 * The streams every node shares: CSI_NODES (each node's last registration); and each node's own
 * work stream (CSI_NODE_WORK_<node>), made with its consumer (durable-queue.ts ensureQueue).
 * Journals make CSI_NODES at start; a node-agent makes it too where it may (an open NATS), so
 * either may start first. A locked-down node-agent may not (docs/security.md): it finds them made.
 *
 * The upgrade from the one shared work stream of before (CSI_NODE_WORK, every node's work on
 * `csi.nodework.<node>`): `migrateLegacyNodeWork` moves each queued item into its node's own stream
 * (the same message id: a move cut short and run again is stored once), removes it from the old
 * one, and deletes the old stream once it is empty. Whoever makes the fleet's streams runs it (a
 * journal on one account, `csictl fleet init` in the account layout).
 */
import { LEGACY_NODE_WORK_STREAM, legacyNodeWorkSubjects, NODES_STREAM, nodeQueues, nodeSubjects, nodeWorkSubjects } from "@csi/contracts";
import { type JetStreamManager, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { ensureQueue, ensureStream, type StreamOptions } from "./durable-queue.js";

export async function ensureNodeStreams(nc: NatsConnection, o: StreamOptions = {}): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await ensureStream(jsm, {
    name: NODES_STREAM,
    subjects: [nodeSubjects.wildcard],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    max_msgs_per_subject: 1,
    num_replicas: o.replicas ?? 1,
  });
}

/** What a migration moved: per node id, how many work items. */
export type Moved = Map<string, number>;

/** The node id a legacy work subject (`csi.nodework.<base64url id>`) is for, or undefined. */
export function legacyNodeOf(subject: string): string | undefined {
  if (!subject.startsWith(legacyNodeWorkSubjects.prefix)) return undefined;
  const token = subject.slice(legacyNodeWorkSubjects.prefix.length);
  if (!/^[A-Za-z0-9_-]+$/.test(token)) return undefined;
  const id = Buffer.from(token, "base64url").toString("utf8");
  return id.length > 0 && Buffer.from(id, "utf8").toString("base64url") === token ? id : undefined;
}

/** A legacy item's body with the node it was for (today's items name it; the agent refuses one that does not). */
function withNode(data: Uint8Array, nodeId: string): string | undefined {
  try {
    const body = JSON.parse(Buffer.from(data).toString("utf8")) as unknown;
    if (typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
    return JSON.stringify({ ...body, nodeId });
  } catch {
    return undefined;
  }
}

async function legacyInfo(jsm: JetStreamManager) {
  return jsm.streams.info(LEGACY_NODE_WORK_STREAM).catch(() => undefined);
}

/**
 * Every item of the old shared work stream moved into its node's own stream, then the old stream
 * deleted (when empty). An item that is not JSON or not on a node's subject is left, and counted
 * in `left`: the old stream then stays, for an operator to look at.
 */
export async function migrateLegacyNodeWork(nc: NatsConnection, o: StreamOptions = {}): Promise<{ moved: Moved; left: number }> {
  const jsm = await jetstreamManager(nc);
  const moved: Moved = new Map();
  let left = 0;
  const info = await legacyInfo(jsm);
  if (!info) return { moved, left };
  const js = jetstream(nc);
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(LEGACY_NODE_WORK_STREAM, { seq }).catch(() => undefined);
    if (!m) continue; // taken by its node meanwhile, or never there
    const nodeId = legacyNodeOf(m.subject);
    const body = nodeId === undefined ? undefined : withNode(m.data, nodeId);
    if (nodeId === undefined || body === undefined) {
      left++;
      continue;
    }
    await ensureQueue(nc, nodeQueues.work(nodeId), o);
    const msgID = m.header?.get("Nats-Msg-Id") || `legacy-${seq}`;
    await js.publish(nodeWorkSubjects.forNode(nodeId), body, { msgID });
    await jsm.streams.deleteMessage(LEGACY_NODE_WORK_STREAM, seq, false).catch(() => false);
    moved.set(nodeId, (moved.get(nodeId) ?? 0) + 1);
  }
  const after = await legacyInfo(jsm);
  if (after && after.state.messages === 0) await jsm.streams.delete(LEGACY_NODE_WORK_STREAM).catch(() => {});
  return { moved, left };
}
