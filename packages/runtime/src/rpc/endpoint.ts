/** CSI endpoints as drivers conventionally take them: unix:///abs/path.sock or tcp://host:port. */
import path from "node:path";
import { DriverError } from "@csi/contracts";

export interface Endpoint {
  /** The address grpc-js binds/dials ("unix:/abs/path" or "host:port"). */
  grpcAddress: string;
  /** The socket file to remove on shutdown, for unix endpoints. */
  socketPath?: string;
}

export function parseEndpoint(value: string): Endpoint {
  if (value.startsWith("unix://")) {
    const p = value.slice("unix://".length);
    if (!p) throw new DriverError("InvalidArgument", `empty unix endpoint: ${value}`);
    const abs = path.resolve(p);
    return { grpcAddress: `unix:${abs}`, socketPath: abs };
  }
  if (value.startsWith("unix:")) return parseEndpoint(`unix://${value.slice(5)}`);
  if (value.startsWith("tcp://")) return { grpcAddress: value.slice("tcp://".length) };
  if (value.startsWith("/")) return parseEndpoint(`unix://${value}`);
  throw new DriverError("InvalidArgument", `endpoint must be unix:///path or tcp://host:port, got ${value}`);
}
