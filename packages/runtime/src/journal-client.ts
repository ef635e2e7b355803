/**
 * The typed client of the journal's NATS commands (used by the controller, tests and the
 * benchmark). Requests are validated before they leave; replies are validated when they come
 * back; an error reply becomes the DriverError it names.
 */
import type { NatsConnection } from "@nats-io/nats-core";
import {
  type CommandRequest,
  type CommandResult,
  describeZodError,
  DriverError,
  fromWireError,
  type JournalCommand,
  journalContract,
  replyEnvelope,
  subjects,
} from "@csi/contracts";

const envelopes = Object.fromEntries(Object.entries(journalContract).map(([k, v]) => [k, replyEnvelope(v.result)]));

export class JournalClient {
  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = 30_000,
  ) {}

  async call<C extends JournalCommand>(cluster: string, command: C, request: CommandRequest<C>, opts: { timeoutMs?: number } = {}): Promise<CommandResult<C>> {
    const parsed = journalContract[command].request.safeParse(request);
    if (!parsed.success) throw new DriverError("InvalidArgument", describeZodError(parsed.error));
    let reply: Uint8Array;
    try {
      const msg = await this.nc.request(subjects.command(cluster, command), JSON.stringify(parsed.data), { timeout: opts.timeoutMs ?? this.timeoutMs });
      reply = msg.data;
    } catch (err) {
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
