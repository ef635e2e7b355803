/**
 * The journal's NATS face: one micro-service (discoverable with $SRV.PING/INFO/STATS) per
 * cluster, every command an endpoint in the cluster's queue group, so any number of replicas
 * share the work. Requests are validated against the contract before any logic runs.
 *
 * A command that takes longer than `beatEveryMs` gets "working" beats on its reply inbox
 * (WORKING_BEAT, an empty message) every `beatEveryMs` until its reply, so that the caller
 * (JournalClient) can tell a replica that works from one that died and send the command again
 * (docs/journal.md, "Failover"). A fast command sends none: the cost is one timer.
 *
 * No reply can crash the journal: list and history replies are cut to fit (journal.ts), and a
 * reply that would still pass the connection's max_payload is answered with a small
 * ResourceExhausted error instead; a publish that fails anyway is logged, not thrown.
 *
 * Replies go only to inboxes (docs/security.md): a request whose reply subject is not one
 * (`isReplySubject`: `_INBOX.…`, or `_R_.…` across accounts) is dropped before any handler sees
 * it — the commands' and the service discovery (`$SRV.PING/INFO/STATS`) the framework answers
 * itself — with a log line and `onRefused` (the metric), and nothing is answered: a requester
 * cannot make the journal write its reply into a stream (an event subject, say).
 *
 * Graceful stop (the result is a Drainable): the endpoints' subscriptions are drained first, so
 * the replica leaves the queue group — NATS hands every new command to the other replicas at
 * once — while the commands it already took run on, beating, to their replies.
 */
import {
  type ClaimAnswer,
  ClaimCheck,
  DriverError,
  describeZodError,
  grpcCodeOf,
  isReplySubject,
  type JournalCommand,
  journalContract,
  NATS_DEFAULT_MAX_PAYLOAD,
  type ParsedRequest,
  REPLY_HEADROOM_BYTES,
  sanitizeMessage,
  subjects,
  toWireError,
} from "@csi/contracts";
import { type Drainable, grpcCodeName, InFlight, WORKING_BEAT } from "@csi/runtime";
import { type ServiceMsg, Svcm } from "@nats-io/services";
import type { Msg, NatsConnection, SubscriptionOptions } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { z } from "zod";
import type { CommandTable, Journal } from "../app/index.js";

/** Beats to `msg`'s reply inbox every `everyMs` (the first after `everyMs`) until the returned stop is called. */
function beating(msg: ServiceMsg, everyMs: number): () => void {
  if (everyMs <= 0 || !msg.reply) return () => {};
  let timer: NodeJS.Timeout | undefined;
  const beat = () => {
    try {
      msg.respond(WORKING_BEAT);
    } catch {
      return; // the connection is closing: the reply cannot go out either
    }
    timer = setTimeout(beat, everyMs);
  };
  timer = setTimeout(beat, everyMs);
  return () => clearTimeout(timer);
}

/**
 * `nc` as the service framework is given it: the messages of every subscription it makes (each
 * with a callback) pass `admit` first, and only those admitted reach the framework.
 */
function admitting(nc: NatsConnection, admit: (msg: Msg) => boolean): NatsConnection {
  return new Proxy(nc, {
    get(target, prop) {
      if (prop === "subscribe") {
        return (subject: string, opts?: SubscriptionOptions) => {
          const callback = opts?.callback;
          if (!callback) return target.subscribe(subject, opts);
          return target.subscribe(subject, { ...opts, callback: (err, msg) => (err || admit(msg) ? callback(err, msg) : undefined) });
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

/** A request may be answered only onto an inbox: else it is dropped, logged (its subjects, sanitised, never its body) and told to `onRefused`. */
function inboxesOnly(logger: Logger, onRefused: (reason: string) => void): (msg: Msg) => boolean {
  return (msg) => {
    if (isReplySubject(msg.reply)) return true;
    const reason = msg.reply ? "reply-subject" : "no-reply";
    onRefused(reason);
    logger.warn(
      { subject: sanitizeMessage(msg.subject, 256), reply: sanitizeMessage(msg.reply ?? "", 256), reason },
      "request dropped unanswered: its reply subject is not an inbox",
    );
    return false;
  };
}

export async function serveJournal(
  nc: NatsConnection,
  cluster: string,
  journal: Journal,
  logger: Logger,
  version: string,
  opts: {
    beatEveryMs: number;
    /** Told of every answered command: its name, "ok" or the error's name, seconds from request to reply (the metrics). */
    observe?: (command: JournalCommand, outcome: string, seconds: number) => void;
    /** Told of every request dropped unanswered (its reply subject is not an inbox): the metrics. */
    onRefused?: (reason: string) => void;
    /** Told when a command starts (+1) and when it has settled (−1): the in-flight gauge. */
    inFlight?: (command: JournalCommand, delta: 1 | -1) => void;
  },
): Promise<Drainable & { readonly serving: boolean }> {
  const guarded = admitting(nc, inboxesOnly(logger, opts.onRefused ?? (() => {})));
  // @nats-io/services pins an older nats-core prerelease; the connection is the same at runtime.
  const svc = await new Svcm(guarded as unknown as ConstructorParameters<typeof Svcm>[0]).add({
    name: subjects.journalServiceName(cluster),
    version,
    description: `CSI reservation journal of cluster ${cluster}`,
    queue: subjects.journalQueue(cluster),
    metadata: { cluster },
  });
  const answering: Answering = { nc, journal, handlers: journal.commands, logger, beatEveryMs: opts.beatEveryMs, observe: opts.observe };
  const commands = new InFlight();
  for (const command of Object.keys(journalContract) as JournalCommand[]) {
    svc.addEndpoint(command.replace(".", "-"), {
      subject: subjects.command(cluster, command),
      handler: (err, msg) => {
        if (err) {
          logger.error({ err }, "endpoint stopped");
          return;
        }
        void commands.run(async () => {
          opts.inFlight?.(command, 1);
          try {
            await answerCommand(answering, command, msg);
          } finally {
            opts.inFlight?.(command, -1);
          }
        });
      },
    });
  }
  svc.addEndpoint("claims", {
    subject: subjects.claimsWildcard(cluster),
    handler: (err, msg) => {
      if (!err) void commands.run(() => answerClaim(journal, msg));
    },
  });
  return {
    /** The command endpoints are subscribed (readiness: "commands"). */
    get serving() {
      return !svc.isStopped;
    },
    what: "journal commands",
    inFlight: () => commands.size,
    drain: async () => {
      await svc.stop().catch(() => {}); // leaves the queue group: the commands delivered so far are still handled
      await commands.idle();
    },
  };
}

/** The largest claim check read (a uuid in JSON). */
const MAX_CLAIM_CHECK_BYTES = 1024;

/**
 * A node-agent asks whether its node holds a claim on a volume (before it runs work that uses it:
 * docs/security.md, "Node work"): the node is the one the subject names, which its account alone
 * may ask on. Read from the projection (no image stat'ed); an unknown volume holds no claim.
 */
async function answerClaim(j: Journal, msg: ServiceMsg): Promise<void> {
  const nodeId = Buffer.from(msg.subject.split(".").at(-1) ?? "", "base64url").toString("utf8");
  let answer: ClaimAnswer;
  try {
    const asked = msg.data.byteLength <= MAX_CLAIM_CHECK_BYTES ? ClaimCheck.safeParse(JSON.parse(Buffer.from(msg.data).toString("utf8"))) : undefined;
    if (!asked?.success) throw new DriverError("InvalidArgument", "not a claim check");
    const claim = (await j.claimsOf(asked.data.uuid))?.find((c) => c.nodeId === nodeId);
    answer = claim ? { claimed: true, accessMode: claim.accessMode, readOnly: claim.readOnly } : { claimed: false };
  } catch (err) {
    answer = { error: sanitizeMessage(err instanceof Error ? err.message : String(err), 512) };
  }
  msg.respond(JSON.stringify(answer));
}

interface Answering {
  nc: NatsConnection;
  journal: Journal;
  handlers: CommandTable;
  logger: Logger;
  beatEveryMs: number;
  observe: ((command: JournalCommand, outcome: string, seconds: number) => void) | undefined;
}

/** The contract seen per command (the same object, checked key by key), so that a command's schema keeps its request's type. */
const REQUESTS: { readonly [C in JournalCommand]: { readonly request: z.ZodType<ParsedRequest<C>> } } = journalContract;

/** A request parsed against its command's contract (InvalidArgument, saying why, when it does not hold). */
function parseRequest<C extends JournalCommand>(command: C, raw: unknown): ParsedRequest<C> {
  const schema: z.ZodType<ParsedRequest<C>> = REQUESTS[command].request;
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new DriverError("InvalidArgument", `${command}: ${describeZodError(parsed.error)}`);
  return parsed.data;
}

/** One command: parsed against its contract, run, answered (beating while it works); the reply bounded by max_payload. */
function answerCommand<C extends JournalCommand>(a: Answering, command: C, msg: ServiceMsg): Promise<void> {
  const started = performance.now();
  const stopBeating = beating(msg, a.beatEveryMs);
  let requestId: string | undefined;
  const reply = async () => {
    let raw: unknown;
    try {
      raw = msg.json();
    } catch {
      throw new DriverError("InvalidArgument", "request is not JSON");
    }
    const request: ParsedRequest<C> = parseRequest(command, raw);
    requestId = "requestId" in request && typeof request.requestId === "string" ? request.requestId : undefined;
    await a.journal.current();
    const handler: CommandTable[C] = a.handlers[command];
    return handler(request);
  };
  const send = (body: string, outcome: string) => {
    a.observe?.(command, outcome, (performance.now() - started) / 1000);
    try {
      msg.respond(body);
    } catch (e) {
      a.logger.error({ err: e, command, requestId, bytes: Buffer.byteLength(body, "utf8") }, "reply could not be sent");
    }
  };
  const refuse = (e: unknown) => {
    stopBeating();
    const wire = toWireError(e);
    // The code by its gRPC name ("NOT_FOUND"), as the controller and the node-agent log theirs.
    const code = grpcCodeName(grpcCodeOf(wire.code));
    if (wire.code === "Internal") a.logger.error({ err: e, command, requestId, code }, "command failed");
    else a.logger.info({ command, requestId, code, message: wire.message }, "command refused");
    send(JSON.stringify({ ok: false, error: wire }), wire.code);
  };
  return reply().then((result) => {
    stopBeating();
    const body = JSON.stringify({ ok: true, result });
    const bytes = Buffer.byteLength(body, "utf8");
    const limit = (a.nc.info?.max_payload ?? NATS_DEFAULT_MAX_PAYLOAD) - REPLY_HEADROOM_BYTES;
    if (bytes > limit)
      return refuse(new DriverError("ResourceExhausted", `${command}: the reply of ${bytes} bytes exceeds the ${limit} bytes a reply may have`));
    send(body, "ok");
    a.logger.debug({ command, requestId, ms: Math.round(performance.now() - started) }, "ok");
  }, refuse);
}
