/**
 * The last message of a subject in a JetStream stream, read so that "there is none" and "the
 * stream cannot be reached" never look alike: JetStream's "no message found" is undefined; any
 * other failure (a nats-server restarting, a timeout) is Unavailable, so the caller — a CO in
 * the end — retries instead of being told that a node or an event does not exist.
 */
import { DriverError, NODES_STREAM, NodeRegistration, nodeSubjects } from "@csi/contracts";
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
 * A node's registration (its last heartbeat) in the CSI_NODES stream: undefined when it never
 * registered (or the last one is not valid for it); Unavailable when the stream cannot be read.
 */
export async function nodeRegistration(jsm: JetStreamManager | Promise<JetStreamManager>, nodeId: string): Promise<NodeRegistration | undefined> {
  return registrationAt(jsm, nodeSubjects.registration(nodeId), nodeId);
}

/** The registration last published on `subject`, if it is a valid one whose node id is `nodeId` (any, when not given). */
async function registrationAt(jsm: JetStreamManager | Promise<JetStreamManager>, subject: string, nodeId?: string): Promise<NodeRegistration | undefined> {
  const msg = await lastMessageOf(jsm, NODES_STREAM, subject);
  let raw: unknown;
  try {
    raw = msg?.json();
  } catch {
    return undefined; // not JSON: not a registration
  }
  const parsed = raw === undefined ? undefined : NodeRegistration.safeParse(raw);
  if (!parsed?.success) return undefined;
  const ok = nodeId === undefined ? subject === nodeSubjects.registration(parsed.data.nodeId) : parsed.data.nodeId === nodeId;
  return ok ? parsed.data : undefined;
}

/**
 * Every node's registration: the stream's subjects, then the last message of each (reads a reader
 * may make across accounts: stream info and message get, no consumer). A message that is not a
 * valid registration of the node its subject names is left out.
 */
export async function allNodeRegistrations(jsm: JetStreamManager | Promise<JetStreamManager>): Promise<NodeRegistration[]> {
  const info = await reachingNats(`stream ${NODES_STREAM}`, async () =>
    (await jsm).streams.info(NODES_STREAM, { subjects_filter: nodeSubjects.wildcard }).catch((err: unknown) => {
      if (err instanceof JetStreamApiError && NOTHING_THERE.has(err.code)) return undefined;
      throw err;
    }),
  );
  const regs = await Promise.all(Object.keys(info?.state.subjects ?? {}).map((subject) => registrationAt(jsm, subject)));
  return regs.filter((r): r is NodeRegistration => r !== undefined);
}
