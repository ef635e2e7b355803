/**
 * How every process of the driver connects to NATS: `connectNats` = nats.js `connect` with
 * writes coalesced per event-loop turn.
 *
 * nats.js buffers what a connection sends and writes it to the socket at the next microtask
 * checkpoint, i.e. after the I/O callback that published it. A controller or journal at
 * concurrency 16 receives its requests in separate I/O callbacks (one per gRPC frame or NATS
 * read), so each publish became a socket write of its own. On the 2-vCPU VM these were measured
 * on, a write to loopback costs the writer 0.1–0.3 ms of CPU (the peer's wake-up is paid by the
 * sender), and the writes were the largest single item of the controller's profile (17% of its
 * busy time; docs/performance.md). `coalesceWrites` defers the flush to `setImmediate`, after
 * every I/O callback of the current loop turn, so the publishes of one turn leave in one write;
 * the flush is still inline once `pendingLimit` bytes are waiting, as before. Measured with
 * `BENCH_CONCURRENCY=1,16 BENCH_ONLY=ops npm run bench`: CPU per CSI CreateVolume at c=16 over
 * all processes 5.13 → 2.90 ms (controller 1.78 → 0.71 ms).
 *
 * It replaces one method of the connection's protocol handler (nats-core's `ProtocolHandler.
 * sendCommand`, public in its typings). If a nats-core release changes that shape, nothing is
 * patched, `coalesceWrites` returns false and `connectNats` warns once through `onUnpatched`;
 * packages/runtime/src/nats/connect.test.ts fails on such a release.
 */
import type { ConnectionOptions, NatsConnection } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";

interface Protocol {
  outbound: { length(): number; size(): number; fill(data: Uint8Array, ...payloads: Uint8Array[]): void };
  pendingLimit: number;
  flushPending(): void;
  sendCommand(cmd: string | Uint8Array, ...payloads: Uint8Array[]): void;
}

const encoder = new TextEncoder();

function protocolOf(nc: NatsConnection): Protocol | undefined {
  const p = (nc as { protocol?: Partial<Protocol> }).protocol;
  const ok =
    p &&
    typeof p.sendCommand === "function" &&
    typeof p.flushPending === "function" &&
    typeof p.pendingLimit === "number" &&
    typeof p.outbound?.length === "function" &&
    typeof p.outbound?.size === "function" &&
    typeof p.outbound?.fill === "function";
  return ok ? (p as Protocol) : undefined;
}

/** Defers the connection's socket writes to the end of the event-loop turn; false if nats-core's shape is not the known one. */
export function coalesceWrites(nc: NatsConnection): boolean {
  const p = protocolOf(nc);
  if (!p) return false;
  p.sendCommand = (cmd, ...payloads) => {
    const wasEmpty = p.outbound.length() === 0;
    p.outbound.fill(typeof cmd === "string" ? encoder.encode(cmd) : cmd, ...payloads);
    if (wasEmpty) setImmediate(() => p.flushPending());
    else if (p.outbound.size() >= p.pendingLimit) p.flushPending();
  };
  return true;
}

/** Bytes the connection holds for its next socket write (for tests of the above). */
export function pendingBytes(nc: NatsConnection): number | undefined {
  return protocolOf(nc)?.outbound.size();
}

export async function connectNats(opts: ConnectionOptions, onUnpatched: (why: string) => void = () => {}): Promise<NatsConnection> {
  const nc = await connect(opts);
  if (!coalesceWrites(nc)) onUnpatched("NATS writes not coalesced: this nats-core version has another ProtocolHandler shape");
  return nc;
}
