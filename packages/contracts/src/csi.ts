/**
 * The CSI v1 protocol (package csi.v1), loaded at runtime from proto/csi.proto.
 */
import { fileURLToPath } from "node:url";
import type * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";

export const CSI_PROTO_PATH = fileURLToPath(new URL("../proto/csi.proto", import.meta.url));

export const protoLoaderOptions = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

export interface CsiServiceDefinitions {
  Identity: grpc.ServiceDefinition;
  Controller: grpc.ServiceDefinition;
  Node: grpc.ServiceDefinition;
}

let cached: CsiServiceDefinitions | undefined;

/** Service definitions for grpc.Server.addService and for clients (grpc.makeGenericClientConstructor). */
export function csiServices(): CsiServiceDefinitions {
  if (!cached) {
    const def = loadSync(CSI_PROTO_PATH, protoLoaderOptions);
    const get = (n: string) => {
      const s = def[`csi.v1.${n}`];
      if (!s) throw new Error(`csi.proto lacks service csi.v1.${n}`);
      return s as unknown as grpc.ServiceDefinition;
    };
    cached = { Identity: get("Identity"), Controller: get("Controller"), Node: get("Node") };
  }
  return cached;
}

/** Plugin name: CSI requires ≤ 63 chars, domain-like. */
export const PLUGIN_NAME_RE = /^[a-zA-Z][A-Za-z0-9-._]{0,61}[a-zA-Z]$/;
export const PLUGIN_NAME = "nats.csi.event-driver.io";
