/**
 * The CSI methods as csictl sends and prints them: a request written in proto3 JSON becomes the
 * object the gRPC client sends (through its wire bytes, so nothing the message lacks can slip
 * through), and an answer becomes proto3 JSON (domain/proto-json.ts). The descriptors are the
 * ones @grpc/proto-loader made from the same csi.proto the services load.
 */

import type { JsonValue } from "@bufbuild/protobuf";
import { type CsiService, csiServices } from "@csi/runtime";
import type { ServiceDefinition } from "@grpc/grpc-js";
import { ProtoJson, ProtoJsonError } from "./domain/proto-json.js";
import { usageError } from "./errors.js";

let codec: ProtoJson | undefined;

/** Every method's descriptors are those of csi.proto and the files it imports: any method's will do. */
const protoJson = (): ProtoJson => {
  codec ??= new ProtoJson(csiServices().Identity.Probe.requestType.fileDescriptorProtos);
  return codec;
};

export interface CsiMethodJson {
  /** A proto3 JSON request (parsed) as the client's request object; anything that is not the request message is a usage error. */
  request(json: unknown): object;
  /** The client's answer as proto3 JSON (`T`: the shape the caller reads of it). */
  response<T = JsonValue>(answer: unknown): T;
}

export function csiMethodJson(service: CsiService, method: string): CsiMethodJson {
  const def = (csiServices()[service] as ServiceDefinition)[method];
  const desc = protoJson().method(`csi.v1.${service}`, method);
  if (!def || !desc) throw new Error(`csi.proto has no method ${service}.${method}`);
  return {
    request: (json) => {
      try {
        return def.requestDeserialize(Buffer.from(protoJson().encode(desc.input, json)));
      } catch (err) {
        if (err instanceof ProtoJsonError) throw usageError(`the request is not a ${desc.input.typeName}: ${err.message}`);
        throw err;
      }
    },
    response: <T>(answer: unknown) => protoJson().decode(desc.output, def.responseSerialize(answer)) as T,
  };
}
