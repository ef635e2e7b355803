/**
 * JetStream publish with its ack, on one wildcard reply subscription: what `js.publish` does,
 * without a request object, a deferred, a timer and two Error objects per message (nats.js
 * makes a RequestError even for an answered request). Measured: bench/lib/primitives.ts
 * ("jetstream" against "jetstream (acked-publish)").
 */
import { createInbox, headers, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import { inboxPrefixOf } from "../access.js";

/** JetStream refused the message: its API error (e.g. err_code 10071, wrong last subject sequence). */
export class PublishRefused extends Error {
  constructor(
    readonly code: number,
    readonly errCode: number,
    description: string,
  ) {
    super(description);
    this.name = "PublishRefused";
  }
}

/** No ack: nobody listens on the subject (no stream), the connection is gone, or it timed out. */
export class PublishUnacked extends Error {
  override readonly name = "PublishUnacked";
}

/** What JetStream must find before it stores the message (else it refuses it: PublishRefused). */
export interface Expectations {
  /** The subject's last sequence (Nats-Expected-Last-Subject-Sequence; 0: the subject is empty). */
  expectedLastSubjectSequence?: number;
  /** The stream's last sequence (Nats-Expected-Last-Sequence). */
  expectedLastSequence?: number;
  /** The stream that stores the subject (Nats-Expected-Stream). */
  expectedStream?: string;
}

function expectationHeaders(e: Expectations): MsgHdrs | undefined {
  if (e.expectedLastSubjectSequence === undefined && e.expectedLastSequence === undefined && e.expectedStream === undefined) return undefined;
  const h = headers();
  if (e.expectedLastSubjectSequence !== undefined) h.set("Nats-Expected-Last-Subject-Sequence", String(e.expectedLastSubjectSequence));
  if (e.expectedLastSequence !== undefined) h.set("Nats-Expected-Last-Sequence", String(e.expectedLastSequence));
  if (e.expectedStream !== undefined) h.set("Nats-Expected-Stream", e.expectedStream);
  return h;
}

interface Waiting {
  resolve(seq: number): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

export class AckedPublisher {
  readonly #waiting = new Map<number, Waiting>();
  #prefix = "";
  #sub?: Subscription;
  #next = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = 5_000,
  ) {
    void this.#watch();
  }

  /**
   * A lost connection (its server crashed, or evicted it in lame-duck mode) ends every publish
   * waiting for its ack at once, unacked (uncertain: it may have landed), instead of at its timeout:
   * an ack sent while the connection was down is not sent again, so waiting on would only delay the
   * caller's retry by up to `timeoutMs`.
   */
  async #watch(): Promise<void> {
    try {
      for await (const s of this.nc.status()) {
        if (s.type !== "disconnect") continue;
        for (const id of [...this.#waiting.keys()]) this.#settle(id)?.reject(new PublishUnacked("no ack: the NATS connection was lost"));
      }
    } catch {
      // the connection closed: its iterator ends
    }
  }

  /** Publish and wait for the stream's ack; resolves with the message's stream sequence. */
  publish(subject: string, data: string | Uint8Array, opts: Expectations = {}): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const id = this.#next++;
      let reply: string;
      try {
        reply = `${this.#inbox()}.${id}`;
      } catch (err) {
        reject(new PublishUnacked(`cannot publish: ${(err as Error).message}`, { cause: err }));
        return;
      }
      const timer = setTimeout(() => this.#settle(id)?.reject(new PublishUnacked(`no ack within ${this.timeoutMs} ms`)), this.timeoutMs);
      this.#waiting.set(id, { resolve, reject, timer });
      try {
        const h = expectationHeaders(opts);
        this.nc.publish(subject, data, h ? { reply, headers: h } : { reply });
      } catch (err) {
        this.#settle(id)?.reject(new PublishUnacked(`cannot publish: ${(err as Error).message}`, { cause: err }));
      }
    });
  }

  #inbox(): string {
    if (!this.#sub || this.#sub.isClosed()) {
      this.#prefix = createInbox(inboxPrefixOf(this.nc)); // the role's inbox: its permissions allow no other
      this.#sub = this.nc.subscribe(`${this.#prefix}.*`, { callback: (_err, msg) => this.#onAck(msg) });
    }
    return this.#prefix;
  }

  #settle(id: number): Waiting | undefined {
    const w = this.#waiting.get(id);
    if (!w) return undefined;
    this.#waiting.delete(id);
    clearTimeout(w.timer);
    return w;
  }

  #onAck(msg: Msg): void {
    const w = this.#settle(Number(msg.subject.slice(this.#prefix.length + 1)));
    if (!w) return;
    if (msg.data.length === 0) {
      // A status message: 503 = no responders (no stream listens on the subject).
      w.reject(new PublishUnacked(`no ack: status ${msg.headers?.code ?? "?"} ${msg.headers?.description ?? ""}`.trim()));
      return;
    }
    try {
      const ack = msg.json<{ seq?: number; error?: { code: number; err_code: number; description: string } }>();
      if (ack.error) w.reject(new PublishRefused(ack.error.code, ack.error.err_code, ack.error.description));
      else if (typeof ack.seq === "number") w.resolve(ack.seq);
      else w.reject(new PublishUnacked("malformed ack"));
    } catch {
      w.reject(new PublishUnacked("malformed ack"));
    }
  }
}
