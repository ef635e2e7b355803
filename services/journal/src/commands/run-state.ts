/**
 * The state of one run of a command, evolved by what the runner learns (Emmett's workflow:
 * `decide(input, state)`, `evolve(state, event)`, `initialState`; here the decider is the
 * command's and the inputs are the runner's). Pure: no I/O, no clock.
 *
 *   initialRunState()  →  evolveRun(state, Read | Statted | Acted | StepFailed)  →  …  →  viewOf(state): what the decider sees
 *
 * - Read: what a read brought: the states read under the locks, nodes' claims, volumes' device
 *   use, aggregates read from their own subjects of the log (their records folded in).
 * - Statted: the images looked at (null: absent).
 * - Acted: what an act did so far: the images its effects made or removed, the events its appends
 *   stored. An act is learned in pieces (its effects, each wave of its appends, its cleanup).
 * - StepFailed: the step failed (commands/decider.ts Failure): the run is in phase "failed" and
 *   keeps the phase it failed in.
 *
 * An input that ends a step carries the phase the decision named for it (`phase`): the run is in
 * that phase from then on (it starts in "start"). A read after a failure moves the
 * phase on and keeps the failure.
 *
 * The fold (fold/evolve.ts Fold) is the one mutable part: each stored event is evolved into it
 * once, when its input is learned, and its trails are what the projection is written from. A
 * state is therefore superseded by the next one: only the newest is read.
 */
import type { StoredEvent } from "@csi/contracts";
import { type Address, type Aggregate, addressKey, Fold, foldOne } from "../fold/evolve.js";
import type { LogRecord } from "../fold/log-record.js";
import type { ImageInfo } from "../pools/port.js";
import { type Failure, type ImageRef, imageKey, type Phase, type View } from "./decider.js";
import type { DeviceUse } from "./deciders/devices.js";

/** What a read brought (one input per read, learned once the read is whole). */
export interface Read<P extends string = string> {
  type: "Read";
  phase?: P;
  /** States read under the locks (by `addressKey`; undefined: none), as the projection has them. */
  states?: [key: string, state: Aggregate | undefined][];
  /** Volumes each node holds claims on. */
  claims?: [nodeId: string, volumes: number][];
  /** What the nodes hold of a volume, by their own reports. */
  devices?: [uuid: string, use: DeviceUse][];
  /** Aggregates read from their own subjects of the log: their records, in log order. */
  log?: { address: Address; history: LogRecord[] }[];
}

/** The images looked at: their info, null when absent. */
export interface Statted<P extends string = string> {
  type: "Statted";
  phase?: P;
  images: [ImageRef, ImageInfo | null][];
}

/** What an act did: images its effects made (create, clone, snapshot: also in `made`), resized or removed (null); events stored. */
export interface Acted<P extends string = string> {
  type: "Acted";
  phase?: P;
  images?: [ImageRef, ImageInfo | null][];
  made?: ImageRef[];
  appended?: StoredEvent[];
}

export interface StepFailed {
  type: "StepFailed";
  failure: Failure;
}

export type RunInput<P extends string = string> = Read<P> | Statted<P> | Acted<P> | StepFailed;

export interface RunState<P extends string = string> {
  readonly phase: Phase<P>;
  /** The phase the run was in when its step failed (phase "failed", or a read after it). */
  readonly failedIn?: Phase<P>;
  readonly failed?: Failure;
  /** Every aggregate read, evolved by every event stored since (once each). */
  readonly fold: Fold;
  readonly images: ReadonlyMap<string, ImageInfo | null>;
  /** Images this run made, in order: an orphan if another writer ended their aggregate meanwhile. */
  readonly made: readonly ImageRef[];
  /** Every event this run appended, as stored. */
  readonly appended: readonly StoredEvent[];
  /** Aggregates read from their own subject of the log (View.fromLog), by `addressKey`. */
  readonly logged: ReadonlySet<string>;
  readonly claims: ReadonlyMap<string, number>;
  readonly devices: ReadonlyMap<string, DeviceUse>;
  /** Every input learned, in order (the run's story, for a diagnosis or a test). */
  readonly inputs: readonly RunInput<P>[];
}

export function initialRunState<P extends string = string>(): RunState<P> {
  return {
    phase: "start",
    fold: new Fold(),
    images: new Map(),
    made: [],
    appended: [],
    logged: new Set(),
    claims: new Map(),
    devices: new Map(),
    inputs: [],
  };
}

const merged = <K, V>(m: ReadonlyMap<K, V>, entries: readonly (readonly [K, V])[] = []): ReadonlyMap<K, V> =>
  entries.length === 0 ? m : new Map([...m, ...entries]);

const imagesWith = (m: ReadonlyMap<string, ImageInfo | null>, images: [ImageRef, ImageInfo | null][] = []) =>
  merged(
    m,
    images.map(([ref, info]) => [imageKey(ref), info] as const),
  );

export function evolveRun<P extends string>(s: RunState<P>, input: RunInput<P>): RunState<P> {
  const inputs = [...s.inputs, input];
  if (input.type === "StepFailed") return { ...s, phase: "failed", failedIn: s.phase, failed: input.failure, inputs };
  const phase = input.phase === undefined ? {} : { phase: input.phase };
  switch (input.type) {
    case "Read": {
      for (const [key, state] of input.states ?? []) s.fold.know(key, state);
      const logged = new Set(s.logged);
      for (const { address, history } of input.log ?? []) {
        // An aggregate this run's own events changed: what the log has past them is folded in (evolve
        // skips what the fold has); otherwise the log's fold replaces what the projection said.
        if (s.fold.touched(address)) s.fold.apply(history);
        else s.fold.know(address, foldOne(address, undefined, history), true);
        logged.add(addressKey(address));
      }
      return { ...s, ...phase, claims: merged(s.claims, input.claims), devices: merged(s.devices, input.devices), logged, inputs };
    }
    case "Statted":
      return { ...s, ...phase, images: imagesWith(s.images, input.images), inputs };
    case "Acted": {
      s.fold.apply(input.appended ?? []);
      const appended = input.appended?.length ? [...s.appended, ...input.appended] : s.appended;
      const made = input.made?.length ? [...s.made, ...input.made] : s.made;
      return { ...s, ...phase, images: imagesWith(s.images, input.images), made, appended, inputs };
    }
    default: {
      const never: never = input;
      throw new Error(`unknown run input ${JSON.stringify(never)}`);
    }
  }
}

/** What the decider sees of the run: the state, as commands/decider.ts View says. */
export function viewOf<P extends string>(s: RunState<P>): View<P> {
  return {
    phase: s.phase,
    ...(s.failedIn === undefined ? {} : { failedIn: s.failedIn }),
    ...(s.failed ? { failed: s.failed } : {}),
    state: (a) => s.fold.state(a),
    has: (a) => s.fold.has(a),
    fromLog: (a) => s.logged.has(addressKey(a)),
    image: (ref) => {
      const key = imageKey(ref);
      return s.images.has(key) ? s.images.get(key) : undefined;
    },
    nodeClaims: (nodeId) => s.claims.get(nodeId) ?? 0,
    devices: (uuid) => s.devices.get(uuid),
    appended: s.appended,
    made: s.made,
  };
}
