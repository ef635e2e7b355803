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

/** A live volume as a person may name it. */
export interface VolumeCandidate {
  id: string;
  clusterID: string;
  uuid: string;
  /** Its request name. */
  name: string;
  /** `namespace/name` of the PVC it was made for, where the log recorded one. */
  pvc?: string;
}

/** The shortest uuid or id prefix taken (shorter ones name too many volumes to be meant). */
export const MIN_PREFIX = 4;

/**
 * The volumes `text` names, first rule that matches any: its request name; the PVC it was made
 * for (`namespace/name`); a prefix (MIN_PREFIX characters or more) of its uuid or of its CSI id.
 * One is the answer, several are ambiguous, none is nothing. Pure.
 */
export function volumesNamed(text: string, candidates: readonly VolumeCandidate[]): VolumeCandidate[] {
  const byName = candidates.filter((c) => c.name === text);
  if (byName.length > 0) return byName;
  const byPvc = candidates.filter((c) => c.pvc === text);
  if (byPvc.length > 0 || text.length < MIN_PREFIX) return byPvc;
  const lower = text.toLowerCase();
  return candidates.filter((c) => c.uuid.startsWith(lower) || c.id.toLowerCase().startsWith(lower));
}

/** Whether `text` has the shape of a PVC's `namespace/name` (worth reading the log for). */
export const looksLikePvc = (text: string) => /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(text);
