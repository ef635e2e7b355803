/** What the runner (commands/runner.ts) is given, and what its parts share of a run: its deps, its state, and how it learns. */
import type { Actor, ResolvedCluster } from "@csi/contracts";
import type { Logger } from "pino";
import type { EventLog } from "../log/port.js";
import type { PoolBackend } from "../pools/port.js";
import type { CommandStore } from "../projection/port.js";
import type { Effect } from "./decider.js";
import type { NodeHolding } from "./deciders/devices.js";
import type { RunInput, RunState } from "./run-state.js";

/** What the runner needs of the projector: catch-up after Redis came back, waiting for a rebuild. */
export interface ProjectionGate {
  current(): Promise<void>;
  ready(): Promise<void>;
  catchUp(): Promise<number>;
  distrust(): void;
  readonly distrusted: boolean;
}

export interface RunnerDeps {
  cluster: ResolvedCluster;
  pools: ReadonlyMap<string, PoolBackend>;
  log: EventLog;
  store: CommandStore;
  projector: ProjectionGate;
  actor: Actor;
  logger: Logger;
  lockTtlMs: number;
  lockWaitMs: number;
  now: () => Date;
  /** Told how long each lock wait took, and whether it got the locks or gave up (ABORTED): the metrics. */
  observeLockWait?: (seconds: number, outcome: "acquired" | "busy") => void;
  /** Told after each run how many events it appended and how many times it evolved one (equal: the fold ran once). */
  observeFold?: (appended: number, evolutions: number) => void;
  /**
   * Why the journal cannot serve a command now (its Redis or its event log is known unreachable),
   * or undefined: a command is then refused Unavailable before it reads or touches an image, not
   * after an image step whose event could not be appended.
   */
  unavailable?: () => string | undefined;
  /** Told of each pool step once it returned, before the run goes on (fault injection: a crash between an image and its event). */
  afterEffect?: (e: Effect) => Promise<void>;
  /** The nodes' latest registrations (what each says it holds): they correct lost device reports. Without it, reports alone count. */
  heartbeats?: (nodeIds: string[]) => Promise<ReadonlyMap<string, NodeHolding | undefined>>;
}

/** One run as its parts see it: the deps, the request, the newest state, and `learn`, which evolves it (commands/run-state.ts). */
export interface RunIO {
  readonly d: RunnerDeps;
  readonly requestId: string;
  readonly state: RunState;
  learn(input: RunInput): void;
}
