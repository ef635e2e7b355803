/**
 * What every service's metrics share (docs/operations.md, "Metrics and health"): the registry
 * with the process's default metrics, the gRPC server series (fed by the one server chain,
 * rpc/server.ts), the NATS connection series and readiness check, and the label value of an
 * outcome. Each service adds its own series in its metrics module (services/<name>/src/metrics.ts).
 *
 * Labels are bounded: method names come from the proto, codes and outcomes from the error table,
 * commands, event types and device states from the contracts — never a volume id, name or path.
 */
import { DriverError, GrpcCode } from "@csi/contracts";
import type { NatsConnection } from "@nats-io/nats-core";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { Readiness } from "./readiness.js";

/** The metric classes, for the services' own series (one prom-client for the whole process). */
export { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** Latency buckets (seconds) of calls that may run long (a node stage makes a filesystem; a clone copies an image). */
export const CALL_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Buckets of short waits (a lock, bounded by LOCK_WAIT_MS). */
export const WAIT_SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** A counter in `registry` (labels: the bounded ones named). */
export function counter<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
  return new Counter({ name, help, labelNames, registers: [registry] });
}

/** A histogram in `registry` with these buckets (seconds). */
export function histogram<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[], buckets: number[]): Histogram<L> {
  return new Histogram({ name, help, labelNames, buckets, registers: [registry] });
}

/** Where a service drops messages it cannot use: its durable queue (`reports`, `node-work`) or the node registrations it reads. */
export type DropSource = "reports" | "node-work" | "registrations";

/**
 * csi_messages_dropped_total{source,reason}: messages a service dropped instead of using them — a
 * queue's message that is not JSON or not of its schema (`malformed`) or that its handler refused
 * for good (`refused`), a registration that is not one of its node (`malformed`). Each drop is
 * also a log line naming the stream sequence and subject.
 */
export function droppedMessages(registry: Registry): (source: DropSource, reason: string) => void {
  const dropped = counter(
    registry,
    "csi_messages_dropped_total",
    "Messages dropped: not JSON, not of their schema, or refused for good; by source and reason",
    ["source", "reason"],
  );
  return (source, reason) => dropped.inc({ source, reason });
}

/**
 * prom-client's default gauges whose names end in `_total`, which `promtool check metrics` refuses
 * ("non-counter metrics should not have "_total" suffix"). Each is the sum of a gauge prom-client
 * registers beside it by type (`nodejs_active_handles{type}` …): `sum(nodejs_active_handles)` is
 * the same number, so nothing is lost by leaving them out.
 */
export const DEFAULT_GAUGES_NAMED_TOTAL = ["nodejs_active_handles_total", "nodejs_active_requests_total", "nodejs_active_resources_total"] as const;

/**
 * How often the event-loop lag histogram (nodejs_eventloop_lag_*) takes a sample, in ms.
 * prom-client's default, 10, is a timer that wakes an idle service 100 times a second: ~5 ms of
 * CPU per second per process, a tenth of a create's CPU at low load (docs/operations.md, "Metrics").
 * At 100 a stall still shows in the max and the high percentiles; a lag shorter than the sample
 * distance is seen only when a sample lands in it.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * A service's metrics registry and readiness checks; runMain serves them (ops/listener.ts). With a
 * `version` (runMain gives its package.json's), `csi_build_info{service,version,node_version} 1`.
 */
export class Ops {
  readonly registry = new Registry();
  readonly readiness = new Readiness();

  constructor(
    readonly service: string,
    version?: string,
  ) {
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    for (const name of DEFAULT_GAUGES_NAMED_TOTAL) this.registry.removeSingleMetric(name);
    if (version !== undefined) buildInfo(this.registry, { service, version, node_version: process.version });
  }
}

/** csi_build_info: always 1; its labels say what runs (a dashboard joins on it, an alert sees versions mixed in a rollout). */
function buildInfo(registry: Registry, labels: { service: string; version: string; node_version: string }): void {
  new Gauge({
    name: "csi_build_info",
    help: "Always 1: the service, its version (its package.json) and the Node.js version it runs on",
    labelNames: ["service", "version", "node_version"],
    registers: [registry],
  }).set(labels, 1);
}

/** The outcome label of a finished piece of work: "ok", or the error's name from the error table ("Internal" for anything else). */
export function outcomeOf(err?: unknown): string {
  if (err === undefined) return "ok";
  return err instanceof DriverError ? err.code : "Internal";
}

const CODE_NAMES = new Map<number, string>(Object.entries(GrpcCode).map(([name, n]) => [n, name]));

/** The gRPC code's name ("OK", "NOT_FOUND"…), "UNKNOWN" for a number outside the table. */
export function grpcCodeName(code: number): string {
  return CODE_NAMES.get(code) ?? "UNKNOWN";
}

/** Called by the server chain once per finished call: "Controller.CreateVolume", its gRPC code, its duration. */
export type RpcObserver = (method: string, code: number, seconds: number) => void;

/** csi_grpc_server_handled_total and csi_grpc_server_handling_seconds, by service, method and code. */
export function grpcServerMetrics(registry: Registry): RpcObserver {
  const labels = ["service", "method", "code"] as const;
  const handled = counter(registry, "csi_grpc_server_handled_total", "CSI gRPC calls completed, by service, method and gRPC code", labels);
  const seconds = histogram(registry, "csi_grpc_server_handling_seconds", "Duration of CSI gRPC calls, by service, method and gRPC code", labels, CALL_SECONDS);
  return (fullMethod, code, s) => {
    const dot = fullMethod.indexOf(".");
    const labels = { service: fullMethod.slice(0, dot), method: fullMethod.slice(dot + 1), code: grpcCodeName(code) };
    handled.inc(labels);
    seconds.observe(labels, s);
  };
}

/**
 * The NATS connection's state: csi_nats_connected (1/0) and csi_nats_reconnects_total, and the
 * "nats" readiness check. Call it right after connecting.
 */
export function watchNats(nc: NatsConnection, ops: Ops): void {
  let connected = !nc.isClosed();
  new Gauge({
    name: "csi_nats_connected",
    help: "1 while the service's NATS connection is up, else 0",
    registers: [ops.registry],
    collect() {
      this.set(connected && !nc.isClosed() ? 1 : 0);
    },
  });
  const reconnects = new Counter({
    name: "csi_nats_reconnects_total",
    help: "Times the NATS connection came back after a disconnect",
    registers: [ops.registry],
  });
  ops.readiness.add("nats", () => (connected && !nc.isClosed() ? true : "not connected to NATS"));
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "close") connected = false;
      else if (s.type === "reconnect") {
        connected = true;
        reconnects.inc();
      }
    }
  })().catch(() => {});
}
