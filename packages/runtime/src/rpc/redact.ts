/**
 * Strip secrets from a CSI request before it is logged. CSI marks secret fields with the
 * csi_secret option; in every RPC they are maps named `secrets` (and the field names below).
 * Their values are replaced, keys are kept so an operator sees which secrets were passed.
 */
const SECRET_FIELDS = new Set(["secrets", "controller_publish_secrets", "node_stage_secrets", "node_publish_secrets"]);

export function redactSecrets(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== "object") return value;
  if (depth > 8) return "<truncated>"; // never hand back an unredacted deep object
  if (Array.isArray(value)) return value.map((v) => redactSecrets(v, depth + 1));
  if (Buffer.isBuffer(value)) return `<${value.length} bytes>`;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (SECRET_FIELDS.has(k) && v && typeof v === "object") {
      out[k] = Object.fromEntries(Object.keys(v as object).map((key) => [key, "***stripped***"]));
    } else if (SECRET_FIELDS.has(k) && v !== null && v !== undefined) {
      out[k] = "***stripped***";
    } else {
      out[k] = redactSecrets(v, depth + 1);
    }
  }
  return out;
}
