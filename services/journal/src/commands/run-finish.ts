/**
 * The end of a run (commands/runner.ts): the projection written from the fold and the locks
 * released, in one round trip, whatever happened; after a fence, the images this run made whose
 * aggregate another writer ended removed (orphans).
 */
import { type Address, endsAggregate } from "../fold/evolve.js";
import { imageOwner } from "../fold/kinds.js";
import { eventsOf } from "../fold/log-record.js";
import { isFenced } from "../log/port.js";
import type { LockOn } from "./decider.js";
import type { RunIO } from "./run-deps.js";
import { poolIn } from "./run-effects.js";
import { type RunLocks, subjectOfAddress } from "./run-read.js";
import { answerOfRun, servedMarks } from "./run-served.js";

/**
 * Write the projection from the fold and release every lock (one round trip); catch up after a
 * fence conflict. `answered`: the run ends with its answer (`reply`, or `err`) — the request is
 * marked served and its answer kept in the same step (run-served.ts), before the reply.
 *
 * Whether the projection holds what the run appended: false when neither that write nor a
 * catch-up from the log after it got through (Redis unreachable). A reply must not go out then:
 * another replica's next read (a snapshot of the volume just created) would not find what it told.
 */
export async function finish(io: RunIO, locks: RunLocks, o: { err?: unknown; answered?: boolean; reply?: unknown } = {}): Promise<boolean> {
  const { d, state } = io;
  const err = o.err;
  const held = locks.surrender();
  const trails = state.fold.trails();
  const marks = o.answered && held.length > 0 ? servedMarks(io.requestId, answerOfRun(o)) : [];
  let applied = true;
  try {
    // Nothing appended and no lock held (a command refused before it took any): no round trip.
    if ((trails.length > 0 || held.length > 0) && (await d.store.applyAndUnlock(trails, held, locks.token, marks)) < 0 && trails.length > 0) {
      // The projection was flushed or is being rebuilt: nothing was written (never into a half
      // projection). The rebuild replays these events; write them again once it is complete so
      // a read after the reply shows them.
      await d.projector.ready();
      await d.store.applyAndUnlock(trails, [], locks.token);
    }
  } catch (applyErr) {
    if (trails.length === 0) {
      d.logger.warn({ err: applyErr, requestId: io.requestId }, "could not release locks: released once Redis answers, or they expire by their TTL");
      releaseLater(io, held, locks.token);
    } else {
      // The events are in the log: a catch-up from it writes them (whoever's write got through
      // first, the watermark makes the other a no-op). The locks go either way (the name's next
      // run is fenced off by the log if the projection is still behind it); the marks only with a
      // projection that holds what they answer.
      applied = await d.projector.catchUp().then(
        () => true,
        () => false,
      );
      const released = await d.store.applyAndUnlock([], held, locks.token, applied ? marks : []).then(
        () => true,
        () => false,
      );
      d.logger[applied ? "warn" : "error"](
        { err: applyErr, requestId: io.requestId, released },
        applied ? "could not apply events after append: caught up from the log" : "could not apply events after append, nor catch up from the log",
      );
      if (!released) releaseLater(io, held, locks.token);
    }
  }
  d.observeFold?.(state.appended.length, state.fold.evolutions);
  if (isFenced(err)) await d.projector.catchUp().catch(() => {});
  return applied;
}

/** How often a release that did not get through is tried again. */
const RELEASE_AGAIN_MS = 25;

/**
 * Locks whose release did not get through (Redis away for a moment: a Sentinel failover's
 * reconnect) released in the background as soon as Redis answers, until their TTL would free them
 * anyway: the CO's retry of the same name need not wait out the TTL (a CreateSnapshot's retry
 * waited ~0.9 s for its first try's lock in ha.test's planned failover). A release is by the run's
 * token: it never frees another run's lock; one that already got through (its reply lost) is a
 * no-op.
 */
function releaseLater(io: RunIO, held: LockOn[], token: string): void {
  if (held.length === 0) return;
  const until = Date.now() + io.d.lockTtlMs;
  const again = () => {
    if (Date.now() >= until) return;
    io.d.store.release(held, token).catch(() => setTimeout(again, RELEASE_AGAIN_MS).unref());
  };
  setTimeout(again, RELEASE_AGAIN_MS).unref();
}

/** After being fenced off: an image this run made whose aggregate another writer ended is an orphan (named after our uuid): remove it. */
export async function dropOrphans(io: RunIO): Promise<void> {
  for (const ref of io.state.made) {
    const owner = imageOwner(ref.imageName);
    if (owner && (await ended(io, owner)))
      await poolIn(io.d, ref.pool)
        .deleteImage(ref.imageName)
        .catch(() => {});
  }
}

/** Whether an aggregate's log ends with its end (deleted or undone), foreign records aside; false when unsure. */
async function ended(io: RunIO, a: Address): Promise<boolean> {
  const history = await io.d.log.history([subjectOfAddress(io.d, a)]).catch(() => []);
  const last = eventsOf(history).at(-1);
  return !!last && endsAggregate(last);
}
