/** Where an aggregate lives: a volume, snapshot or group snapshot by uuid, or a request name of a kind. */
import type { Kind } from "@csi/contracts";

export type Address = { kind: Kind; uuid: string } | { kind: "name"; of: Kind; name: string };

/** One string per aggregate (map keys of a fold). */
export function addressKey(a: Address): string {
  return a.kind === "name" ? `name:${a.of}:${a.name}` : `${a.kind}:${a.uuid}`;
}
