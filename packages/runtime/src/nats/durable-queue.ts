/**
 * A durable queue on JetStream, the one mechanism behind node work (front-end → node-agent)
 * and device reports (node-agent → journal): a stream with work-queue retention, one durable
 * pull consumer, messages validated with a zod schema, acknowledged only after the handler is
 * done, redelivered after a transient failure, dropped (and logged) when malformed or failed
 * for good. What is sent while the consumer is away waits in the stream.
 *
 * A graceful stop (`drain`, the consumer is a Drainable) pulls no more messages and lets the one
 * being handled, and any already pulled, finish and be acknowledged (the iterator yields them
 * before it ends); one cut at the bound stays unacknowledged and is delivered again after the
 * consumer's ack wait, to whichever process consumes the queue then.
 */

import { DriverError, describeZodError, type QueueSpec } from "@csi/contracts";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { z } from "zod";
import type { Drainable } from "../drain.js";

const TRANSIENT = new Set(["Unavailable", "Aborted", "DeadlineExceeded"]);
const NANOS = 1_000_000_000;

/** Create the stream and the durable consumer if missing (safe from several processes at once). */
export async function ensureQueue(nc: NatsConnection, q: QueueSpec): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const orExisting = (check: () => Promise<unknown>) => async (err: unknown) => {
    await check().catch(() => {
      throw err;
    });
  };
  await jsm.streams
    .info(q.stream)
    .catch(() =>
      jsm.streams
        .add({ name: q.stream, subjects: q.subjects, storage: StorageType.File, retention: RetentionPolicy.Workqueue, duplicate_window: 2 * 60 * NANOS })
        .catch(orExisting(() => jsm.streams.info(q.stream))),
    );
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
      .catch(orExisting(() => jsm.consumers.info(q.stream, q.consumer))),
  );
}

/** Handle the queue's messages one at a time until stopped; `what` names them in the drain's log lines. */
export async function consumeQueue<S extends z.ZodTypeAny>(
  nc: NatsConnection,
  q: QueueSpec,
  schema: S,
  handle: (item: z.output<S>) => Promise<void>,
  log: Logger,
  what = q.stream,
): Promise<Drainable> {
  await ensureQueue(nc, q);
  const consumer = await jetstream(nc).consumers.get(q.stream, q.consumer);
  const messages = await consumer.consume({ max_messages: 1 });
  let handling = 0;
  const done = (async () => {
    for await (const m of messages) {
      let raw: unknown;
      try {
        raw = m.json();
      } catch {
        raw = undefined;
      }
      const parsed = schema.safeParse(raw);
      if (!parsed.success) {
        log.error({ stream: q.stream, seq: m.seq, problem: raw === undefined ? "not JSON" : describeZodError(parsed.error) }, "malformed message dropped");
        m.term();
        continue;
      }
      handling = 1;
      try {
        await handle(parsed.data);
        m.ack();
      } catch (err) {
        if (err instanceof DriverError && TRANSIENT.has(err.code)) {
          log.warn({ stream: q.stream, err: err.message }, "failed for now; redelivering");
          m.nak(1000);
        } else {
          log.error({ stream: q.stream, err: String((err as Error)?.message ?? err) }, "failed for good");
          m.ack(); // retrying cannot help; the handler reported the failure
        }
      } finally {
        handling = 0;
      }
    }
  })();
  return {
    what,
    inFlight: () => handling,
    // Pull no more; the messages already pulled are handed over and acknowledged before the iterator ends.
    drain: async () => {
      await messages.close();
      await done.catch(() => {});
    },
  };
}
