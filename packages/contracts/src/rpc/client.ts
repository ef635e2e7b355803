/** A CSI gRPC client for one service (tests, benchmarks, the CLI): promise-returning methods. */
import * as grpc from "@grpc/grpc-js";
import { csiServices } from "../csi.js";
import { parseEndpoint } from "./endpoint.js";

export const csiMethods = {
  Identity: ["GetPluginInfo", "GetPluginCapabilities", "Probe"],
  Controller: [
    "CreateVolume", "DeleteVolume", "ControllerPublishVolume", "ControllerUnpublishVolume", "ValidateVolumeCapabilities",
    "ListVolumes", "GetCapacity", "ControllerGetCapabilities", "CreateSnapshot", "DeleteSnapshot", "ListSnapshots",
    "GetSnapshot", "ControllerExpandVolume", "ControllerGetVolume", "ControllerModifyVolume",
  ],
  Node: [
    "NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeGetVolumeStats",
    "NodeExpandVolume", "NodeGetCapabilities", "NodeGetInfo",
  ],
} as const;
export type CsiService = keyof typeof csiMethods;

// biome-ignore lint/suspicious/noExplicitAny: CSI messages are proto-loader plain objects
type Call = (req: any, metadata?: grpc.Metadata) => Promise<any>;
export type CsiClient<S extends CsiService> = Record<(typeof csiMethods)[S][number], Call> & { close(): void };

export function csiClient<S extends CsiService>(endpoint: string, service: S): CsiClient<S> {
  const def = csiServices()[service];
  const Ctor = grpc.makeGenericClientConstructor(def, service);
  const raw = new Ctor(parseEndpoint(endpoint).grpcAddress, grpc.credentials.createInsecure()) as unknown as grpc.Client &
    Record<string, (req: unknown, md: grpc.Metadata, cb: (err: unknown, res: unknown) => void) => void>;
  const client: Record<string, unknown> = { close: () => raw.close() };
  for (const method of Object.keys(def)) {
    client[method] = (req: unknown, md = new grpc.Metadata()) =>
      new Promise((resolve, reject) => raw[method]?.call(raw, req, md, (err, res) => (err ? reject(err) : resolve(res))));
  }
  return client as CsiClient<S>;
}
