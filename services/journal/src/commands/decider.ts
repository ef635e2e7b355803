/**
 * The shape of every journal command's decision (Emmett's decider, extended with the image
 * steps a storage journal takes). A command is a pure function `decide(view, ctx) → Decision`;
 * commands/runner.ts is the one loop that executes them all:
 *
 *   lock + read (plan)  →  decide  →  [read more | stat images | effects, then append events]  →  decide again …  →  reply
 *
 * A decision that takes a step names the phase the run is in once the step is done (`phase`);
 * the run starts in "start" (after its first read), and a failed step puts it in "failed"
 * (`View.failedIn`: the phase it failed in). A decider is a function of its phase: it switches on
 * `view.phase` (its own union of names) to know which round it is in, and looks at the view only
 * for what the domain says. The view is built from the run's state (commands/run-state.ts), which
 * what the runner learns evolves: the aggregates read under the locks, evolved (fold/evolve.ts,
 * once per event) by every event this run appended; the images it looked at or made; and, after a
 * failed step, the failure. Nothing in a decider does I/O, reads a clock or makes an id: new
 * uuids come in `ctx.ids` (fixed per run), time is stamped by the log. A decider refuses by
 * throwing a DriverError (the runner answers it to the caller).
 */
import type { DriverError, EventBody, ResolvedCluster, StoredEvent } from "@csi/contracts";
import type { Address, Aggregate } from "../fold/evolve.js";
import type { ImageInfo } from "../pools/port.js";
import type { ReadPlan } from "../projection/port.js";
import type { DeviceUse } from "./deciders/devices.js";

export type { LockOn, ReadPlan } from "../projection/port.js";
export { lockKey } from "../projection/port.js";

/** An image of a pool. `pool` "*": every pool of the cluster (an image whose record is lost). */
export interface ImageRef {
  pool: string;
  imageName: string;
}

/**
 * A step on a pool's images: run in order, before the decision's events are appended. An image
 * made for a request name carries the name (written as the image's owner where the pool can).
 */
export type Effect =
  | { op: "create"; pool: string; imageName: string; sizeBytes: number; name?: string }
  | { op: "clone"; pool: string; from: string; imageName: string; sizeBytes: number; name?: string }
  | { op: "snapshot"; pool: string; from: string; imageName: string; name?: string }
  | { op: "resize"; pool: string; imageName: string; sizeBytes: number }
  /** `quarantine`: gc's removal of an image no record names: kept aside for a while where the pool can (the file pool's .trash). */
  | { op: "delete"; pool: string; imageName: string; copied?: boolean; quarantine?: boolean };

/** A failed step the decider is told of (it then decides how to undo, and fails). */
export interface Failure {
  step: "effect" | "append";
  /** The image step that failed (step "effect"). */
  effect?: Effect;
  error: DriverError | Error;
  /** The append failed on its fence: another writer changed an aggregate first. */
  fenced: boolean;
  /**
   * The append got no answer (its ack lost, the log gone): what it sent may have landed, or may
   * land yet. An undo must then end what it sent as well, fenced, so that nothing it sent can
   * outlive the undo (docs/operations.md, "The extra snapshot").
   */
  uncertain?: boolean;
}

export interface Act {
  effects?: Effect[];
  /**
   * Appended together after the effects, each fenced on its aggregate's sequence in the view. An
   * event that follows, in the same act, the first event of a fresh aggregate (fenced on 0) is sent
   * right behind it in the same write (commands/runner.ts, "One write").
   */
  events?: EventBody[];
  /** Image steps taken once every event landed (removing what the events made nobody's). */
  cleanup?: Effect[];
}

/** A run's phase: "start" (its first read done), one its decider named (`P`), or "failed" (a step failed). */
export type Phase<P extends string = string> = "start" | P | "failed";

export type Decision<R, P extends string = string> =
  /** The answer (also after a failed step, when reading the log showed it landed after all). */
  | { reply: R }
  /** A step, and the phase the run is in once it is done (`phase`). */
  | { read: ReadPlan; phase: P }
  | { stat: ImageRef[]; phase: P }
  | { act: Act; phase: P }
  /**
   * Undo what must be undone (best effort), then fail with `error`. An undo fenced off (the log
   * moved on) has its aggregates read from the log again and the decider asked once more (in the
   * phase it was in).
   */
  | { fail: DriverError | Error; act?: Act };

/** What a decider sees (built from the run's state: commands/run-state.ts viewOf). */
export interface View<P extends string = string> {
  /** The phase the run is in: the `phase` the last step done named ("start" before any; "failed" once a step failed). */
  phase: Phase<P>;
  /** Once a step failed: the phase the run was in when it did. */
  failedIn?: Phase<P>;
  /** An aggregate as read (undefined: none) evolved by this run's events. */
  state(a: Address): Aggregate | undefined;
  /** Whether `a` was read (from the projection or the log), so `state(a)` is its real state. */
  has(a: Address): boolean;
  /** Whether `a` was read from its own subject of the log in this run (`ReadPlan.fromLog`): its state is the log's, not the projection's. */
  fromLog(a: Address): boolean;
  /** An image looked at (stat) or made by this run: its info, null when absent, undefined when not looked at. */
  image(ref: ImageRef): ImageInfo | null | undefined;
  /** Volumes the node holds claims on (read with `nodeClaims`). */
  nodeClaims(nodeId: string): number;
  /** What the nodes hold of a volume, by their own reports (read with `devices`); undefined when not read. */
  devices(uuid: string): DeviceUse | undefined;
  /** Every event this run appended, as stored. */
  appended: readonly StoredEvent[];
  /** The images this run made (create, clone, snapshot), in order. */
  made: readonly ImageRef[];
  /** The failed step, once one failed (the decider is then asked to read the log, reply or undo and fail). */
  failed?: Failure;
}

export interface PoolInfo {
  poolId: number;
  maxImageBytes: number;
  /** Where a node finds an image of the pool (in the publish context): a file's path, or an RBD pool's Ceph pool, monitors and user. */
  publishContext(imageName: string): Record<string, string>;
  /** Its images carry their owner (RBD): one without is not ours (gc leaves it). */
  readonly marksOwners?: boolean;
  /** The log the pool is bound to, where its images carry it (RBD): one of another log is not ours. */
  readonly boundLog?: string;
}

export interface Ctx {
  cluster: ResolvedCluster;
  /** The cluster's pools (an unknown one is InvalidArgument). */
  pools: ReadonlyMap<string, PoolInfo>;
  /** Fresh uuids for this run, the same on every round (ids(0) is the first new aggregate). */
  ids: (i: number) => string;
}

/**
 * A command as the runner takes it: the first read (it may lock the run's fresh uuids: `ctx.ids`),
 * then its decider, over its phases `P` (a method, so that a command of any phases is a `Command<R>`).
 */
export interface Command<R, P extends string = string> {
  requestId: string;
  /** Sent again by the caller (a resend after a reconnect or a silence): run only if no run of it was answered (commands/runner.ts). */
  resend?: boolean;
  first: ReadPlan | ((ctx: Ctx) => ReadPlan);
  decide(view: View<P>, ctx: Ctx): Decision<R, P>;
}

export const imageKey = (ref: ImageRef) => `${ref.pool}\u0000${ref.imageName}`;
