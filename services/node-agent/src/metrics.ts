/**
 * The node-agent's metrics (docs/operations.md, "Metrics and health"), wired by index.ts at the
 * edges of the app — the NodeService's operations (whichever way they came: kubelet's gRPC or
 * NATS work), the device-state reports of each step, the healer's results — never inside them.
 *
 *   csi_node_operations_total{operation,outcome}   counter  stage/unstage/publish/unpublish/expand: ok or the error name
 *   csi_node_device_steps_total{step}              counter  device steps done: attached, staged, published, unpublished,
 *                                                           unstaged, detached, healed, limited, failed
 *   csi_node_heal_actions_total{kind,outcome}      counter  the healer's actions by kind, ok or failed
 *   csi_messages_dropped_total{source,reason}      counter  node work dropped: not JSON or not of its schema, or refused for good
 *
 * Readiness: "registration" (its registration was published and reads back) and "socket" (the
 * CSI endpoint listens); "nats" comes from watchNats.
 */
import { type Counter, counter, type DropReason, droppedMessages, type Ops, outcomeOf } from "@csi/runtime";
import type { HealResult } from "./app/healer.js";
import type { NodeService } from "./app/node-service.js";
import type { Reporter } from "./app/reporter.js";

/** The NodeService operations counted (each one CSI Node RPC that changes the machine, or its NATS work). */
const COUNTED = ["stage", "unstage", "publish", "unpublish", "expand"] as const;

export class NodeMetrics {
  readonly #operations: Counter<"operation" | "outcome">;
  readonly #steps: Counter<"step">;
  readonly #heal: Counter<"kind" | "outcome">;
  readonly #dropped: ReturnType<typeof droppedMessages>;

  constructor(private readonly ops: Ops) {
    this.#operations = counter(ops.registry, "csi_node_operations_total", "Node operations finished, by outcome (ok or the error name)", [
      "operation",
      "outcome",
    ]);
    this.#steps = counter(ops.registry, "csi_node_device_steps_total", "Device steps done on this node (the device-state reports)", ["step"]);
    this.#heal = counter(ops.registry, "csi_node_heal_actions_total", "The healer's repairs, by kind and outcome (ok, failed)", ["kind", "outcome"]);
    this.#dropped = droppedMessages(ops.registry);
  }

  /** The node work queue's onDropped: a message dropped (malformed, or refused for good). */
  readonly workDropped = (reason: DropReason): void => this.#dropped("node-work", reason);

  /** Count every operation of `svc` as it ends (the instance's methods are wrapped). */
  countOperations(svc: NodeService): void {
    for (const name of COUNTED) {
      const op = svc[name].bind(svc) as (req: never) => Promise<unknown>;
      const counted = async (req: never) => {
        try {
          const done = await op(req);
          this.#operations.inc({ operation: name, outcome: "ok" });
          return done;
        } catch (err) {
          this.#operations.inc({ operation: name, outcome: outcomeOf(err) });
          throw err;
        }
      };
      Object.defineProperty(svc, name, { value: counted, configurable: true, writable: true });
    }
  }

  /** Count every device step the reporter is told of. */
  countSteps(reporter: Reporter): void {
    const report = reporter.report.bind(reporter);
    reporter.report = (r) => {
      this.#steps.inc({ step: r.state });
      report(r);
    };
  }

  healed(results: HealResult[]): void {
    for (const r of results) this.#heal.inc({ kind: r.action.kind, outcome: r.ok ? "ok" : "failed" });
  }

  /** The node's own readiness checks. */
  ready(checks: { registered: () => boolean; listening: () => boolean }): void {
    this.ops.readiness.add("registration", () => checks.registered() || "the node's registration is not published or cannot be read back");
    this.ops.readiness.add("socket", () => checks.listening() || "the CSI endpoint is not listening");
  }
}
