/**
 * The runner's reads (commands/runner.ts): the locks — all of a read's or none, with a bounded
 * wait (then Aborted), renewed while the run lasts, released with the projection's write — and
 * the read under them, learned as one Read (commands/run-state.ts). A read waits for a projection
 * being rebuilt, and is made again after Redis came back.
 */
import { randomBytes } from "node:crypto";
import { aborted, subjects } from "@csi/contracts";
import { retry } from "@csi/runtime";
import type { Address } from "../fold/evolve.js";
import { KINDS } from "../fold/kinds.js";
import { eventsOf } from "../fold/log-record.js";
import type { Reading } from "../projection/port.js";
import type { LockOn, ReadPlan } from "./decider.js";
import { type DeviceUse, deviceUse, reconcileHolds } from "./deciders/devices.js";
import type { RunIO, RunnerDeps } from "./run-deps.js";
import type { Read } from "./run-state.js";

/** A lock someone else holds (retried until the bounded wait is over, then Aborted). */
class LockBusy extends Error {
  constructor(readonly lock: LockOn) {
    super("lock busy");
  }
}

/** The locks of one run: taken with its reads, renewed while it lasts, handed to the projection's write at its end. */
export class RunLocks {
  readonly token = randomBytes(16).toString("hex");
  readonly #held: LockOn[] = [];
  #renewTimer?: NodeJS.Timeout;

  constructor(private readonly d: RunnerDeps) {}

  /** Take the plan's locks and read; again after Redis came back; after waiting for a rebuild if the projection is incomplete. */
  async lockAndRead(plan: ReadPlan): Promise<Reading> {
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

  /** Stop renewing: every lock still held, to be released with the projection's write. */
  surrender(): LockOn[] {
    clearInterval(this.#renewTimer);
    return this.#held.splice(0);
  }

  async #take(plan: ReadPlan): Promise<Reading> {
    const attempt = async () => {
      const res = await this.d.store.lockAndRead(this.token, this.d.lockTtlMs, plan);
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
      if (err.lock.kind === "request") throw aborted("this request is being answered by another run of it (the caller sent it again), retry");
      throw aborted(`an operation on the same ${err.lock.kind} is in progress, retry`);
    }
  }

  async #release(locks: LockOn[]): Promise<void> {
    if (locks.length === 0) return;
    await this.d.store.release(locks, this.token);
    for (const l of locks) this.#held.splice(this.#held.indexOf(l), 1);
  }

  #startRenewing(): void {
    if (this.#renewTimer) return;
    const every = Math.max(50, Math.floor(this.d.lockTtlMs / 3));
    this.#renewTimer = setInterval(() => {
      for (const l of this.#held) {
        this.d.store.renew(l, this.token, this.d.lockTtlMs).then(
          (ok) => ok || this.d.logger.warn({ lock: l }, "lock lost while working; appends stay fenced by sequence"),
          () => {},
        );
      }
    }, every);
    this.#renewTimer.unref();
  }
}

/** Read a plan (under its locks) and learn what it brought, in `phase` once learned (none: the phase stays). */
export async function read(io: RunIO, locks: RunLocks, plan: ReadPlan, phase?: string): Promise<void> {
  // The nodes' reports are read beside the lock + read, in the same wave: no new hold can begin
  // meanwhile without a claim, which the lock + read sees.
  const devices = Promise.all((plan.devices ?? []).map((uuid) => readDevices(io.d, uuid)));
  // Handled at once (it is awaited below): a device read that fails while the lock + read still
  // runs would otherwise be an unhandled rejection, which ends the process (test/runner-device-read.test.ts).
  devices.catch(() => {});
  const learned: Read = { type: "Read" };
  if (plan.locks?.length || plan.states?.length || plan.nodeClaims?.length) {
    const reading = await locks.lockAndRead(plan).finally(() => devices.catch(() => {}));
    learned.states = [...reading.states];
    learned.claims = [...reading.nodeClaims];
  }
  learned.devices = await devices;
  learned.log = [];
  for (const address of plan.fromLog ?? []) learned.log.push({ address, history: await io.d.log.history([subjectOfAddress(io.d, address)]) });
  io.learn(phase === undefined ? learned : { ...learned, phase });
}

/** The nodes' reports of a volume, corrected by the registrations of the nodes they name (commands/deciders/devices.ts). */
async function readDevices(d: RunnerDeps, uuid: string): Promise<[string, DeviceUse]> {
  const records = await d.log.history([subjects.deviceEvents(d.cluster.clusterID, uuid)]);
  const use = deviceUse(eventsOf(records).map((e) => e.event));
  const regs = use.holds.length > 0 && d.heartbeats ? await d.heartbeats(use.holds.map((h) => h.nodeId)) : new Map();
  return [uuid, reconcileHolds(use, { clusterID: d.cluster.clusterID, uuid }, regs)];
}

/** The subject of the log an aggregate's events are on. */
export function subjectOfAddress(d: RunnerDeps, a: Address): string {
  return a.kind === "name" ? KINDS[a.of].nameEvents(d.cluster.clusterID, d.cluster.instance, a.name) : KINDS[a.kind].events(d.cluster.clusterID, a.uuid);
}
