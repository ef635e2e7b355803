/**
 * The ops listener against slow and abusive clients (docs/operations.md, "Slow and abusive
 * clients"). A liveness probe must be answered whatever else is connected, so:
 *
 *  - **Timeouts that are enforced.** A request's line and headers must arrive within
 *    `headersTimeoutMs`, the whole request within `requestTimeoutMs`; a connection that sends
 *    nothing is cut by the same clock. node:http checks them every `connectionsCheckingInterval`
 *    (30 s by default, which let a slowloris live half a minute whatever the timeouts said);
 *    here every `checkIntervalMs`. An idle keep-alive connection goes after `keepAliveTimeoutMs`,
 *    and a request must be answered *and delivered* within `answerTimeoutMs` (a client that
 *    stops reading its answer holds the connection no longer).
 *  - **A cap that sheds, never refuses.** At most `maxConnections` are open; a new connection
 *    past the cap closes the *oldest* one that is not being answered (else the oldest of all).
 *    A probe sends its request at once and is answered in the same turn of the event loop, so the
 *    connections that are old are the slow ones. `server.maxConnections` would drop the newcomer
 *    instead — the probe — which is what made /healthz fail under 64 slow connections.
 *  - **Small requests.** Request line and headers at most `maxHeaderBytes` (431 past it).
 *
 * Each connection closed by the guard is counted by reason (csi_ops_connections_closed_total),
 * and the open ones are a gauge (csi_ops_connections).
 */
import http from "node:http";
import type { Socket } from "node:net";
import { Counter, Gauge, type Registry } from "prom-client";

export interface ListenerLimits {
  /** Connections open at once; one more closes the oldest. */
  maxConnections: number;
  /** From a connection's (or request's) first byte to the end of its headers. */
  headersTimeoutMs: number;
  /** From a request's first byte to its end (no body is accepted, so little more than the headers). */
  requestTimeoutMs: number;
  /** An idle keep-alive connection between requests. */
  keepAliveTimeoutMs: number;
  /** From a request's headers to its answer written out (/readyz takes up to 2 s; a client that does not read holds it longer). */
  answerTimeoutMs: number;
  /** How often node:http checks the header and request timeouts. */
  checkIntervalMs: number;
  /** Request line plus headers. */
  maxHeaderBytes: number;
}

export const LISTENER_LIMITS: Readonly<ListenerLimits> = {
  maxConnections: 128,
  headersTimeoutMs: 3_000,
  requestTimeoutMs: 5_000,
  keepAliveTimeoutMs: 5_000,
  answerTimeoutMs: 10_000,
  checkIntervalMs: 500,
  maxHeaderBytes: 8 * 1024,
};

/** Why the guard closed a connection (a bounded label). */
export type CloseReason = "shed" | "request_timeout" | "answer_timeout" | "too_large" | "bad_request";

/** A parse or timeout error of a client, as node:http reports it: status line and close reason. */
function clientErrorAnswer(code: string | undefined): [string, CloseReason] | undefined {
  switch (code) {
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return ["408 Request Timeout", "request_timeout"];
    case "HPE_HEADER_OVERFLOW":
      return ["431 Request Header Fields Too Large", "too_large"];
    case "ECONNRESET":
    case "EPIPE":
      return undefined; // the client went away: nothing to answer, nothing to count
    default:
      return ["400 Bad Request", "bad_request"];
  }
}

/**
 * An HTTP server for `handler` under `limits` (the node:http timeouts and header bound, the cap,
 * the answer timeout, counted client errors); its series go into `registry`.
 */
export function guardedServer(handler: http.RequestListener, registry: Registry, limits: ListenerLimits = LISTENER_LIMITS): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: limits.checkIntervalMs,
      maxHeaderSize: limits.maxHeaderBytes,
    },
    handler,
  );
  /** Open connections, oldest first (a Map keeps insertion order), with their requests being answered. */
  const open = new Map<Socket, { answering: number }>();
  const closed = new Counter({
    name: "csi_ops_connections_closed_total",
    help: "Connections of the ops listener closed by its guard, by reason (shed, request_timeout, answer_timeout, too_large, bad_request)",
    labelNames: ["reason"],
    registers: [registry],
  });
  new Gauge({
    name: "csi_ops_connections",
    help: "Connections open to the ops listener",
    registers: [registry],
    collect() {
      this.set(open.size);
    },
  });
  const cut = (socket: Socket, reason: CloseReason) => {
    closed.inc({ reason });
    socket.destroy();
  };

  server.on("connection", (socket: Socket) => {
    if (open.size >= limits.maxConnections) {
      let victim: Socket | undefined;
      for (const [s, st] of open)
        if (st.answering === 0) {
          victim = s;
          break;
        }
      victim ??= open.keys().next().value;
      if (victim) {
        open.delete(victim); // before its 'close': the newcomer's place is taken now
        cut(victim, "shed");
      }
    }
    open.set(socket, { answering: 0 });
    socket.once("close", () => open.delete(socket));
  });

  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const st = open.get(req.socket);
    if (!st) return;
    st.answering++;
    const late = setTimeout(() => cut(req.socket, "answer_timeout"), limits.answerTimeoutMs);
    res.once("close", () => {
      st.answering--;
      clearTimeout(late);
    });
  });

  // Replaces node's default answer (same status lines) so that each is counted.
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
    const answer = clientErrorAnswer(err.code);
    if (!answer) return void socket.destroy();
    if (socket.writable && !open.get(socket)?.answering) socket.write(`HTTP/1.1 ${answer[0]}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    cut(socket, answer[1]);
  });
  return server;
}
