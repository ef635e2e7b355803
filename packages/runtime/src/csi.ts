/**
 * The CSI v1 protocol (package csi.v1): service definitions loaded at runtime from the proto in
 * @csi/contracts, and the message and handler types generated from the same proto with the same
 * loader options (`npm run gen`; see src/generated, not committed).
 */
import { CSI_PROTO_PATH } from "@csi/contracts";
import { loadSync, type MethodDefinition } from "@grpc/proto-loader";
import type { ControllerDefinition } from "./generated/csi/v1/Controller.js";
import type { GroupControllerDefinition } from "./generated/csi/v1/GroupController.js";
import type { IdentityDefinition } from "./generated/csi/v1/Identity.js";
import type { NodeDefinition } from "./generated/csi/v1/Node.js";

/** Message types the services build or read outside a handler's own request/response. */
export type { CapacityRange__Output as CapacityRangeMsg } from "./generated/csi/v1/CapacityRange.js";
export type { Snapshot as SnapshotMsg } from "./generated/csi/v1/Snapshot.js";
export type { Topology as TopologyMsg, Topology__Output as TopologyMsgOut } from "./generated/csi/v1/Topology.js";
export type { TopologyRequirement__Output as TopologyRequirementMsg } from "./generated/csi/v1/TopologyRequirement.js";
export type { Volume as VolumeMsg } from "./generated/csi/v1/Volume.js";

/** The loader options at runtime; `npm run gen` passes the same ones to proto-loader-gen-types. */
export const protoLoaderOptions = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

export interface CsiServiceDefinitions {
  Identity: IdentityDefinition;
  Controller: ControllerDefinition;
  Node: NodeDefinition;
  GroupController: GroupControllerDefinition;
}
export type CsiService = keyof CsiServiceDefinitions;

/** Request as a handler receives it (defaults filled in) → response as a handler may return it. */
type ServerSide<D> = D extends MethodDefinition<infer _Req, infer Res, infer ReqOut, infer _ResOut> ? { req: ReqOut; res: Res } : never;
/** Request as a client may send it → response as the client receives it. */
type ClientSide<D> = D extends MethodDefinition<infer Req, infer _Res, infer _ReqOut, infer ResOut> ? { req: Req; res: ResOut } : never;

/** The declared methods of a service (grpc's ServiceDefinition also has a string index signature). */
type KnownKeys<T> = keyof { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] };
export type Methods<S extends CsiService> = Extract<KnownKeys<CsiServiceDefinitions[S]>, string>;
export type RequestOf<S extends CsiService, M extends Methods<S>> = ServerSide<CsiServiceDefinitions[S][M]>["req"];
export type ResponseOf<S extends CsiService, M extends Methods<S>> = ServerSide<CsiServiceDefinitions[S][M]>["res"];
export type ClientRequestOf<S extends CsiService, M extends Methods<S>> = ClientSide<CsiServiceDefinitions[S][M]>["req"];
export type ClientResponseOf<S extends CsiService, M extends Methods<S>> = ClientSide<CsiServiceDefinitions[S][M]>["res"];

let cached: CsiServiceDefinitions | undefined;

/** Service definitions for grpc.Server.addService and for clients (grpc.makeGenericClientConstructor). */
export function csiServices(): CsiServiceDefinitions {
  if (!cached) {
    const def = loadSync(CSI_PROTO_PATH, protoLoaderOptions);
    const get = <T>(n: CsiService): T => {
      const s = def[`csi.v1.${n}`];
      if (!s) throw new Error(`csi.proto lacks service csi.v1.${n}`);
      return s as unknown as T;
    };
    cached = { Identity: get("Identity"), Controller: get("Controller"), Node: get("Node"), GroupController: get("GroupController") };
  }
  return cached;
}
