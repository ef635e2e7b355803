/**
 * CSI's size limits at a gRPC edge: every handler of a service first checks its request with
 * `checkCsiBounds` (strings ≤ 128 bytes unless `longer` says otherwise, maps ≤ 4 KiB, mount
 * flags by their rule, lists bounded), so nothing oversized reaches routing, a journal command,
 * an error message or a log line.
 */
import { checkCsiBounds } from "@csi/contracts";
import type { CsiService } from "../csi.js";
import type { Handlers } from "./server.js";

export function withCsiBounds<S extends CsiService>(handlers: Handlers<S>, longer: Readonly<Record<string, number>> = {}): Handlers<S> {
  const out: Record<string, unknown> = {};
  for (const [method, handler] of Object.entries(handlers as Record<string, (req: unknown, ctx: unknown) => Promise<unknown>>)) {
    out[method] = async (req: unknown, ctx: unknown) => {
      checkCsiBounds(req, longer);
      return handler(req, ctx);
    };
  }
  return out as Handlers<S>;
}
