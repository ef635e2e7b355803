/**
 * A durable queue on JetStream, the one mechanism behind node work (front-end → node-agent)
 * and device reports (node-agent → journal): a stream with work-queue retention, one durable
 * pull consumer, messages validated with a zod schema, acknowledged only after the handler is
 * done, redelivered after a transient failure, dropped (and logged) when malformed or failed
 * for good. What is sent while the consumer is away waits in the stream. Anything may land on a
 * queue's subjects (a message published by hand, a JetStream API reply a requester pointed
 * there): a message that is not JSON or not of the queue's schema is terminated at once (never
 * redelivered), logged by stream sequence and subject (never its body) and told to `onDropped`
 * (the service's metric), so no message can wedge the consumer or crash it.
 *
 * A graceful stop (`drain`, the consumer is a Drainable) pulls no more messages and lets the one
 * being handled, and any already pulled, finish and be acknowledged (the iterator yields them
 * before it ends); one cut at the bound stays unacknowledged and is delivered again after the
 * consumer's ack wait, to whichever process consumes the queue then.
 */

import { DriverError, describeZodError, type QueueSpec, sanitizeMessage } from "@csi/contracts";
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamManager,
  type JsMsg,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { z } from "zod";
import type { Drainable } from "../drain.js";
import type { FleetAccess } from "./fleet-access.js";

const TRANSIENT = new Set(["Unavailable", "Aborted", "DeadlineExceeded"]);
const NANOS = 1_000_000_000;

/** Create a stream if it does not exist (safe from several processes at once: if another's create wins, fine). */
export async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  if (
    await jsm.streams.info(config.name).then(
      () => true,
      () => false,
    )
  )
    return;
  await jsm.streams.add(config).catch(async (err: unknown) => {
    // Made by another creator meanwhile (its config may differ: the log's identity): fine once it is
    // there. In a cluster the stream may take a moment to answer its info after the add.
    for (let i = 0; ; i++) {
      if (
        await jsm.streams.info(config.name).then(
          () => true,
          () => false,
        )
      )
        return;
      if (i >= 20) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  });
}

/** How a service makes its streams: `replicas` (STREAM_REPLICAS) JetStream replicas each, 1 by default. */
export interface StreamOptions {
  replicas?: number | undefined;
}

/** The stream of a queue (work-queue retention), made if missing. */
export async function ensureQueueStream(jsm: JetStreamManager, q: Pick<QueueSpec, "stream" | "subjects">, o: StreamOptions = {}): Promise<void> {
  await ensureStream(jsm, {
    name: q.stream,
    subjects: q.subjects,
    storage: StorageType.File,
    retention: RetentionPolicy.Workqueue,
    duplicate_window: 2 * 60 * NANOS,
    num_replicas: o.replicas ?? 1,
  });
}

/**
 * Create the stream and the durable consumer if missing (safe from several processes at once). The
 * consumer is made without a replica count: JetStream gives it its stream's.
 */
export async function ensureQueue(nc: NatsConnection, q: QueueSpec, o: StreamOptions = {}): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await ensureQueueStream(jsm, q, o);
  await jsm.consumers.info(q.stream, q.consumer).catch(() =>
    jsm.consumers
      .add(q.stream, {
        durable_name: q.consumer,
        filter_subject: q.filterSubject,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: 120 * NANOS,
        max_deliver: 20,
        ...(q.maxAckPending ? { max_ack_pending: q.maxAckPending } : {}),
      })
      .catch(async (err: unknown) => {
        await jsm.consumers.info(q.stream, q.consumer).catch(() => {
          throw err;
        });
      }),
  );
}

/** Why a queue dropped a message: not JSON or not of its schema (`malformed`), or refused by its handler for good (`refused`). */
export type DropReason = "malformed" | "refused";

/** How much of a subject or a problem a log line shows. */
const LOGGED_BYTES = 256;

/** How often a consumer that may not make its queue looks for it again. */
const QUEUE_LOOK_EVERY_MS = 1000;

/**
 * One message of a queue: dropped (terminated) when it is not JSON of its schema; else handled and
 * acknowledged, redelivered after a transient failure, dropped after any other.
 */
async function handleOne<S extends z.ZodTypeAny>(
  m: JsMsg,
  q: QueueSpec,
  schema: S,
  handle: (item: z.output<S>, from: { subject: string }) => Promise<void>,
  log: Logger,
  onDropped: ((reason: DropReason) => void) | undefined,
): Promise<void> {
  const where = { stream: q.stream, seq: m.seq, subject: sanitizeMessage(m.subject, LOGGED_BYTES), bytes: m.data.byteLength };
  let raw: unknown;
  try {
    raw = m.json();
  } catch {
    raw = undefined;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const problem = raw === undefined ? "not JSON" : sanitizeMessage(describeZodError(parsed.error), LOGGED_BYTES);
    log.error({ ...where, problem }, "malformed message dropped");
    m.term();
    onDropped?.("malformed");
    return;
  }
  try {
    await handle(parsed.data, { subject: m.subject });
    m.ack();
  } catch (err) {
    if (err instanceof DriverError && TRANSIENT.has(err.code)) {
      log.warn({ ...where, err: err.message }, "failed for now; redelivering");
      m.nak(1000);
    } else {
      log.error({ ...where, err: sanitizeMessage(String((err as Error)?.message ?? err), LOGGED_BYTES) }, "failed for good: dropped");
      m.ack(); // retrying cannot help; the handler reported the failure
      onDropped?.("refused");
    }
  }
}

/**
 * Handle the queue's messages one at a time until stopped. The handler also gets the subject the
 * message came on: NATS permissions are per subject, so it is what says who sent it. `what`
 * names the messages in the drain's log lines.
 */
export async function consumeQueue<S extends z.ZodTypeAny>(
  nc: NatsConnection,
  q: QueueSpec,
  schema: S,
  handle: (item: z.output<S>, from: { subject: string }) => Promise<void>,
  log: Logger,
  opts: {
    what?: string;
    waitForQueue?: boolean;
    /** Where the queue lives and whether this process makes it (default: its own account, made if missing). */
    at?: FleetAccess;
    onDropped?: (reason: DropReason) => void;
  } & StreamOptions = {},
): Promise<Drainable> {
  let stopped = false;
  let messages: ConsumerMessages | undefined;
  let handling = 0;
  const at = opts.at ?? { makes: true };
  const open = async () => {
    if (at.makes) await ensureQueue(nc, q, opts);
    const js = jetstream(nc, at.apiPrefix ? { apiPrefix: at.apiPrefix, checkAPI: false } : {});
    return (await js.consumers.get(q.stream, q.consumer)).consume({ max_messages: 1 });
  };
  if (!opts.waitForQueue) messages = await open();
  const done = (async () => {
    // A queue this process does not make (docs/security.md): until it is there, look again.
    for (let tries = 0; !messages && !stopped; tries++) {
      try {
        messages = await open();
      } catch (err) {
        if (tries === 0)
          log.warn({ stream: q.stream, consumer: q.consumer, err: String((err as Error)?.message ?? err) }, "queue not there yet; waiting for it");
        await new Promise((r) => setTimeout(r, QUEUE_LOOK_EVERY_MS));
      }
    }
    if (stopped || !messages) return void (await messages?.close());
    if (opts.waitForQueue) log.info({ stream: q.stream, consumer: q.consumer }, "consuming the queue");
    for await (const m of messages) {
      handling = 1;
      try {
        await handleOne(m, q, schema, handle, log, opts.onDropped);
      } finally {
        handling = 0;
      }
    }
  })();
  return {
    what: opts.what ?? q.stream,
    inFlight: () => handling,
    // Pull no more; the messages already pulled are handed over and acknowledged before the iterator ends.
    drain: async () => {
      stopped = true;
      await messages?.close();
      await done.catch(() => {});
    },
  };
}
