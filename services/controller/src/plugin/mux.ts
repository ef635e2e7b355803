/**
 * One CSI socket for a CO that wants Identity, Controller and Node on a single endpoint (Docker
 * Swarm's managed plugins: deploy/swarm/, docs/deploy.md, "Docker Swarm"). It runs beside a
 * controller and a node-agent, each on its own socket, and forwards every call by service:
 * Controller (and GroupController) calls to the controller, Node calls to the node-agent, Identity
 * calls to the controller — Probe asks both, and is ready only when both are. The calls keep their
 * request id (`x-request-id`) and deadline; a refusal keeps its gRPC code and message.
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

/** Every method of `service`, forwarded to `client`. */
export function forwardAll<S extends CsiService>(service: S, client: CsiClient<S>): Handlers<S> {
  const handlers: Record<string, (req: unknown, ctx: CallContext) => Promise<unknown>> = {};
  for (const method of methodsOf(service)) {
    const call = client[method] as unknown as Forward;
    handlers[method] = (req, ctx) => forwardCall(call, req, ctx);
  }
  return handlers as Handlers<S>;
}

export interface RunningMux extends RunningServer {
  /** Closes the server and the two clients. */
  stop(): Promise<void>;
}

export async function startPluginMux(opts: PluginMuxOptions): Promise<RunningMux> {
  const identity = { controller: csiClient(opts.controllerEndpoint, "Identity"), node: csiClient(opts.nodeEndpoint, "Identity") };
  const controller = csiClient(opts.controllerEndpoint, "Controller");
  const group = csiClient(opts.controllerEndpoint, "GroupController");
  const node = csiClient(opts.nodeEndpoint, "Node");
  const probe = async (c: CsiClient<"Identity">, ctx: CallContext) => {
    const r = (await forwardCall(c.Probe as unknown as Forward, {}, ctx)) as { ready?: { value?: boolean } | null };
    return r.ready?.value !== false;
  };
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
      for (const c of [identity.controller, identity.node, controller, group, node]) c.close();
    },
  });
}
