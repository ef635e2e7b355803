/**
 * The error table shared by every service.
 *
 * A service throws a `DriverError` with one of the stable names below; the NATS reply carries
 * the name, and each gRPC edge maps it to a status code with `grpcCodeOf` — one table, so the
 * controller, the journal and the node-agent cannot disagree on what a failure means.
 */
import { z } from "zod";
import { sanitizeMessage } from "./text.js";

/** gRPC status codes (google.rpc.Code), as numbers, so contracts need no gRPC import. */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

export const ErrorName = z.enum([
  "InvalidArgument",
  "NotFound",
  "AlreadyExists",
  "FailedPrecondition",
  "OutOfRange",
  "ResourceExhausted",
  "Aborted",
  "Unavailable",
  "DeadlineExceeded",
  "Unimplemented",
  /** The name directory and the per-uuid record disagree: an operator must look (no auto cleanup). */
  "Inconsistent",
  "Internal",
]);
export type ErrorName = z.infer<typeof ErrorName>;

const table: Record<ErrorName, number> = {
  InvalidArgument: GrpcCode.INVALID_ARGUMENT,
  NotFound: GrpcCode.NOT_FOUND,
  AlreadyExists: GrpcCode.ALREADY_EXISTS,
  FailedPrecondition: GrpcCode.FAILED_PRECONDITION,
  OutOfRange: GrpcCode.OUT_OF_RANGE,
  ResourceExhausted: GrpcCode.RESOURCE_EXHAUSTED,
  Aborted: GrpcCode.ABORTED,
  Unavailable: GrpcCode.UNAVAILABLE,
  DeadlineExceeded: GrpcCode.DEADLINE_EXCEEDED,
  Unimplemented: GrpcCode.UNIMPLEMENTED,
  Inconsistent: GrpcCode.INTERNAL,
  Internal: GrpcCode.INTERNAL,
};

/** The gRPC status code for one of our error names. */
export function grpcCodeOf(name: ErrorName): number {
  return table[name];
}

/**
 * The one error class services throw on purpose. `message` is safe to show to a CSI caller:
 * whatever a thrower puts in it, it is cut to ERROR_MESSAGE_MAX_BYTES with control characters
 * replaced (a caller's own text should be quoted with `quote`, which shows a short prefix).
 */
export class DriverError extends Error {
  override readonly name = "DriverError";
  constructor(
    readonly code: ErrorName,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(sanitizeMessage(message), options);
  }
}

export const invalidArgument = (msg: string) => new DriverError("InvalidArgument", msg);
export const notFound = (msg: string) => new DriverError("NotFound", msg);
export const alreadyExists = (msg: string) => new DriverError("AlreadyExists", msg);
export const aborted = (msg: string) => new DriverError("Aborted", msg);

/** Wire shape of an error inside a NATS reply. */
export const WireError = z.object({ code: ErrorName, message: z.string() });
export type WireError = z.infer<typeof WireError>;

/** Any thrown value as a wire error; unknown errors become Internal without their stack. */
export function toWireError(err: unknown): WireError {
  if (err instanceof DriverError) return { code: err.code, message: err.message };
  return { code: "Internal", message: "internal error" };
}

export function fromWireError(w: WireError): DriverError {
  return new DriverError(w.code, w.message);
}
