/**
 * The typed client of the journal's NATS commands (used by the controller, tests and the
 * benchmark). Requests are validated before they leave; replies are validated when they come
 * back; an error reply becomes the DriverError it names.
 */

import {
  type CommandRequest,
  type CommandResult,
  DriverError,
  describeZodError,
  fromWireError,
  type JournalCommand,
  journalContract,
  replyEnvelope,
  subjects,
} from "@csi/contracts";
import type { NatsConnection } from "@nats-io/nats-core";

const envelopes = Object.fromEntries(Object.entries(journalContract).map(([k, v]) => [k, replyEnvelope(v.result)]));

export class JournalClient {
  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = 30_000,
  ) {}

  /** Send one command; `timeoutMs` bounds the wait, `signal` ends it early (the caller went away). */
  async call<C extends JournalCommand>(
    cluster: string,
    command: C,
    request: CommandRequest<C>,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<CommandResult<C>> {
    const parsed = journalContract[command].request.safeParse(request);
    if (!parsed.success) throw new DriverError("InvalidArgument", describeZodError(parsed.error));
    let reply: Uint8Array;
    try {
      opts.signal?.throwIfAborted();
      const sent = this.nc.request(subjects.command(cluster, command), JSON.stringify(parsed.data), { timeout: opts.timeoutMs ?? this.timeoutMs });
      const msg = opts.signal ? await untilAborted(sent, opts.signal) : await sent;
      reply = msg.data;
    } catch (err) {
      if (err instanceof DriverError) throw err;
      const text = String((err as Error)?.message ?? err);
      if (/no responders|503/i.test(text)) throw new DriverError("Unavailable", `no journal answers for cluster ${cluster}`, { cause: err });
      if (/timeout/i.test(text)) throw new DriverError("DeadlineExceeded", `journal of cluster ${cluster} did not answer in time`, { cause: err });
      throw new DriverError("Unavailable", `journal request failed: ${text}`, { cause: err });
    }
    const env = (envelopes[command] as ReturnType<typeof replyEnvelope>).safeParse(JSON.parse(Buffer.from(reply).toString("utf8")));
    if (!env.success) throw new DriverError("Internal", `malformed journal reply: ${describeZodError(env.error)}`);
    if (!env.data.ok) throw fromWireError(env.data.error);
    return env.data.result as CommandResult<C>;
  }
}

/** `p`, or the signal's reason as soon as it aborts (the request itself is left to time out). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason instanceof DriverError ? signal.reason : new DriverError("DeadlineExceeded", "the caller cancelled"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
