/**
 * One CSI socket for a CO that wants Identity, Controller and Node on a single endpoint (Docker
 * Swarm's managed plugins: deploy/swarm/, docs/deploy.md, "Docker Swarm"). It runs beside a
 * controller and a node-agent, each on its own socket, and forwards every call by service:
 * Controller (and GroupController) calls to the controller, Node calls to the node-agent, Identity
 * calls to the controller — Probe asks both, and is ready only when both are. The calls keep their
 * request id (`x-request-id`) and deadline; a refusal keeps its gRPC code and message.
 *
 * It binds its socket only once both services answer Probe ready: Docker takes the plugin as
 * started when the socket appears, and Swarm's manager, whose first Probe of a plugin fails, goes on
 * as if the plugin had no controller (it "creates" volumes without CreateVolume, named by their
 * name, which every node call then refuses as a malformed id). Seen in `npm run e2e`.
 *
 * It is only a switchboard: the same server plumbing as the services (runtime's startCsiServer:
 * request ids, logging with secrets stripped, draining) and the same client (csiClient); no CSI
 * rule lives here.
 */
import { DriverError, ErrorName, grpcCodeOf } from "@csi/contracts";
import { type CallContext, type CsiClient, type CsiService, csiClient, type Handlers, methodsOf, type RunningServer, startCsiServer } from "@csi/runtime";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";

export interface PluginMuxOptions {
  /** The one socket the CO talks to. */
  endpoint: string;
  /** The controller's CSI endpoint (Identity, Controller, GroupController). */
  controllerEndpoint: string;
  /** The node-agent's CSI endpoint (Identity, Node). */
  nodeEndpoint: string;
  log: Logger;
  /** How long to wait for both services to answer Probe ready before binding (default 120 s). */
  readyWithinMs?: number;
}

/** Our error name for a gRPC code a service answered with (INTERNAL: "Internal"; one we never use: "Internal" too). */
const NAME_OF_CODE = new Map<number, ErrorName>(ErrorName.options.filter((n) => n !== "Inconsistent").map((n): [number, ErrorName] => [grpcCodeOf(n), n]));

/** A forwarded call's failure as the DriverError the server maps back to the same code and message. */
export function forwardedError(err: unknown): DriverError {
  const e = err as Partial<grpc.ServiceError>;
  const name = (typeof e.code === "number" && NAME_OF_CODE.get(e.code)) || "Internal";
  return new DriverError(name, typeof e.details === "string" && e.details ? e.details : "the forwarded call failed", { cause: err });
}

type Forward = (req: unknown, md: grpc.Metadata, options: grpc.CallOptions) => Promise<unknown>;

/** The same call on `client`, with the caller's request id and deadline. */
function forwardCall(call: Forward, req: unknown, ctx: CallContext): Promise<unknown> {
  const md = new grpc.Metadata();
  md.set("x-request-id", ctx.requestId);
  return call(req, md, ctx.deadline ? { deadline: ctx.deadline } : {}).catch((err: unknown) => {
    throw forwardedError(err);
  });
}

/** A client's method as the mux calls it: any request, metadata and options, any answer. */
const forwardOf = (client: object, method: string): Forward => (client as Record<string, unknown>)[method] as Forward;

/** Every method of `service`, forwarded to `client`. */
export function forwardAll<S extends CsiService>(service: S, client: CsiClient<S>): Handlers<S> {
  const handlers: Record<string, (req: unknown, ctx: CallContext) => Promise<unknown>> = {};
  for (const method of methodsOf(service)) {
    const call = forwardOf(client, String(method));
    handlers[method] = (req, ctx) => forwardCall(call, req, ctx);
  }
  return handlers as Handlers<S>;
}

export interface RunningMux extends RunningServer {
  /** Closes the server and the two clients. */
  stop(): Promise<void>;
}

/** Resolves once every one of `clients` answers Probe ready; throws after `ms`. */
async function untilReady(clients: Record<string, CsiClient<"Identity">>, ms: number, log: Logger): Promise<void> {
  const end = Date.now() + ms;
  const ready = (c: CsiClient<"Identity">) =>
    c.Probe({}, undefined, { deadline: Date.now() + 2_000 }).then(
      (r) => r.ready?.value !== false,
      () => false,
    );
  for (const [name, c] of Object.entries(clients)) {
    while (!(await ready(c))) {
      if (Date.now() > end) throw new DriverError("Unavailable", `the ${name} did not answer Probe ready within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 200));
    }
    log.info({ backend: name }, "backend ready");
  }
}

export async function startPluginMux(opts: PluginMuxOptions): Promise<RunningMux> {
  const identity = { controller: csiClient(opts.controllerEndpoint, "Identity"), node: csiClient(opts.nodeEndpoint, "Identity") };
  const controller = csiClient(opts.controllerEndpoint, "Controller");
  const group = csiClient(opts.controllerEndpoint, "GroupController");
  const node = csiClient(opts.nodeEndpoint, "Node");
  const probe = async (c: CsiClient<"Identity">, ctx: CallContext) => {
    const r = (await forwardCall(forwardOf(c, "Probe"), {}, ctx)) as { ready?: { value?: boolean } | null };
    return r.ready?.value !== false;
  };
  const clients = [identity.controller, identity.node, controller, group, node];
  await untilReady(identity, opts.readyWithinMs ?? 120_000, opts.log).catch((err: unknown) => {
    for (const c of clients) c.close();
    throw err;
  });
  const server = await startCsiServer({
    endpoint: opts.endpoint,
    log: opts.log,
    services: {
      Identity: {
        ...forwardAll("Identity", identity.controller),
        Probe: async (_req, ctx) => {
          const both = await Promise.all([probe(identity.controller, ctx), probe(identity.node, ctx)]);
          return { ready: { value: both.every(Boolean) } };
        },
      },
      Controller: forwardAll("Controller", controller),
      GroupController: forwardAll("GroupController", group),
      Node: forwardAll("Node", node),
    },
  });
  return Object.assign(server, {
    stop: async () => {
      await server.drain();
      for (const c of clients) c.close();
    },
  });
}
