import { z } from "zod";
import { CSI_MAP_MAX_BYTES, CSI_NAME_MAX_BYTES, MAX_PAGE_ENTRIES, mapBytes } from "./bounds.js";
import { isUuid } from "./volume-id.js";

export const Uuid = z.string().refine(isUuid, { message: "must be a lowercase 36-character uuid" });

/**
 * Control characters a name must not have: CSI bans U+0000-U+0008, U+000B, U+000C,
 * U+000E-U+001F and U+007F-U+009F; we refuse tab, LF and CR as well (a name is one line).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we reject
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;

export const CsiName = z
  .string()
  .min(1, "name is required")
  .refine((s) => Buffer.byteLength(s, "utf8") <= CSI_NAME_MAX_BYTES, {
    message: `name must be at most ${CSI_NAME_MAX_BYTES} bytes`,
  })
  .refine((s) => !CONTROL.test(s), { message: "name must not contain control characters" });

export const StringMap = z
  .record(z.string(), z.string())
  .refine((m) => mapBytes(m) <= CSI_MAP_MAX_BYTES, { message: `map must be at most ${CSI_MAP_MAX_BYTES} bytes` });

/** Who wrote an event: the service and its replica (hostname:pid or a configured id). */
export const Actor = z.object({ service: z.string().min(1), replica: z.string().min(1) });
export type Actor = z.infer<typeof Actor>;

export const AccessMode = z.enum([
  "SINGLE_NODE_WRITER",
  "SINGLE_NODE_READER_ONLY",
  "MULTI_NODE_READER_ONLY",
  "MULTI_NODE_SINGLE_WRITER",
  "MULTI_NODE_MULTI_WRITER",
  "SINGLE_NODE_SINGLE_WRITER",
  "SINGLE_NODE_MULTI_WRITER",
]);
export type AccessMode = z.infer<typeof AccessMode>;

/** A CSI VolumeCapability reduced to what the control plane reasons about. */
export const Capability = z.object({
  accessType: z.enum(["mount", "block"]),
  accessMode: AccessMode,
  fsType: z.string().optional(),
  mountFlags: z.array(z.string()).optional(),
});
export type Capability = z.infer<typeof Capability>;

export const ContentSource = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("snapshot"), uuid: Uuid }),
  z.object({ kind: z.literal("volume"), uuid: Uuid }),
]);
export type ContentSource = z.infer<typeof ContentSource>;

/**
 * Paging for list commands: an opaque token the journal hands out (a uuid to start after).
 * `maxEntries` 0 means "as many as fit": the journal cuts every page at MAX_PAGE_ENTRIES and at
 * its reply-size budget, and says where to go on in `nextToken`.
 */
export const Paging = z.object({
  maxEntries: z.number().int().min(0).max(MAX_PAGE_ENTRIES).default(0),
  startingToken: z.string().max(64).optional(),
});

/** Parse with a zod schema, turning failures into one readable line: "field: problem; ...". */
export function describeZodError(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`).join("; ");
}
