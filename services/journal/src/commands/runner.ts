/**
 * The one runner of every journal command (commands/decider.ts says what a command is):
 *
 *   lock + read  →  decide  →  read more | stat images | effects then fenced appends  →  decide …  →  reply
 *   and at the end, whatever happened: the projection written from the fold and the locks released, in one round trip.
 *
 * A short loop: the decider decides on the view of the run's state; the step it asks for is taken
 * by its part (run-read.ts: locks and reads; run-effects.ts: image steps; run-appends.ts: fenced
 * waves; run-finish.ts: the projection's write and the locks' release); what the step learned
 * evolves the state (run-state.ts: Read, Statted, Acted, StepFailed), in the phase the decision
 * named. The parts:
 *
 * - Locks: all of a read's or none, with a bounded wait (then Aborted), renewed while the run
 *   lasts. A read waits for a projection being rebuilt, and is made again after Redis came back.
 * - Appends: each event fenced on its aggregate's sequence as the run sees it; events of one act
 *   on different subjects go together, events on one subject one after the other.
 * - The fold: every appended event is evolved once (fold/evolve.ts Fold); the decider's next
 *   round, the reply and the projection's writes all come from that one fold.
 * - One write: a create sends its whole reservation at once — the name, the record of a fresh uuid
 *   (fenced on 0) and, right behind the record on its subject, its *Created — and waits for the
 *   three acks together. The *Created has no fence of its own (JetStream before 2.12 cannot fence
 *   a message on the sequence of one not acknowledged yet); nobody else can address the uuid
 *   before the record lands, microseconds earlier in the same write, and the run holds its lock.
 *   docs/journal.md, "A create in three round trips", has the argument and the crash table.
 * - A failed step is told to the decider, which reads the log if it must, undoes what it must and
 *   fails (or answers, when the log shows that what failed landed after all). A run fenced off
 *   (another writer changed an aggregate first: the projection was behind the log) is run again
 *   after catching up, up to FENCED_ATTEMPTS, as a CO's retry would be, without the round trip.
 */
import { randomUUID } from "node:crypto";
import { DriverError } from "@csi/contracts";
import { retry } from "@csi/runtime";
import { type Address, addressKey, addressOf } from "../fold/evolve.js";
import { isFenced } from "../log/port.js";
import type { ImageInfo } from "../pools/port.js";
import type { Act, Command, Ctx, Failure, ImageRef, ReadPlan } from "./decider.js";
import { append } from "./run-appends.js";
import type { RunIO, RunnerDeps } from "./run-deps.js";
import { failureOf, poolIn, runEffects } from "./run-effects.js";
import { dropOrphans, finish } from "./run-finish.js";
import { RunLocks, read } from "./run-read.js";
import { answerIfServed, withRequestLock } from "./run-served.js";
import { evolveRun, initialRunState, type RunInput, type RunState, viewOf } from "./run-state.js";

export type { ProjectionGate, RunnerDeps } from "./run-deps.js";

/** Runs of one command fenced off before it gives up (see the top). */
const FENCED_ATTEMPTS = 3;
/** Rounds of one run at most: a decider that never answers is a bug, not a wait. */
const MAX_ROUNDS = 32;

export async function run<R>(deps: RunnerDeps, cmd: Command<R>): Promise<R> {
  const down = deps.unavailable?.();
  if (down) throw new DriverError("Unavailable", down);
  for (let attempt = 1; ; attempt++) {
    const r = new Run(deps, cmd);
    let result: R;
    try {
      result = await r.go();
    } catch (err) {
      const again = isFenced(err) && attempt < FENCED_ATTEMPTS;
      await finish(r, r.locks, { err, answered: !again }); // catches up after a fence conflict
      if (!again) throw err;
      deps.logger.info({ requestId: cmd.requestId, attempt }, "fenced off: caught up with the log, deciding again");
      continue;
    }
    // The commit point is the log's ack; the reply still waits for the projection (one round trip
    // that also releases the locks), so whoever reads after the reply sees what it was told.
    if (!(await finish(r, r.locks, { answered: true, reply: result }))) throw notInProjection();
    if (r.state.failed?.uncertain) await caughtUp(deps, cmd.requestId);
    return result;
  }
}

/** The answer is in the log, the projection could not be written: the CO's retry finds the answer (names and fences make it the same). */
const notInProjection = () => new DriverError("Unavailable", "the event log holds the answer but the projection could not catch up yet; retry");

/**
 * A run that answers although an append of it got no answer (the decider found in the log that it
 * landed): its events are in the log but not in the fold's writes, so the projection is caught up
 * before the reply — another replica's next read must see what this reply tells (the distrust
 * flag covers only this process's own next command). If the log cannot be read now, Unavailable:
 * the CO's retry finds the answer (names and fences make it the same).
 */
async function caughtUp(deps: RunnerDeps, requestId: string): Promise<void> {
  try {
    await deps.projector.catchUp();
  } catch (err) {
    deps.logger.warn({ err: String(err), requestId }, "answered after an append without an answer, but the projection could not catch up: Unavailable");
    throw notInProjection();
  }
}

/** One run of a command: its state, its locks, and the loop decide → step → evolve. */
class Run<R> implements RunIO {
  state: RunState = initialRunState();
  readonly locks: RunLocks;
  readonly requestId: string;
  readonly #ids: string[] = [];
  readonly #ctx: Ctx;

  constructor(
    readonly d: RunnerDeps,
    private readonly cmd: Command<R>,
  ) {
    this.locks = new RunLocks(d);
    this.requestId = cmd.requestId;
    this.#ctx = { cluster: d.cluster, pools: d.pools, ids: (i) => (this.#ids[i] ??= randomUUID()) };
  }

  learn(input: RunInput): void {
    this.state = evolveRun(this.state, input);
  }

  async go(): Promise<R> {
    const first = this.cmd.first;
    await this.#read(withRequestLock(typeof first === "function" ? first(this.#ctx) : first, this.requestId));
    const prior = this.cmd.resend ? await answerIfServed(this.d, this.requestId) : undefined;
    if (prior) return prior.reply as R; // the answer its caller lost, again: nothing run
    let undoRetries = UNDO_RETRIES;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const next = this.cmd.decide(viewOf(this.state), this.#ctx);
      if ("reply" in next) return next.reply;
      if ("fail" in next) {
        const undo =
          next.act &&
          (await this.#act(next.act).then(
            () => undefined,
            (err: unknown) => err,
          ));
        if (undo && isFenced(undo) && next.act && undoRetries-- > 0) {
          // The log moved on under the undo: read what it says now, and let the decider undo again.
          await this.#reread(next.act);
          continue;
        }
        if (undo) this.d.logger.warn({ err: undo, requestId: this.requestId }, "undo failed");
        if (isFenced(next.fail)) await dropOrphans(this);
        throw next.fail;
      }
      const failed = this.state.failed;
      if ("read" in next) await (failed ? this.#readAfterFailure(next.read, failed, next.phase) : this.#read(next.read, next.phase));
      else if (failed)
        throw failed.error; // told of a failure, a decider reads the log, replies or fails
      else if ("stat" in next) await this.#stat(next.stat, next.phase);
      else await this.#act(next.act, next.phase).catch((err: unknown) => this.learn({ type: "StepFailed", failure: failureOf(err) }));
    }
    throw new DriverError("Internal", `${this.requestId}: no answer after ${MAX_ROUNDS} rounds`);
  }

  #read(plan: ReadPlan, phase?: string): Promise<void> {
    return read(this, this.locks, plan, phase);
  }

  async #stat(refs: ImageRef[], phase: string): Promise<void> {
    const images = await Promise.all(
      refs.map(async (ref): Promise<[ImageRef, ImageInfo | null]> => [ref, (await poolIn(this.d, ref.pool).statImage(ref.imageName)) ?? null]),
    );
    this.learn({ type: "Statted", images, phase });
  }

  /**
   * The act's effects (at once; the first failure is the act's), then its events, then its
   * cleanup, each learned as it is done; the last (the cleanup's) puts the run in `phase`.
   */
  async #act(act: Act, phase?: string): Promise<void> {
    const effects = await runEffects(this, act.effects);
    if (effects.acted.images?.length) this.learn(effects.acted);
    if (effects.failed) throw effects.failed;
    if (act.events?.length) await append(this, act.events, (plan) => this.#read(plan));
    const cleanup = await runEffects(this, act.cleanup);
    if (cleanup.acted.images?.length || (phase !== undefined && !cleanup.failed))
      this.learn(cleanup.failed || phase === undefined ? cleanup.acted : { ...cleanup.acted, phase });
    if (cleanup.failed) throw cleanup.failed;
  }

  /**
   * A read the decider needs to undo a failed step: the log it reads is often what failed (a stream
   * leader lost: a new one within seconds), so it is tried again for up to UNDO_READ_WAIT_MS before
   * the run gives up and fails with the step's own error (what is left is for the retry and gc).
   */
  async #readAfterFailure(plan: ReadPlan, failed: Failure, phase: string): Promise<void> {
    try {
      await retry(() => this.#read(plan, phase), {
        tries: Number.POSITIVE_INFINITY,
        deadline: Date.now() + UNDO_READ_WAIT_MS,
        firstDelayMs: 100,
        maxDelayMs: 250,
        jitter: 0.2,
        retryIf: (err) => err instanceof DriverError && err.code === "Unavailable",
      });
    } catch (err) {
      this.d.logger.warn({ err, requestId: this.requestId }, "could not read the log to undo a failed step");
      throw failed.error;
    }
  }

  /** The aggregates of an act's events, read again from their subjects of the log (every record past what the run knows folded in); the phase stays. */
  async #reread(act: Act): Promise<void> {
    const addresses = new Map<string, Address>();
    for (const body of act.events ?? []) {
      const a = addressOf(body);
      if (a) addresses.set(addressKey(a), a);
    }
    await this.#read({ fromLog: [...addresses.values()] });
  }
}

/** A failed step's undo fenced off is tried again at most this often, each time after reading the log. */
const UNDO_RETRIES = 2;
/**
 * How long a run keeps trying to read the log it must undo by. A stream leader election takes 4–9 s
 * by nats-server's timeouts, but a loaded machine saw 14.4 s from a leader's SIGKILL to the new
 * leader's election; 12 s from the failed append (which now fails the moment the connection drops,
 * not 5 s later at its timeout) then gave up and left the image of an unanswered create for gc
 * (issue 39's leader-kill loop, run 2: "the pool holds exactly the live images"). Nobody waits for
 * the answer by then (the CO's deadline has passed); the name stays locked while it waits.
 */
const UNDO_READ_WAIT_MS = 60_000;
