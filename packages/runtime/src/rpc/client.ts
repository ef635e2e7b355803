/** A CSI gRPC client for one service (tests, benchmarks, the CLI): typed, promise-returning methods (call options: a deadline). */
import * as grpc from "@grpc/grpc-js";
import { type ClientRequestOf, type ClientResponseOf, type CsiService, csiServices, type Methods } from "../csi.js";
import { parseEndpoint } from "./endpoint.js";

export type CsiClient<S extends CsiService> = {
  [M in Methods<S>]: (req: ClientRequestOf<S, M>, metadata?: grpc.Metadata, options?: grpc.CallOptions) => Promise<ClientResponseOf<S, M>>;
} & { close(): void };

/** The method names of a service, from its loaded definition. */
export const methodsOf = <S extends CsiService>(service: S): Methods<S>[] => Object.keys(csiServices()[service]) as Methods<S>[];

export function csiClient<S extends CsiService>(endpoint: string, service: S): CsiClient<S> {
  const def = csiServices()[service];
  const Ctor = grpc.makeGenericClientConstructor(def, service);
  const raw = new Ctor(parseEndpoint(endpoint).grpcAddress, grpc.credentials.createInsecure()) as unknown as grpc.Client &
    Record<string, (req: unknown, md: grpc.Metadata, options: grpc.CallOptions, cb: (err: unknown, res: unknown) => void) => void>;
  const client: Record<string, unknown> = { close: () => raw.close() };
  for (const method of Object.keys(def)) {
    client[method] = (req: unknown, md = new grpc.Metadata(), options: grpc.CallOptions = {}) =>
      new Promise((resolve, reject) => raw[method]?.call(raw, req, md, options, (err, res) => (err ? reject(err) : resolve(res))));
  }
  return client as CsiClient<S>;
}
