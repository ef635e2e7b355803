/**
 * Device-state reports: every step's outcome goes to the volume's cluster journal, which
 * appends it to the volume's history. Sending never blocks a CSI call: a report is retried
 * (3 tries from 100 ms), and what still fails waits in an outbox that is retried every few
 * seconds until the journal answers again.
 */
import { type DeviceReport, DriverError, type JournalClient } from "@csi/contracts";
import type { Logger } from "pino";

export type Report = Omit<DeviceReport, "requestId" | "nodeId" | "at" | "uuid"> & { clusterID: string; uuid: string };

export class Reporter {
  readonly #outbox: (DeviceReport & { clusterID: string })[] = [];
  #timer?: NodeJS.Timeout;
  #inFlight = new Set<Promise<void>>();

  constructor(
    private readonly journal: JournalClient,
    private readonly nodeId: string,
    private readonly log: Logger,
    private readonly retryEveryMs = 3000,
  ) {}

  report(r: Report): void {
    const { clusterID, ...rest } = r;
    const full = { ...rest, clusterID, nodeId: this.nodeId, at: new Date().toISOString(), requestId: `report-${rest.uuid}-${Date.now()}` };
    const p = this.#send(full).finally(() => this.#inFlight.delete(p));
    this.#inFlight.add(p);
  }

  /** Wait for the reports sent so far (tests, shutdown). */
  async flush(): Promise<void> {
    await Promise.all([...this.#inFlight]);
  }

  get pending(): number {
    return this.#outbox.length;
  }

  async #send(r: DeviceReport & { clusterID: string }): Promise<void> {
    const { clusterID, ...report } = r;
    let delay = 100;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.journal.call(clusterID, "device.report", report, { timeoutMs: 5000 });
        return;
      } catch (err) {
        const transient = err instanceof DriverError && ["Unavailable", "DeadlineExceeded", "Aborted"].includes(err.code);
        if (!transient || attempt >= 3) {
          if (transient) this.#queue(r);
          else this.log.warn({ err: String(err), report: r.state }, "device report refused");
          return;
        }
        await new Promise((res) => setTimeout(res, delay));
        delay *= 2;
      }
    }
  }

  #queue(r: DeviceReport & { clusterID: string }): void {
    this.#outbox.push(r);
    this.#timer ??= setInterval(() => {
      const batch = this.#outbox.splice(0);
      if (batch.length === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
        return;
      }
      for (const b of batch) {
        const p = this.#send(b).finally(() => this.#inFlight.delete(p));
        this.#inFlight.add(p);
      }
    }, this.retryEveryMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
