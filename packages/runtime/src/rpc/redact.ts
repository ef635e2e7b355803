/**
 * Strip secrets from a CSI request before it is logged. CSI marks secret fields with the
 * csi_secret option; in every RPC they are maps named `secrets` (and the field names below).
 * Their values are replaced, keys are kept so an operator sees which secrets were passed. The
 * kubelet also puts service account tokens into NodePublishVolume's volume_context (a CSIDriver's
 * tokenRequests: key `csi.storage.k8s.io/serviceAccount.tokens`): that value is stripped too.
 * Strings longer than LOG_STRING_MAX_CHARS are shown as a quoted prefix with their size, so no
 * log line grows with what a caller sent.
 */
import { quote } from "@csi/contracts";

export const LOG_STRING_MAX_CHARS = 256;
/** At most this many items of a list and entries of a map are logged. */
const LOG_ENTRIES_MAX = 32;
const shortKey = (k: string) => (k.length > LOG_STRING_MAX_CHARS ? quote(k, LOG_STRING_MAX_CHARS) : k);

const SECRET_FIELDS = new Set(["secrets", "controller_publish_secrets", "node_stage_secrets", "node_publish_secrets"]);
/** Secret entries of a map that is not secret as a whole. */
const SECRET_KEYS = new Set(["csi.storage.k8s.io/serviceAccount.tokens"]);

export function redactSecrets(value: unknown, depth = 0): unknown {
  if (typeof value === "string" && value.length > LOG_STRING_MAX_CHARS) return quote(value, LOG_STRING_MAX_CHARS);
  if (value === null || typeof value !== "object") return value;
  if (depth > 8) return "<truncated>"; // never hand back an unredacted deep object
  if (Array.isArray(value)) {
    const shown = value.slice(0, LOG_ENTRIES_MAX).map((v) => redactSecrets(v, depth + 1));
    return value.length > LOG_ENTRIES_MAX ? [...shown, `<${value.length - LOG_ENTRIES_MAX} more>`] : shown;
  }
  if (Buffer.isBuffer(value)) return `<${value.length} bytes>`;
  const out: Record<string, unknown> = {};
  const entries = Object.entries(value as Record<string, unknown>);
  for (const [k, v] of entries.slice(0, LOG_ENTRIES_MAX)) {
    if (SECRET_FIELDS.has(k) && v && typeof v === "object") {
      out[k] = Object.fromEntries(
        Object.keys(v as object)
          .slice(0, LOG_ENTRIES_MAX)
          .map((key) => [shortKey(key), "***stripped***"]),
      );
    } else if ((SECRET_FIELDS.has(k) || SECRET_KEYS.has(k)) && v !== null && v !== undefined) {
      out[k] = "***stripped***";
    } else {
      out[shortKey(k)] = redactSecrets(v, depth + 1);
    }
  }
  if (entries.length > LOG_ENTRIES_MAX) out["<more>"] = entries.length - LOG_ENTRIES_MAX;
  return out;
}
