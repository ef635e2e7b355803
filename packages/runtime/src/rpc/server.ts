/**
 * The gRPC plumbing every CSI endpoint shares (controller and node-agent):
 *  - every method of the Identity/Controller/Node services is registered; those a service does
 *    not implement answer UNIMPLEMENTED (never INTERNAL);
 *  - one middleware chain per call: a request id (from the `x-request-id` metadata when it is a
 *    sane one, else new) in a pino child logger, the request logged with secrets stripped, slow
 *    calls warned, thrown errors mapped through the error table (a DriverError keeps its
 *    message; anything else becomes INTERNAL "internal error" and its stack stays in our log),
 *    and every finished call told to the `observe` hook (the RPC metrics: method, code, seconds);
 *  - the caller's deadline and cancellation reach the handler as `ctx.deadline` and `ctx.signal`:
 *    the controller stops waiting for the journal when either ends the call (the journal's own
 *    operation still finishes or fails on its own and releases its locks), so nothing waits for
 *    a caller that has gone;
 *  - a graceful stop (`RunningServer` is a Drainable): refuse new calls (GOAWAY; a CO retries
 *    UNAVAILABLE), let the calls in flight finish, cut them at the bound (forceShutdown: the
 *    caller sees UNAVAILABLE/CANCELLED), and remove the unix socket.
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { unlink } from "node:fs/promises";
import { DriverError, GrpcCode, grpcCodeOf, PLUGIN_CAPABILITIES, PLUGIN_NAME } from "@csi/contracts";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import { type CsiService, csiServices, type Methods, type RequestOf, type ResponseOf } from "../csi.js";
import { type Drainable, InFlight } from "../drain.js";
import { grpcCodeName, type RpcObserver } from "../ops/metrics.js";
import { parseEndpoint } from "./endpoint.js";
import { redactSecrets } from "./redact.js";

export interface CallContext {
  requestId: string;
  log: Logger;
  /** Aborted when the caller cancels or its deadline passes. */
  signal: AbortSignal;
  /** The caller's deadline (epoch ms), when it set one. */
  deadline?: number;
}

/** The handlers of one CSI service, typed from the proto: request (defaults filled in) → response. */
export type Handlers<S extends CsiService> = {
  [M in Methods<S>]?: (req: RequestOf<S, M>, ctx: CallContext) => Promise<ResponseOf<S, M>>;
};
type AnyHandler = (req: unknown, ctx: CallContext) => Promise<unknown>;

export interface CsiServerOptions {
  endpoint: string;
  log: Logger;
  services: { Identity: Handlers<"Identity">; Controller?: Handlers<"Controller">; Node?: Handlers<"Node">; GroupController?: Handlers<"GroupController"> };
  slowCallMs?: number;
  /** Told of every finished call (method, gRPC code, seconds): the RPC metrics (ops/metrics.ts, grpcServerMetrics). */
  observe?: RpcObserver;
}

export interface RunningServer extends Drainable {
  address: string;
  /** True from the bind until the drain starts (readiness: "socket"). */
  readonly listening: boolean;
}

export function statusOf(err: unknown): { code: number; details: string } {
  if (err instanceof DriverError) return { code: grpcCodeOf(err.code), details: err.message };
  return { code: GrpcCode.INTERNAL, details: "internal error" };
}

/**
 * A caller's `x-request-id` is taken when it is 1–128 printable ASCII characters without spaces
 * (request ids travel in journal commands, events and device reports, which allow 128);
 * otherwise the call gets a new one.
 */
const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

function wrap(
  method: string,
  handler: AnyHandler | undefined,
  log: Logger,
  slowMs: number,
  calls: InFlight,
  observe?: RpcObserver,
): grpc.handleUnaryCall<unknown, unknown> {
  return (call, done) => {
    const started = performance.now();
    const callback: grpc.sendUnaryData<unknown> = (err, value) => {
      observe?.(method, err ? (err.code ?? GrpcCode.UNKNOWN) : GrpcCode.OK, (performance.now() - started) / 1000);
      done(err, value);
    };
    const given = call.metadata.get("x-request-id")[0];
    const requestId = typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    // The call's child logger is made when something logs (a child with redaction costs ~3% of
    // the controller's CPU per call, and most calls log nothing).
    let callLog: Logger | undefined;
    const clog = () => {
      callLog ??= log.child({ requestId, method });
      return callLog;
    };
    if (!handler) {
      clog().debug("unimplemented");
      callback({ code: GrpcCode.UNIMPLEMENTED, details: `${method} is not implemented` });
      return;
    }
    const ac = new AbortController();
    let answered = false;
    // grpc-js reports "cancelled" for answered calls too: only a call still running is aborted.
    call.on("cancelled", () => answered || ac.abort(new DriverError("DeadlineExceeded", "call cancelled")));
    const debug = log.isLevelEnabled("debug"); // redacting a request costs: only when it is logged
    if (debug) clog().debug({ request: redactSecrets(call.request) }, "request");
    const dl = call.getDeadline();
    const deadline = dl instanceof Date ? dl.getTime() : Number.isFinite(dl) ? Number(dl) : undefined;
    const ctx: CallContext = {
      requestId,
      get log() {
        return clog();
      },
      signal: ac.signal,
      ...(deadline ? { deadline } : {}),
    };
    const reply = handler(call.request, ctx).then(
      (response) => {
        answered = true;
        const ms = Math.round(performance.now() - started);
        if (ms > slowMs) clog().warn({ ms }, "slow call");
        if (debug) clog().debug({ response: redactSecrets(response), ms }, "response");
        callback(null, response);
      },
      (err: unknown) => {
        answered = true;
        const st = statusOf(err);
        const ms = Math.round(performance.now() - started);
        // The code by name ("NOT_FOUND"), as the metrics label it: nobody reads 5 in a log line.
        if (st.code === GrpcCode.INTERNAL) clog().error({ err, code: grpcCodeName(st.code), ms }, "call failed");
        else clog().info({ code: grpcCodeName(st.code), details: st.details, ms }, "call refused");
        callback({ code: st.code, details: st.details });
      },
    );
    void calls.run(() => reply);
  };
}

export async function startCsiServer(opts: CsiServerOptions): Promise<RunningServer> {
  const ep = parseEndpoint(opts.endpoint);
  const defs = csiServices();
  const server = new grpc.Server({ "grpc.max_receive_message_length": 4 * 1024 * 1024 });
  const calls = new InFlight();
  for (const [name, handlers] of Object.entries(opts.services)) {
    if (!handlers) continue;
    const def = defs[name as CsiService];
    const impl: grpc.UntypedServiceImplementation = {};
    for (const method of Object.keys(def)) {
      const handler = (handlers as Record<string, AnyHandler | undefined>)[method];
      impl[method] = wrap(`${name}.${method}`, handler, opts.log, opts.slowCallMs ?? 1000, calls, opts.observe);
    }
    server.addService(def, impl);
  }
  if (ep.socketPath) await unlink(ep.socketPath).catch(() => {});
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(ep.grpcAddress, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const address = ep.socketPath ? ep.grpcAddress : ep.grpcAddress.replace(/:0$/, `:${port}`);
  opts.log.info({ endpoint: address }, "CSI gRPC endpoint listening");
  const removeSocket = async () => {
    if (ep.socketPath) await unlink(ep.socketPath).catch(() => {});
  };
  let listening = true;
  return {
    address,
    get listening() {
      return listening && (!ep.socketPath || existsSync(ep.socketPath));
    },
    what: "gRPC calls",
    inFlight: () => calls.size,
    // tryShutdown closes the listeners at once (a new connection is refused) and sends GOAWAY on
    // the open ones (a new call on them is refused); its callback comes when the last call is done.
    drain: async () => {
      listening = false;
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      await removeSocket();
    },
    force: () => {
      listening = false;
      server.forceShutdown();
      void removeSocket();
    },
  };
}

/** Identity service handlers, the same for every CSI endpoint of the plugin (name and capabilities from contracts). */
export function csiIdentity(info: { version: string; ready: () => Promise<boolean> }): Handlers<"Identity"> {
  return {
    GetPluginInfo: async () => ({ name: PLUGIN_NAME, vendor_version: info.version, manifest: {} }),
    GetPluginCapabilities: async () => ({
      capabilities: PLUGIN_CAPABILITIES.map((c) =>
        c.startsWith("VOLUME_EXPANSION:")
          ? { volume_expansion: { type: c.split(":")[1] as "ONLINE" | "OFFLINE" } }
          : { service: { type: c as "CONTROLLER_SERVICE" | "VOLUME_ACCESSIBILITY_CONSTRAINTS" | "GROUP_CONTROLLER_SERVICE" } },
      ),
    }),
    Probe: async () => ({ ready: { value: await info.ready() } }),
  };
}
