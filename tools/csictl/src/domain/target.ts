/**
 * What a person names an aggregate by: a CSI volume or snapshot id (the cluster and uuid are in
 * it), a bare uuid, or a request name (the `name` of CreateVolume / CreateSnapshot). Pure.
 */
import { decomposeVolumeId, isUuid, MAX_ID_BYTES } from "@csi/contracts";
import { usageError } from "../errors.js";

export type Target = { by: "id"; id: string; clusterID: string; uuid: string } | { by: "uuid"; uuid: string } | { by: "name"; name: string };

/** A CSI id (`0001-…`), a uuid, or else a request name; `asName` takes it as a name whatever it looks like. */
export function parseTarget(text: string, opts: { asName?: boolean } = {}): Target {
  if (text.length === 0) throw usageError("an empty id or name names nothing");
  if (Buffer.byteLength(text, "utf8") > MAX_ID_BYTES) throw usageError(`ids and request names are at most ${MAX_ID_BYTES} bytes`);
  if (opts.asName) return { by: "name", name: text };
  if (isUuid(text)) return { by: "uuid", uuid: text };
  if (/^[0-9a-f]{4}-[0-9a-f]{4}-/i.test(text)) {
    try {
      const p = decomposeVolumeId(text);
      return { by: "id", id: text, clusterID: p.clusterID, uuid: p.uuid };
    } catch (err) {
      throw usageError(`${(err as Error).message} (use --name if ${JSON.stringify(text.slice(0, 40))} is a request name)`);
    }
  }
  return { by: "name", name: text };
}

/** A CSI volume or snapshot id, or a usage error that says what is wrong with it. */
export function csiIdOf(text: string, what = "volume id"): string {
  try {
    decomposeVolumeId(text);
    return text;
  } catch (err) {
    throw usageError(`not a ${what}: ${(err as Error).message.replace(/^malformed volume id: /, "")}`);
  }
}
