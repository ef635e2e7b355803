/**
 * Device-state reports: every step's outcome is published into the volume's cluster report
 * queue (a JetStream stream), from which a journal appends it to the volume's history — so a
 * report survives a journal that is down. Sending never blocks a CSI call: a publish is
 * retried (3 tries from 100 ms); what still fails (NATS down) waits in an outbox retried every
 * few seconds.
 *
 * A report carries the request id of what asked for the step (its Origin), so the history
 * links each node step to its request. Its JetStream message id is
 * `<requestId>:<reporter instance>.<sequence>`, fixed when the report is made: a retried send
 * of one report is de-duplicated, while the several reports of one request (attached, staged)
 * — also of a request retried with the same id after this agent restarted (a redelivered NATS
 * work item) — are all kept.
 */
import { randomUUID } from "node:crypto";
import { type DeviceReport, nodeQueues, subjects, type Via } from "@csi/contracts";
import { retry } from "@csi/runtime";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";

/**
 * Where a node step came from and which request asked for it: the gRPC call's request id
 * (`x-request-id` or generated), the NATS work item's id, or one id per healer run.
 */
export interface Origin {
  via: Via;
  requestId: string;
}

export type Report = Omit<DeviceReport, "nodeId" | "at"> & { clusterID: string };
type Outgoing = DeviceReport & { clusterID: string; msgID: string };

export class Reporter {
  readonly #outbox: Outgoing[] = [];
  readonly #inFlight = new Set<Promise<void>>();
  readonly #js;
  #timer?: NodeJS.Timeout;
  /** Sends are chained so reports leave in the order the steps happened. */
  #tail: Promise<void> = Promise.resolve();
  /** This reporter's part of the message ids: another process's sequence starts again at 1. */
  readonly #instance = randomUUID().slice(0, 8);
  #seq = 0;

  constructor(
    nc: NatsConnection,
    private readonly nodeId: string,
    private readonly log: Logger,
    private readonly retryEveryMs = 3000,
  ) {
    this.#js = jetstream(nc);
  }

  report(r: Report): void {
    this.#enqueue({ ...r, nodeId: this.nodeId, at: new Date().toISOString(), msgID: `${r.requestId}:${this.#instance}.${++this.#seq}` });
  }

  /** Wait for the reports sent so far (tests, shutdown). */
  async flush(): Promise<void> {
    await Promise.all([...this.#inFlight]);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  #enqueue(r: Outgoing): void {
    const p = this.#tail.then(() => this.#send(r));
    this.#tail = p;
    this.#inFlight.add(p);
    void p.finally(() => this.#inFlight.delete(p));
  }

  async #send(r: Outgoing): Promise<void> {
    const { clusterID, msgID, ...report } = r;
    try {
      // The report queue is made by the cluster's journal; the message id de-duplicates retries.
      await retry(() => this.#js.publish(subjects.reports(clusterID, report.nodeId, report.uuid), JSON.stringify(report), { msgID, timeout: 5000 }), {
        tries: 3,
        firstDelayMs: 100,
      });
    } catch (err) {
      this.log.warn({ err: String(err), stream: nodeQueues.reports(clusterID).stream, state: report.state }, "device report not delivered yet; kept for retry");
      this.#keep(r);
    }
  }

  #keep(r: Outgoing): void {
    this.#outbox.push(r);
    this.#timer ??= setInterval(() => {
      const batch = this.#outbox.splice(0);
      if (batch.length === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
        return;
      }
      for (const b of batch) this.#enqueue(b);
    }, this.retryEveryMs);
    this.#timer.unref();
  }
}
