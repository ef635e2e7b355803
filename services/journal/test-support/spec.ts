/**
 * Given/when/then for the journal's deciders (Emmett's DeciderSpecification, over the rounds of a
 * run): given the events of the log (folded with the one evolve), the images looked at, the phase
 * the run is in, a failed step; when a command decides; then its decision — or the error it
 * refuses with. A scenario goes on across rounds: `.after(input)` is the next round once the
 * runner learned an input (commands/run-state.ts: Read, Statted, Acted, StepFailed), then its
 * decision, and so on; `thenNothingHappened()` ends one in which no image was touched and no event
 * appended. The given state is built as the runner would have learned it (run-state.ts
 * evolveRun). Pure: no server, no clock, no random id (the run's new uuids are U(0), U(1), …).
 * Tests only.
 */
import assert from "node:assert/strict";
import {
  DriverError,
  type ErrorName,
  type EventBody,
  type JournalCommand,
  type JournalEvent,
  journalContract,
  type ParsedRequest,
  type ResolvedCluster,
  resolveClusters,
  type StoredEvent,
} from "@csi/contracts";
import type { Command, Ctx, Decision, Failure, ImageRef, PoolInfo } from "../src/commands/decider.js";
import { deviceUse } from "../src/commands/deciders/devices.js";
import { evolveRun, initialRunState, type RunInput, type RunState, type StepFailed, viewOf } from "../src/commands/run-state.js";
import { type Address, type Aggregate, addressKey, addressOfRecord, foldFrom } from "../src/fold/evolve.js";
import type { ImageInfo } from "../src/pools/port.js";

/** The uuid a run makes as its i-th new aggregate. */
export const U = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;

export const CLUSTER = resolveClusters(
  {
    clusters: [
      {
        clusterID: "c1",
        pools: [
          { name: "default", id: 1 },
          { name: "fast", id: 2 },
        ],
      },
    ],
  },
  "/nonexistent",
).get("c1") as ResolvedCluster;
export const POOLS = new Map<string, PoolInfo>([
  ["default", { poolId: 1, maxImageBytes: 64 * 1024 ** 3, publishContext: (n) => ({ imagePath: `/pools/default/${n}` }) }],
  ["fast", { poolId: 2, maxImageBytes: 8 * 1024 ** 2, publishContext: (n) => ({ imagePath: `/pools/fast/${n}` }) }],
]);

/** A command's request as the journal gets it (parsed: defaults filled in). */
export function request<C extends JournalCommand>(command: C, body: Record<string, unknown>): ParsedRequest<C> {
  return journalContract[command].request.parse({ requestId: "r-spec", ...body }) as ParsedRequest<C>;
}

let lastSeq = 0;
/** Event bodies as the log stores them: stamped, with sequences after every one handed out so far. */
export function landed(...bodies: EventBody[]): StoredEvent[] {
  return bodies.map((body) => ({
    seq: ++lastSeq,
    subject: "s",
    event: { ...body, v: 1, requestId: "r-before", actor: { service: "journal", replica: "spec" }, time: "2026-01-01T00:00:00.000Z" } as JournalEvent,
  }));
}

export const image = (name: string, sizeBytes = 1024 * 1024, id = "img-1"): ImageInfo => ({ name, id, sizeBytes, readOnly: false });

interface Given {
  events: StoredEvent[];
  images: [ImageRef, ImageInfo | null][];
  claims: [string, number][];
  /** Events this run appended (also in `events`): the decider sees them as its own. */
  appended: StoredEvent[];
  /** Aggregates read with no event (their state is none), beside those the events name. */
  read: Address[];
  /** Aggregates read from their own subject of the log (View.fromLog). */
  logged: Address[];
  /** Images the run made itself (also in `images`). */
  made: ImageRef[];
  /** Volumes whose device reports the run read (View.devices: from the DeviceStateReported among `events`). */
  devicesRead: string[];
  /** The phase the run is in (before its failure, if one is given): "start" unless said. */
  phase?: string;
  failed?: Failure;
  /** The phase a read after the failure put the run in. */
  afterFailure?: string;
}

/** Start a spec from the log's events (all of them count as read under the run's locks). */
export function given(...events: StoredEvent[]) {
  return new Spec({ events, images: [], claims: [], appended: [], read: [], logged: [], made: [], devicesRead: [] });
}

const eventsOn = (a: Address, events: StoredEvent[]) =>
  events.filter((e) => {
    const b = addressOfRecord(e);
    return b !== undefined && addressKey(b) === addressKey(a);
  });

/** The run's state a Given stands for, as the runner would have learned it (commands/run-state.ts). */
function stateOf(g: Given): RunState {
  const appended = new Set(g.appended);
  const before = g.events.filter((e) => !appended.has(e));
  const folded = foldFrom(before, () => undefined).trails();
  const deviceEvents = (uuid: string) => g.events.map((e) => e.event).filter((e) => "uuid" in e && e.uuid === uuid);
  const inputs: RunInput[] = [
    {
      type: "Read",
      // The events' states first: an address also read empty keeps what its events say.
      states: [
        ...folded.map((t): [string, Aggregate | undefined] => [addressKey(t.address), t.states.at(-1)]),
        ...g.read.map((a): [string, undefined] => [addressKey(a), undefined]),
      ],
      claims: g.claims,
      devices: g.devicesRead.map((uuid) => [uuid, deviceUse(deviceEvents(uuid))]),
      log: g.logged.map((address) => ({ address, history: eventsOn(address, before) })),
    },
  ];
  const looked = g.images.filter(([ref]) => !g.made.includes(ref));
  if (looked.length > 0) inputs.push({ type: "Statted", images: looked });
  const made = g.images.filter(([ref]) => g.made.includes(ref));
  if (made.length > 0 || g.appended.length > 0) inputs.push({ type: "Acted", images: made, made: g.made, appended: g.appended });
  if (g.phase !== undefined) inputs[inputs.length - 1] = { ...(inputs.at(-1) as Exclude<RunInput, StepFailed>), phase: g.phase };
  if (g.failed) inputs.push({ type: "StepFailed", failure: g.failed });
  if (g.afterFailure !== undefined) inputs.push({ type: "Read", phase: g.afterFailure });
  return inputs.reduce(evolveRun, initialRunState());
}

class Spec {
  constructor(private readonly g: Given) {}

  /** Images the run looked at (null: absent). */
  images(...images: [ImageRef, ImageInfo | null][]) {
    return new Spec({ ...this.g, images: [...this.g.images, ...images] });
  }

  /** Images the run made itself (and so looked at). */
  made(...images: [ImageRef, ImageInfo][]) {
    return new Spec({ ...this.g, images: [...this.g.images, ...images], made: [...this.g.made, ...images.map(([ref]) => ref)] });
  }

  /** Events this run appended itself (they are part of the log too). */
  appended(...events: StoredEvent[]) {
    return new Spec({ ...this.g, events: [...this.g.events, ...events], appended: [...this.g.appended, ...events] });
  }

  /** Aggregates the run read and found empty (an aggregate the events name counts as read already). */
  read(...addresses: Address[]) {
    return new Spec({ ...this.g, read: [...this.g.read, ...addresses] });
  }

  /** Aggregates the run read from the log (their state there is what the events say, or none). */
  fromLog(...addresses: Address[]) {
    return new Spec({ ...this.g, read: [...this.g.read, ...addresses], logged: [...this.g.logged, ...addresses] });
  }

  /** The nodes' device reports of these volumes were read (they are the DeviceStateReported events given). */
  devicesRead(...uuids: string[]) {
    return new Spec({ ...this.g, devicesRead: [...this.g.devicesRead, ...uuids] });
  }

  nodeClaims(nodeId: string, n: number) {
    return new Spec({ ...this.g, claims: [...this.g.claims, [nodeId, n]] });
  }

  /** The phase the run is in (the `phase` its last step named); after `failed`, the phase a read after the failure put it in. */
  in(phase: string) {
    return new Spec(this.g.failed ? { ...this.g, afterFailure: phase } : { ...this.g, phase });
  }

  /** The step the run took in its phase failed: it is in phase "failed" (View.failedIn: the phase it was in). */
  failed(f: Failure) {
    return new Spec({ ...this.g, failed: f });
  }

  /** The decision of one round of `cmd` on this view; then, with `after`, the rounds that follow (a scenario). */
  when<R, P extends string>(cmd: Command<R, P>) {
    const state = stateOf(this.g) as RunState<P>;
    return new Round(cmd, state, [], state.inputs.length);
  }
}

/** A decision as a test expects it: its step's phase (`phase`) may be left out, and is then not compared. */
type Expected<R, P extends string> = Decision<R, P> | DistributiveOmit<Decision<R, P>, "phase">;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

const phaseOf = (d: Decision<unknown>) => ("phase" in d ? d.phase : undefined);
const shown = (d: Decision<unknown>, expected: object) => {
  if ("phase" in expected || !("phase" in d)) return d;
  const { phase: _, ...rest } = d;
  return rest;
};
/** What a decision or an input did to the pool or the log (nothing: an empty list). */
const happened = (x: Decision<unknown> | RunInput): unknown[] => {
  if ("type" in x) return x.type === "Acted" ? [...(x.made ?? []), ...(x.images ?? []).filter(([, i]) => i === null), ...(x.appended ?? [])] : [];
  const act = "act" in x ? x.act : undefined;
  return [...(act?.effects ?? []), ...(act?.events ?? []), ...(act?.cleanup ?? [])];
};

/**
 * One round of a scenario: its decision (`then`, `decision`, `thenThrows`); `after(input)` is the
 * next round, once the runner learned `input` (commands/run-state.ts: Read, Statted, Acted,
 * StepFailed; its `phase` left out: the phase the last decision named, as the runner does).
 * `thenNothingHappened()`: this round ends the run (a reply, or a failure without an undo), and no
 * round of the scenario took an effect or appended an event.
 */
class Round<R, P extends string> {
  constructor(
    private readonly cmd: Command<R, P>,
    private readonly state: RunState<P>,
    private readonly decided: Decision<R, P>[],
    /** How many of the state's inputs were given (the scenario's come after). */
    private readonly given: number,
  ) {}

  #decide(): Decision<R, P> {
    const ctx: Ctx = { cluster: CLUSTER, pools: POOLS, ids: U };
    const d = this.cmd.decide(viewOf(this.state), ctx);
    this.decided.push(d);
    return d;
  }

  // biome-ignore lint/suspicious/noThenProperty: given/when/then reads as the specification it is; this object is never awaited
  then(expected: Expected<R, P>): this {
    const d = this.#decide();
    assert.deepEqual(shown(d, expected), expected);
    return this;
  }

  /** The decision, for checks a deepEqual would make unreadable. */
  decision(): Decision<R, P> {
    return this.#decide();
  }

  thenThrows(code: ErrorName, message?: RegExp) {
    assert.throws(
      () => this.#decide(),
      (err: unknown) => {
        assert.ok(err instanceof DriverError, String(err));
        assert.equal(err.code, code, err.message);
        if (message) assert.match(err.message, message);
        return true;
      },
    );
  }

  /** The next round: the runner learned `input` (by default in the phase the last decision named). */
  after(input: RunInput<P>): Round<R, P> {
    const last = this.decided.at(-1);
    const phase = last && (phaseOf(last) as P | undefined);
    const learned = input.type === "StepFailed" || input.phase !== undefined || phase === undefined ? input : { ...input, phase };
    return new Round(this.cmd, evolveRun(this.state, learned), this.decided, this.given);
  }

  thenNothingHappened(): void {
    const d = this.#decide();
    assert.ok("reply" in d || ("fail" in d && !d.act), `the run goes on: ${JSON.stringify(d)}`);
    const done = [...this.decided.flatMap(happened), ...this.state.inputs.slice(this.given).flatMap(happened)];
    assert.deepEqual(done, [], "something happened");
  }
}
