/**
 * The one runner of every journal command (commands/decider.ts says what a command is):
 *
 *   lock + read  →  decide  →  read more | stat images | effects then fenced appends  →  decide …  →  reply
 *   and at the end, whatever happened: the projection written from the fold and the locks released, in one round trip.
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
import { randomBytes, randomUUID } from "node:crypto";
import { type Actor, aborted, DriverError, type ResolvedCluster, type StoredEvent, subjects } from "@csi/contracts";
import { retry } from "@csi/runtime";
import type { Logger } from "pino";
import { type Address, type Aggregate, addressKey, addressOf, endsAggregate, Fold, foldOne, liveRecord, startsAfresh } from "../fold/evolve.js";
import { imageOwner, KINDS, subjectOf } from "../fold/kinds.js";
import type { EventLog } from "../log/port.js";
import { AppendError, isFenced, isUncertain } from "../log/port.js";
import { eventsOf } from "../log/records.js";
import type { ImageInfo, ImageOwner, PoolBackend } from "../pools/port.js";
import type { CommandStore, Reading } from "../projection/port.js";
import { type Act, type Command, type Ctx, type Effect, type Failure, type ImageRef, imageKey, type LockOn, type ReadPlan, type View } from "./decider.js";
import { type DeviceUse, deviceUse, type NodeHolding, reconcileHolds } from "./deciders/devices.js";
import { poolOf } from "./deciders/volumes.js";

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

/** Runs of one command fenced off before it gives up (see the top). */
const FENCED_ATTEMPTS = 3;
/** Rounds of one run at most: a decider that never answers is a bug, not a wait. */
const MAX_ROUNDS = 32;

export async function run<R>(deps: RunnerDeps, cmd: Command<R>): Promise<R> {
  const down = deps.unavailable?.();
  if (down) throw new DriverError("Unavailable", down);
  for (let attempt = 1; ; attempt++) {
    const r = new Run(deps, cmd);
    try {
      const result = await r.go();
      // The commit point is the log's ack; the reply still waits for the projection (one round
      // trip that also releases the locks), so whoever reads after the reply sees what it was told.
      await r.finish();
      if (r.failed?.uncertain) await caughtUp(deps, cmd.requestId);
      return result;
    } catch (err) {
      await r.finish(err); // catches up after a fence conflict
      if (!isFenced(err) || attempt >= FENCED_ATTEMPTS) throw err;
      deps.logger.info({ requestId: cmd.requestId, attempt }, "fenced off: caught up with the log, deciding again");
    }
  }
}

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
    throw new DriverError("Unavailable", "the event log holds the answer but the projection could not catch up yet; retry");
  }
}

/** A lock someone else holds (retried until the bounded wait is over, then Aborted). */
class LockBusy extends Error {
  constructor(readonly lock: LockOn) {
    super("lock busy");
  }
}

class Run<R> implements View {
  readonly #token = randomBytes(16).toString("hex");
  readonly #fold = new Fold();
  readonly #images = new Map<string, ImageInfo | null>();
  /** Images this run made: an orphan if another writer ended their aggregate meanwhile. */
  readonly made: ImageRef[] = [];
  readonly #held: LockOn[] = [];
  /** Aggregates read from their own subject of the log in this run (View.fromLog). */
  readonly #logged = new Set<string>();
  readonly #claims = new Map<string, number>();
  readonly #devices = new Map<string, DeviceUse>();
  readonly #ids: string[] = [];
  readonly #ctx: Ctx;
  #renewTimer?: NodeJS.Timeout;
  readonly appended: StoredEvent[] = [];
  failed?: Failure;

  constructor(
    private readonly d: RunnerDeps,
    private readonly cmd: Command<R>,
  ) {
    this.#ctx = { cluster: d.cluster, pools: d.pools, ids: (i) => (this.#ids[i] ??= randomUUID()) };
  }

  state(a: Address) {
    return this.#fold.state(a);
  }
  has(a: Address) {
    return this.#fold.has(a);
  }
  fromLog(a: Address) {
    return this.#logged.has(addressKey(a));
  }
  image(ref: ImageRef) {
    const key = imageKey(ref);
    return this.#images.has(key) ? this.#images.get(key) : undefined;
  }
  nodeClaims(nodeId: string) {
    return this.#claims.get(nodeId) ?? 0;
  }
  devices(uuid: string) {
    return this.#devices.get(uuid);
  }

  async go(): Promise<R> {
    const first = this.cmd.first;
    await this.#read(typeof first === "function" ? first(this.#ctx) : first);
    let undoRetries = UNDO_RETRIES;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const next = this.cmd.decide(this, this.#ctx);
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
        if (undo) this.d.logger.warn({ err: undo, requestId: this.cmd.requestId }, "undo failed");
        if (isFenced(next.fail)) await this.#dropOrphans();
        throw next.fail;
      }
      if ("read" in next) await (this.failed ? this.#readAfterFailure(next.read, this.failed) : this.#read(next.read));
      else if (this.failed)
        throw this.failed.error; // told of a failure, a decider reads the log, replies or fails
      else if ("stat" in next) await this.#stat(next.stat);
      else await this.#act(next.act).catch((err: unknown) => this.#failed(err));
    }
    throw new DriverError("Internal", `${this.cmd.requestId}: no answer after ${MAX_ROUNDS} rounds`);
  }

  #failed(err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    const step = (err as { step?: Failure["step"] }).step ?? "append";
    const effect = error instanceof EffectFailed ? { effect: error.effect } : {};
    this.failed = { step, ...effect, error: error instanceof EffectFailed ? error.cause : error, fenced: isFenced(err), uncertain: isUncertain(err) };
  }

  /**
   * A read the decider needs to undo a failed step: the log it reads is often what failed (a stream
   * leader lost: a new one within seconds), so it is tried again for up to UNDO_READ_WAIT_MS before
   * the run gives up and fails with the step's own error (what is left is for the retry and gc).
   */
  async #readAfterFailure(plan: ReadPlan, failed: Failure): Promise<void> {
    try {
      await retry(() => this.#read(plan), {
        tries: Number.POSITIVE_INFINITY,
        deadline: Date.now() + UNDO_READ_WAIT_MS,
        firstDelayMs: 100,
        maxDelayMs: 250,
        jitter: 0.2,
        retryIf: (err) => err instanceof DriverError && err.code === "Unavailable",
      });
    } catch (err) {
      this.d.logger.warn({ err, requestId: this.cmd.requestId }, "could not read the log to undo a failed step");
      throw failed.error;
    }
  }

  /** The aggregates of an act's events, read again from their subjects of the log (every record past what the run knows folded in). */
  async #reread(act: Act): Promise<void> {
    const addresses = new Map<string, Address>();
    for (const body of act.events ?? []) {
      const a = addressOf(body);
      if (a) addresses.set(addressKey(a), a);
    }
    await this.#read({ fromLog: [...addresses.values()] });
  }

  // ---------------------------------------------------------------- reads

  async #read(plan: ReadPlan): Promise<void> {
    // The nodes' reports are read beside the lock + read, in the same wave: no new hold can begin
    // meanwhile without a claim, which the lock + read sees.
    const devices = Promise.all((plan.devices ?? []).map((uuid) => this.#readDevices(uuid)));
    // Handled at once (it is awaited below): a device read that fails while the lock + read still
    // runs would otherwise be an unhandled rejection, which ends the process (test/runner-device-read.test.ts).
    devices.catch(() => {});
    if (plan.locks?.length || plan.states?.length || plan.nodeClaims?.length) {
      const read = await this.#lockAndRead(plan).finally(() => devices.catch(() => {}));
      for (const [key, s] of read.states) this.#fold.know(key, s);
      for (const [node, n] of read.nodeClaims) this.#claims.set(node, n);
    }
    await devices;
    for (const a of plan.fromLog ?? []) {
      const history = await this.d.log.history([this.#subject(a)]);
      // An aggregate this run's own events changed: what the log has past them is folded in (evolve
      // skips what the fold has); otherwise the log's fold replaces what the projection said.
      if (this.#fold.touched(a)) this.#fold.apply(history);
      else this.#fold.know(a, foldOne(a, undefined, history), true);
      this.#logged.add(addressKey(a));
    }
  }

  /** The nodes' reports of a volume, corrected by the registrations of the nodes they name (commands/deciders/devices.ts). */
  async #readDevices(uuid: string): Promise<void> {
    const records = await this.d.log.history([subjects.deviceEvents(this.d.cluster.clusterID, uuid)]);
    const use = deviceUse(eventsOf(records).map((e) => e.event));
    const regs = use.holds.length > 0 && this.d.heartbeats ? await this.d.heartbeats(use.holds.map((h) => h.nodeId)) : new Map();
    this.#devices.set(uuid, reconcileHolds(use, { clusterID: this.d.cluster.clusterID, uuid }, regs));
  }

  #subject(a: Address): string {
    return a.kind === "name"
      ? KINDS[a.of].nameEvents(this.d.cluster.clusterID, this.d.cluster.instance, a.name)
      : KINDS[a.kind].events(this.d.cluster.clusterID, a.uuid);
  }

  /** Take the plan's locks and read; again after Redis came back; after waiting for a rebuild if the projection is incomplete. */
  async #lockAndRead(plan: ReadPlan): Promise<Reading> {
    const locks = plan.locks ?? [];
    for (;;) {
      await this.d.projector.current();
      const read = await this.#take(plan);
      if (this.d.projector.distrusted) {
        await this.#release([...locks, ...(read.locked ?? [])]); // Redis came back while we read (e.g. a Sentinel failover): read again once caught up
        continue;
      }
      if (read.complete) return read;
      // The projection is flushed or being rebuilt: wait for it (bounded → Unavailable), then read again.
      await this.#release([...locks, ...(read.locked ?? [])]);
      await this.d.projector.ready();
    }
  }

  async #take(plan: ReadPlan): Promise<Reading> {
    const attempt = async () => {
      const res = await this.d.store.lockAndRead(this.#token, this.d.lockTtlMs, plan);
      if (!res.ok) throw new LockBusy(res.busy);
      const taken = [...(plan.locks ?? []), ...(res.read.locked ?? [])];
      this.#held.push(...taken);
      if (taken.length > 0) this.#startRenewing();
      return res.read;
    };
    const started = performance.now();
    const waited = (outcome: "acquired" | "busy") => this.d.observeLockWait?.((performance.now() - started) / 1000, outcome);
    try {
      const read = await retry(attempt, {
        tries: Number.POSITIVE_INFINITY,
        deadline: Date.now() + this.d.lockWaitMs,
        firstDelayMs: 1,
        maxDelayMs: 50,
        jitter: 1,
        retryIf: (err) => err instanceof LockBusy,
      });
      waited("acquired");
      return read;
    } catch (err) {
      if (!(err instanceof LockBusy)) throw err;
      waited("busy");
      const what = err.lock.kind === "name" ? "name" : err.lock.kind;
      throw aborted(`an operation on the same ${what} is in progress, retry`);
    }
  }

  async #stat(refs: ImageRef[]): Promise<void> {
    await Promise.all(
      refs.map(async (ref) => {
        this.#images.set(imageKey(ref), (await this.#pool(ref.pool).statImage(ref.imageName)) ?? null);
      }),
    );
  }

  #pool(name: string): PoolBackend {
    return poolOf(this.d.pools, this.d.cluster.clusterID, name);
  }

  // ---------------------------------------------------------------- acts

  /** The act's effects (at once; the first failure is the act's), then its events, then its cleanup. */
  async #act(act: Act): Promise<void> {
    await this.#effects(act.effects);
    if (act.events?.length) await this.#append(act.events);
    await this.#effects(act.cleanup);
  }

  async #effects(effects: Effect[] = []): Promise<void> {
    const done = await Promise.allSettled(effects.map((e) => this.#effect(e)));
    const i = done.findIndex((x) => x.status === "rejected");
    const failed = done[i];
    if (failed?.status === "rejected") throw new EffectFailed(failed.reason, effects[i] as Effect);
  }

  async #effect(e: Effect): Promise<void> {
    const ref = { pool: e.pool, imageName: e.imageName };
    if (e.op === "delete") {
      const pools = e.pool === "*" ? [...this.d.pools.values()] : [this.#pool(e.pool)];
      for (const p of pools)
        await p.deleteImage(e.imageName, { ...(e.copied === undefined ? {} : { copied: e.copied }), ...(e.quarantine ? { quarantine: true } : {}) });
      this.#images.set(imageKey(ref), null);
      await this.d.afterEffect?.(e);
      return;
    }
    const pool = this.#pool(e.pool);
    const owner = e.op === "resize" ? undefined : this.#owner(e.imageName, e.name);
    // A copy is the one long step of a command (seconds to minutes): said when it starts.
    if (e.op === "clone" || e.op === "snapshot")
      this.d.logger.info({ requestId: this.cmd.requestId, op: e.op, pool: e.pool, from: e.from, imageName: e.imageName, name: e.name }, "copying an image");
    const made =
      e.op === "create"
        ? await pool.createImage(e.imageName, e.sizeBytes, owner)
        : e.op === "clone"
          ? await pool.cloneImage(e.from, e.imageName, e.sizeBytes, owner)
          : e.op === "snapshot"
            ? await pool.snapshotImage(e.from, e.imageName, owner)
            : await pool.resizeImage(e.imageName, e.sizeBytes);
    this.#images.set(imageKey(ref), made);
    if (e.op !== "resize") this.made.push(ref);
    await this.d.afterEffect?.(e);
  }

  /** Whose image this is (the aggregate its name says, with its request name): written on the image where the pool can. */
  #owner(imageName: string, requestName?: string): ImageOwner | undefined {
    const a = imageOwner(imageName);
    if (!a) return undefined;
    const name = requestName ?? liveRecord(this.#fold.state(a), a.kind)?.name;
    return { ...a, clusterID: this.d.cluster.clusterID, ...(name ? { name } : {}) };
  }

  /**
   * Append events: those on different subjects together, those on one subject in order, each fenced
   * on the fold's sequence — except one write's follow-ups ("One write", at the top).
   */
  async #append(bodies: Act["events"] & {}): Promise<void> {
    const waves = this.#waves(bodies);
    const meta = { requestId: this.cmd.requestId, actor: this.d.actor, time: this.d.now().toISOString() };
    for (const wave of waves) {
      const list = [];
      for (const { subject, body, followUp } of wave) {
        const a = addressOf(body);
        // An aggregate the run never read (its record lost from the projection) is read from the log:
        // its state and fence. A reservation of a fresh uuid starts its aggregate: its fence is 0.
        if (a && !followUp && !this.#fold.has(a) && !startsAfresh(body)) await this.#read({ fromLog: [a] });
        const fence = a && !followUp ? { expectedSeq: this.#fold.state(a)?.seq ?? 0 } : {};
        list.push({ subject, body, ...fence });
      }
      try {
        this.#landed(await this.d.log.appendAll(list, meta));
      } catch (err) {
        if (err instanceof AppendError) this.#landed(err.landed.filter((e) => e !== undefined));
        // An append without an answer may still land: the projection cannot know, so the next
        // command catches up with the log before it reads (nats-server before 2.10 does not enforce
        // an expected subject sequence of 0 on replicated streams: nats-server#5644).
        if (isUncertain(err)) this.d.projector.distrust();
        throw err;
      }
    }
  }

  /**
   * The events in waves: one wave per position on a subject (the first event of every subject, then
   * the second …), each wave sent once the one before landed (its fences known). An event that
   * follows the start of a fresh aggregate (a reservation of a new uuid, fenced on 0) goes in the
   * start's wave, right behind it, as a follow-up without a fence of its own.
   */
  #waves(bodies: Act["events"] & {}) {
    const waves: { subject: string; body: (typeof bodies)[number]; followUp: boolean }[][] = [];
    const next = new Map<string, number>();
    const fresh = new Map<string, number>();
    for (const body of bodies) {
      const subject = subjectOf(body, this.d.cluster.clusterID, this.d.cluster.instance);
      const a = addressOf(body);
      const started = fresh.get(subject);
      const i = started ?? next.get(subject) ?? 0;
      if (started === undefined) next.set(subject, i + 1);
      if (started === undefined && a && a.kind !== "name" && startsAfresh(body) && !liveOrEnded(this.#fold.state(a))) fresh.set(subject, i);
      const wave = waves[i] ?? [];
      waves[i] = wave;
      wave.push({ subject, body, followUp: started !== undefined });
      if (body.type === "ReservationUndone")
        this.d.logger.warn({ kind: body.kind, uuid: body.uuid, reason: body.reason, requestId: this.cmd.requestId }, "undoing a reservation");
    }
    return waves;
  }

  #landed(events: StoredEvent[]): void {
    this.#fold.apply(events);
    this.appended.push(...events);
  }

  /** After being fenced off: an image this run made whose aggregate another writer ended is an orphan (named after our uuid): remove it. */
  async #dropOrphans(): Promise<void> {
    for (const ref of this.made) {
      const owner = imageOwner(ref.imageName);
      if (owner && (await this.#ended(owner)))
        await this.#pool(ref.pool)
          .deleteImage(ref.imageName)
          .catch(() => {});
    }
  }

  /** Whether an aggregate's log ends with its end (deleted or undone), foreign records aside; false when unsure. */
  async #ended(a: Address): Promise<boolean> {
    const history = await this.d.log.history([this.#subject(a)]).catch(() => []);
    const last = eventsOf(history).at(-1);
    return !!last && endsAggregate(last);
  }

  // ---------------------------------------------------------------- the end

  /** Write the projection from the fold and release every lock (one round trip); catch up after a fence conflict. */
  async finish(err?: unknown): Promise<void> {
    clearInterval(this.#renewTimer);
    const locks = this.#held.splice(0);
    const trails = this.#fold.trails();
    try {
      // Nothing appended and no lock held (a command refused before it took any): no round trip.
      if ((trails.length > 0 || locks.length > 0) && (await this.d.store.applyAndUnlock(trails, locks, this.#token)) < 0 && trails.length > 0) {
        // The projection was flushed or is being rebuilt: nothing was written (never into a half
        // projection). The rebuild replays these events; write them again once it is complete so
        // a read after the reply shows them.
        await this.d.projector.ready();
        await this.d.store.applyAndUnlock(trails, [], this.#token);
      }
    } catch (applyErr) {
      // The events are in the log; the projector replays them. Locks expire by TTL.
      if (trails.length > 0) this.d.logger.error({ err: applyErr }, "could not apply events after append");
      else this.d.logger.warn({ err: applyErr, requestId: this.cmd.requestId }, "could not release locks: they expire by their TTL");
    }
    this.d.observeFold?.(this.appended.length, this.#fold.evolutions);
    if (isFenced(err)) await this.d.projector.catchUp().catch(() => {});
  }

  async #release(locks: LockOn[]): Promise<void> {
    if (locks.length === 0) return;
    await this.d.store.release(locks, this.#token);
    for (const l of locks) this.#held.splice(this.#held.indexOf(l), 1);
  }

  #startRenewing(): void {
    if (this.#renewTimer) return;
    const every = Math.max(50, Math.floor(this.d.lockTtlMs / 3));
    this.#renewTimer = setInterval(() => {
      for (const l of this.#held) {
        this.d.store.renew(l, this.#token, this.d.lockTtlMs).then(
          (ok) => ok || this.d.logger.warn({ lock: l }, "lock lost while working; appends stay fenced by sequence"),
          () => {},
        );
      }
    }, every);
    this.#renewTimer.unref();
  }
}

/** An effect's failure (told to the decider as an effect step's). */
class EffectFailed extends Error {
  readonly step = "effect";
  constructor(
    override readonly cause: Error,
    readonly effect: Effect,
  ) {
    super(cause?.message ?? String(cause));
  }
}

/** A state the log has for an aggregate (live, ended, or a name at any sequence): its next event is fenced on it, not on 0. */
const liveOrEnded = (s: Aggregate | undefined) => s !== undefined && s.seq > 0;

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
