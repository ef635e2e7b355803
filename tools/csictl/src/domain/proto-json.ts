/**
 * CSI messages as proto3 JSON (https://protobuf.dev/programming-guides/json/), both ways, as
 * grpcurl reads and prints them: field names in lowerCamelCase (the proto names are accepted
 * too), int64 as strings, enums by name, google.protobuf.Timestamp as RFC 3339, wrappers as their
 * bare value; a field the message does not have, at any depth, is an error and nothing is encoded.
 *
 * The work is @bufbuild/protobuf's (fully conformant with the protobuf JSON conformance suite):
 * this module only gives it the CSI descriptors. Those come from @grpc/proto-loader (the
 * `fileDescriptorProtos` it makes with protobufjs, the same proto the services load), which names
 * types relative to their scope ("BlockVolume"), as descriptor.proto allows, lists no file
 * dependencies and writes an empty json_name; @bufbuild/protobuf wants fully-qualified names, so `qualify` resolves each name by
 * the scoping rules descriptor.proto states and orders the files after what they use. Pure: bytes in.
 */
import {
  create,
  createFileRegistry,
  type DescMessage,
  type DescMethod,
  type FileRegistry,
  fromBinary,
  fromJson,
  type JsonValue,
  toBinary,
  toJson,
} from "@bufbuild/protobuf";
import { protoCamelCase } from "@bufbuild/protobuf/reflect";
import { type DescriptorProto, type FileDescriptorProto, FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";

/** A request that is not the message it claims to be (unknown field, wrong type): the message says which and where. */
export class ProtoJsonError extends Error {
  override readonly name = "ProtoJsonError";
}

/** Every message and enum of `files`, fully qualified (".csi.v1.VolumeCapability.BlockVolume"), with the file that defines it. */
function definedTypes(files: FileDescriptorProto[]): Map<string, FileDescriptorProto> {
  const types = new Map<string, FileDescriptorProto>();
  const addMessages = (file: FileDescriptorProto, scope: string, messages: DescriptorProto[]) => {
    for (const m of messages) {
      types.set(`${scope}.${m.name}`, file);
      for (const e of m.enumType) types.set(`${scope}.${m.name}.${e.name}`, file);
      addMessages(file, `${scope}.${m.name}`, m.nestedType);
    }
  };
  for (const f of files) {
    const scope = f.package ? `.${f.package}` : "";
    for (const e of f.enumType) types.set(`${scope}.${e.name}`, f);
    addMessages(f, scope, f.messageType);
  }
  return types;
}

/** A type name as written inside `scope`, fully qualified: the innermost enclosing scope that has it (C++ rules). */
function resolve(name: string, scope: string, types: Map<string, unknown>): string {
  if (name.startsWith(".")) return name;
  for (let s = scope; ; s = s.slice(0, s.lastIndexOf("."))) {
    if (types.has(`${s}.${name}`)) return `${s}.${name}`;
    if (s === "") throw new Error(`descriptor: type ${name} (used in ${scope}) is defined nowhere`);
  }
}

/** The files with every type name fully qualified and the files each one uses as its dependencies, those first. */
export function qualify(files: FileDescriptorProto[]): FileDescriptorProto[] {
  const types = definedTypes(files);
  const uses = new Map<FileDescriptorProto, Set<string>>(files.map((f) => [f, new Set(f.dependency)]));
  const fix = (file: FileDescriptorProto, scope: string, messages: DescriptorProto[]) => {
    for (const m of messages) {
      const inner = `${scope}.${m.name}`;
      for (const field of m.field) {
        // protobufjs writes an empty json_name; protoc writes the lowerCamelCase of the field's name, as proto3 JSON prints it.
        if (!field.jsonName) field.jsonName = protoCamelCase(field.name);
        if (!field.typeName) continue;
        field.typeName = resolve(field.typeName, inner, types);
        const from = types.get(field.typeName);
        if (from && from !== file) uses.get(file)?.add(from.name);
      }
      fix(file, inner, m.nestedType);
    }
  };
  for (const f of files) fix(f, f.package ? `.${f.package}` : "", f.messageType);
  const ordered: FileDescriptorProto[] = [];
  const visit = (f: FileDescriptorProto) => {
    if (ordered.includes(f)) return;
    f.dependency = [...(uses.get(f) ?? [])];
    for (const d of f.dependency) {
      const dep = files.find((x) => x.name === d);
      if (dep && dep !== f) visit(dep);
    }
    ordered.push(f);
  };
  for (const f of files) visit(f);
  return ordered;
}

/** Encoding and decoding of the messages of some proto files (serialized FileDescriptorProtos). */
export class ProtoJson {
  readonly #registry: FileRegistry;

  constructor(fileDescriptorProtos: Uint8Array[]) {
    const files = qualify(fileDescriptorProtos.map((b) => fromBinary(FileDescriptorProtoSchema, b)));
    this.#registry = createFileRegistry(create(FileDescriptorSetSchema, { file: files }));
  }

  /** `service` ("csi.v1.Controller") and `method` ("CreateVolume"): its input and output messages. */
  method(service: string, method: string): DescMethod | undefined {
    return this.#registry.getService(service)?.methods.find((m) => m.name === method);
  }

  message(typeName: string): DescMessage {
    const m = this.#registry.getMessage(typeName);
    if (!m) throw new Error(`no message ${typeName}`);
    return m;
  }

  /** proto3 JSON (already parsed) → the message's wire bytes; anything that is not that message: ProtoJsonError. */
  encode(type: DescMessage, json: unknown): Uint8Array {
    if (typeof json !== "object" || json === null || Array.isArray(json)) throw new ProtoJsonError(`${type.typeName} is a JSON object, not ${kindOf(json)}`);
    try {
      return toBinary(type, fromJson(type, json as JsonValue, { ignoreUnknownFields: false, registry: this.#registry }));
    } catch (err) {
      throw new ProtoJsonError((err as Error).message);
    }
  }

  /**
   * Wire bytes → proto3 JSON with every field (a scalar the sender left at its default shows its
   * default: proto3 cannot tell it from one set to it), so scripts always find the key; an unset
   * message field (e.g. a volume condition the driver did not report) is left out.
   */
  decode(type: DescMessage, bytes: Uint8Array): JsonValue {
    return toJson(type, fromBinary(type, bytes), { alwaysEmitImplicit: true, registry: this.#registry });
  }
}

const kindOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "an array" : `a ${typeof v}`);
