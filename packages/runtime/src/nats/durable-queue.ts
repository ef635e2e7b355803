/**
 * A durable queue on JetStream, the one mechanism behind node work (front-end → node-agent)
 * and device reports (node-agent → journal): a stream with work-queue retention, one durable
 * pull consumer, messages validated with a zod schema, acknowledged only after the handler is
 * done, redelivered after a transient failure, dropped (and logged) when malformed or failed
 * for good. What is sent while the consumer is away waits in the stream.
 */

import { DriverError, describeZodError, type QueueSpec } from "@csi/contracts";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { z } from "zod";

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

/** Handle the queue's messages one at a time until stopped. */
export async function consumeQueue<S extends z.ZodTypeAny>(
  nc: NatsConnection,
  q: QueueSpec,
  schema: S,
  handle: (item: z.output<S>) => Promise<void>,
  log: Logger,
): Promise<{ stop(): Promise<void> }> {
  await ensureQueue(nc, q);
  const consumer = await jetstream(nc).consumers.get(q.stream, q.consumer);
  const messages = await consumer.consume({ max_messages: 1 });
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
      }
    }
  })();
  return {
    stop: async () => {
      await messages.close();
      await done.catch(() => {});
    },
  };
}
