/**
 * Durable node work over JetStream: stream CSI_NODE_WORK (work-queue retention), one subject
 * and one durable consumer per node. Work sent while the agent is down waits in the stream.
 * A message is acknowledged only after its step is done (or failed for good), so a crash
 * mid-step redelivers it; steps are idempotent, so the effect is exactly once.
 */
import { DriverError, describeZodError, NODE_WORK_STREAM, NodeWork, nodeWorkSubjects } from "@csi/contracts";
import { AckPolicy, type ConsumerMessages, DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { z } from "zod";

export type Work = z.output<typeof NodeWork>;
const TRANSIENT = new Set(["Unavailable", "Aborted", "DeadlineExceeded"]);

export async function ensureWorkStream(nc: NatsConnection, nodeId: string): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.info(NODE_WORK_STREAM).catch(() =>
    jsm.streams
      .add({ name: NODE_WORK_STREAM, subjects: [nodeWorkSubjects.wildcard], storage: StorageType.File, retention: RetentionPolicy.Workqueue, duplicate_window: 2 * 60 * 1_000_000_000 })
      .catch(async (err) => {
        await jsm.streams.info(NODE_WORK_STREAM).catch(() => {
          throw err;
        });
      }),
  );
  const name = nodeWorkSubjects.consumer(nodeId);
  await jsm.consumers.info(NODE_WORK_STREAM, name).catch(() =>
    jsm.consumers.add(NODE_WORK_STREAM, {
      durable_name: name,
      filter_subject: nodeWorkSubjects.forNode(nodeId),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: 120 * 1_000_000_000,
      max_deliver: 20,
    }),
  );
}

/** Take this node's work one piece at a time until stopped. */
export async function consumeWork(nc: NatsConnection, nodeId: string, handle: (w: Work) => Promise<void>, log: Logger): Promise<{ stop(): Promise<void> }> {
  await ensureWorkStream(nc, nodeId);
  const consumer = await jetstream(nc).consumers.get(NODE_WORK_STREAM, nodeWorkSubjects.consumer(nodeId));
  const messages: ConsumerMessages = await consumer.consume({ max_messages: 1 });
  const done = (async () => {
    for await (const m of messages) {
      const parsed = NodeWork.safeParse((() => {
        try {
          return m.json();
        } catch {
          return undefined;
        }
      })());
      if (!parsed.success) {
        log.error({ seq: m.seq, problem: parsed.error ? describeZodError(parsed.error) : "not JSON" }, "malformed node work dropped");
        m.term();
        continue;
      }
      const w = parsed.data;
      try {
        await handle(w);
        m.ack();
        log.info({ work: w.id, op: w.op, volumeId: w.volumeId }, "node work done");
      } catch (err) {
        if (err instanceof DriverError && TRANSIENT.has(err.code)) {
          log.warn({ work: w.id, err: err.message }, "node work failed for now; redelivering");
          m.nak(1000);
        } else {
          log.error({ work: w.id, err: String((err as Error)?.message ?? err) }, "node work failed");
          m.ack(); // a permanent failure is reported (device state "failed"); retrying cannot help
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
