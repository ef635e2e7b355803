/**
 * What every Controller RPC (rpc/volumes.ts, rpc/snapshots.ts) works with, built once per
 * service: the routing to the clusters' journals (rpc/routing.ts), the node registrations and the
 * node work queue. The RPCs themselves hold no state.
 */
import type { CallContext, Methods, RequestOf, ResponseOf } from "@csi/runtime";
import type { NodeWorkSender } from "../adapters/node-work.js";
import type { NodeDirectory } from "../adapters/nodes.js";
import { type JournalRouting, journalRouting, type RoutingDeps } from "./routing.js";

export interface ControllerDeps extends RoutingDeps {
  nodes: NodeDirectory;
  nodeWork: NodeWorkSender;
}

export interface ControllerServer extends JournalRouting {
  /** Every cluster, in the clusters file's order (what the Lists and GetCapacity fan out over). */
  clusterIds: string[];
  nodes: NodeDirectory;
  nodeWork: NodeWorkSender;
}

export function controllerServer(deps: ControllerDeps): ControllerServer {
  return { ...journalRouting(deps), clusterIds: deps.clusters.clusters.map((c) => c.clusterID), nodes: deps.nodes, nodeWork: deps.nodeWork };
}

/** A Controller RPC's request (defaults filled in) and response, typed from the proto. */
export type Req<M extends Methods<"Controller">> = RequestOf<"Controller", M>;
export type Res<M extends Methods<"Controller">> = ResponseOf<"Controller", M>;
/** A Controller RPC: the server it works with, the request and the call → the response. */
export type ControllerRpc<M extends Methods<"Controller">> = (cs: ControllerServer, req: Req<M>, ctx: CallContext) => Promise<Res<M>>;

/** An RPC function made a gRPC handler: `serving(server)(createVolume)` is `(req, ctx) => createVolume(server, req, ctx)`. */
export const serving =
  <S>(server: S) =>
  <Q, R>(rpc: (server: S, req: Q, ctx: CallContext) => Promise<R>) =>
  (req: Q, ctx: CallContext) =>
    rpc(server, req, ctx);
