/**
 * What csictl's exit status means, and how any error becomes one line for a person (no stack
 * trace unless CSICTL_DEBUG=1 asks for it). docs/csictl.md has the table.
 *
 *   0  ok
 *   1  the operation failed (a CSI or journal error), or a check found something (an unhealthy
 *      node, a cluster no journal replica answers for)
 *   2  usage: unknown command or option, a missing or malformed argument
 *   3  unreachable: no running stack found, or NATS, Redis, the CSI endpoint or the journal does
 *      not answer (gRPC/journal UNAVAILABLE or DEADLINE_EXCEEDED)
 *   141  the reader of stdout or stderr went away (128 + SIGPIPE, as a Unix tool; closed-pipe.ts)
 */
import { DriverError, GrpcCode, grpcCodeOf } from "@csi/contracts";

export const EXIT = { ok: 0, failed: 1, usage: 2, unreachable: 3, closedPipe: 141 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** An error csictl means to show as it is, with its exit status. */
export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    readonly exitCode: ExitCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export const usageError = (message: string) => new CliError(EXIT.usage, message);
export const unreachable = (message: string, cause?: unknown) => new CliError(EXIT.unreachable, message, cause === undefined ? undefined : { cause });

const CODE_NAMES = new Map<number, string>(Object.entries(GrpcCode).map(([name, n]) => [n, name]));
const UNREACHABLE_CODES = new Set<number>([GrpcCode.UNAVAILABLE, GrpcCode.DEADLINE_EXCEEDED]);

/** A gRPC status error as grpc-js rejects with it. */
function grpcStatus(err: unknown): { code: number; details: string } | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { code?: unknown; details?: unknown; metadata?: unknown };
  return typeof e.code === "number" && typeof e.details === "string" && e.metadata !== undefined ? { code: e.code, details: e.details } : undefined;
}

/** Any error as the line to print and the exit status. Pure. */
export function explain(err: unknown): { exitCode: ExitCode; message: string } {
  if (err instanceof CliError) return { exitCode: err.exitCode, message: err.message };
  const status = grpcStatus(err);
  if (status) {
    const name = CODE_NAMES.get(status.code) ?? `CODE_${status.code}`;
    return { exitCode: UNREACHABLE_CODES.has(status.code) ? EXIT.unreachable : EXIT.failed, message: `${name}: ${status.details || "(no message)"}` };
  }
  if (err instanceof DriverError) {
    const code = grpcCodeOf(err.code);
    return { exitCode: UNREACHABLE_CODES.has(code) ? EXIT.unreachable : EXIT.failed, message: `${CODE_NAMES.get(code)}: ${err.message}` };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { exitCode: EXIT.failed, message: `internal error: ${message.split("\n")[0]} (CSICTL_DEBUG=1 shows the stack)` };
}

/**
 * Why grpc-js could not reach an endpoint, from an UNAVAILABLE's details; undefined when the
 * endpoint itself answered UNAVAILABLE (the journal's Redis or log is down: its message may say
 * "reconnecting", which is no failure to connect to the endpoint). Pure.
 */
export function notConnected(details: string): string | undefined {
  if (!/^No connection established|\b(ENOENT|ECONNREFUSED|EHOSTUNREACH|ENETUNREACH)\b|^Failed to connect/.test(details)) return undefined;
  return /Last error: (?:Error: )?(.*?)(?:\. Resolution note:.*)?$/s.exec(details)?.[1] ?? details;
}
