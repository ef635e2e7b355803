/**
 * The last message of a subject in a JetStream stream, read so that "there is none" and "the
 * stream cannot be reached" never look alike: JetStream's "no message found" is undefined; any
 * other failure (a nats-server restarting, a timeout) is Unavailable, so the caller — a CO in
 * the end — retries instead of being told that a node or an event does not exist.
 */
import { DriverError, describeZodError, NODES_STREAM, NodeRegistration, nodeSubjects, sanitizeMessage } from "@csi/contracts";
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, type StoredMsg } from "@nats-io/jetstream";

/** JetStream's API error codes that mean "there is none": no message found, no such stream (nothing was ever written). */
const NOTHING_THERE = new Set<number>([JetStreamApiCodes.NoMessageFound, JetStreamApiCodes.StreamNotFound]);

/** Runs `f`; any error that is not already a DriverError (or a schema error: a bad message is Internal) becomes Unavailable. */
export async function reachingNats<T>(what: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (err) {
    if (err instanceof DriverError || (err instanceof Error && err.name === "ZodError")) throw err;
    throw new DriverError("Unavailable", `${what} unavailable`, { cause: err });
  }
}

export function lastMessageOf(jsm: JetStreamManager | Promise<JetStreamManager>, stream: string, subject: string): Promise<StoredMsg | undefined> {
  return reachingNats(`stream ${stream}`, async () =>
    (await jsm).streams.getMessage(stream, { last_by_subj: subject }).then(
      (m) => m ?? undefined,
      (err: unknown) => {
        if (err instanceof JetStreamApiError && NOTHING_THERE.has(err.code)) return undefined;
        throw err;
      },
    ),
  );
}

/**
 * A message on a registration subject (`csi.nodes.<token>`) as a registration: JSON, of the
 * schema, and of the node its subject names (only that node may publish there) — else why not
 * (a few words, never a value). Every reader of registrations takes them through here, so a
 * malformed or foreign message on the stream is skipped, never thrown on.
 */
export function parseRegistration(subject: string, data: Uint8Array): { registration: NodeRegistration } | { malformed: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8"));
  } catch {
    return { malformed: "not JSON" };
  }
  const parsed = NodeRegistration.safeParse(raw);
  if (!parsed.success) return { malformed: sanitizeMessage(describeZodError(parsed.error), 256) };
  if (nodeSubjects.registration(parsed.data.nodeId) !== subject) return { malformed: "a registration of another node than its subject names" };
  return { registration: parsed.data };
}

/**
 * A node's registration (its last heartbeat) in the CSI_NODES stream: undefined when it never
 * registered (or the last message there is not a registration of it); Unavailable when the stream
 * cannot be read.
 */
export async function nodeRegistration(jsm: JetStreamManager | Promise<JetStreamManager>, nodeId: string): Promise<NodeRegistration | undefined> {
  const msg = await lastMessageOf(jsm, NODES_STREAM, nodeSubjects.registration(nodeId));
  const parsed = msg ? parseRegistration(msg.subject, msg.data) : undefined;
  return parsed && "registration" in parsed ? parsed.registration : undefined;
}

/**
 * Every node's registration: the stream's subjects, then the last message of each (reads a reader
 * may make across accounts: stream info and message get, no consumer). A message that is not a
 * registration of the node its subject names is left out.
 */
export async function allNodeRegistrations(jsm: JetStreamManager | Promise<JetStreamManager>): Promise<NodeRegistration[]> {
  const info = await reachingNats(`stream ${NODES_STREAM}`, async () =>
    (await jsm).streams.info(NODES_STREAM, { subjects_filter: nodeSubjects.wildcard }).catch((err: unknown) => {
      if (err instanceof JetStreamApiError && NOTHING_THERE.has(err.code)) return undefined;
      throw err;
    }),
  );
  const msgs = await Promise.all(Object.keys(info?.state.subjects ?? {}).map((subject) => lastMessageOf(jsm, NODES_STREAM, subject)));
  return msgs.flatMap((m) => {
    const parsed = m ? parseRegistration(m.subject, m.data) : undefined;
    return parsed && "registration" in parsed ? [parsed.registration] : [];
  });
}
