/**
 * The runner's appends (commands/runner.ts): each event fenced on its aggregate's sequence as the
 * run sees it; events of one act on different subjects go together, events on one subject one
 * after the other; each wave's stored events learned as an Acted (commands/run-state.ts), so the
 * next wave is fenced on them — except one write's follow-ups (runner.ts, "One write").
 */
import { type Aggregate, addressOf, startsAfresh } from "../fold/evolve.js";
import { subjectOf } from "../fold/kinds.js";
import { AppendError, isUncertain } from "../log/port.js";
import type { Act, ReadPlan } from "./decider.js";
import type { RunIO } from "./run-deps.js";

type Bodies = Act["events"] & {};

/** Append the events in waves; `read` reads an aggregate the run never read from the log (learned as any read). */
export async function append(io: RunIO, bodies: Bodies, read: (plan: ReadPlan) => Promise<void>): Promise<void> {
  const meta = { requestId: io.requestId, actor: io.d.actor, time: io.d.now().toISOString() };
  for (const wave of waves(io, bodies)) {
    const list = [];
    for (const { subject, body, followUp } of wave) {
      const a = addressOf(body);
      // An aggregate the run never read (its record lost from the projection) is read from the log:
      // its state and fence. A reservation of a fresh uuid starts its aggregate: its fence is 0.
      if (a && !followUp && !io.state.fold.has(a) && !startsAfresh(body)) await read({ fromLog: [a] });
      const fence = a && !followUp ? { expectedSeq: io.state.fold.state(a)?.seq ?? 0 } : {};
      list.push({ subject, body, ...fence });
    }
    try {
      io.learn({ type: "Acted", appended: await io.d.log.appendAll(list, meta) });
    } catch (err) {
      if (err instanceof AppendError) io.learn({ type: "Acted", appended: err.landed.filter((e) => e !== undefined) });
      // An append without an answer may still land: the projection cannot know, so the next
      // command catches up with the log before it reads (nats-server before 2.10 does not enforce
      // an expected subject sequence of 0 on replicated streams: nats-server#5644).
      if (isUncertain(err)) io.d.projector.distrust();
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
function waves(io: RunIO, bodies: Bodies) {
  const { clusterID, instance } = io.d.cluster;
  const out: { subject: string; body: Bodies[number]; followUp: boolean }[][] = [];
  const next = new Map<string, number>();
  const fresh = new Map<string, number>();
  for (const body of bodies) {
    const subject = subjectOf(body, clusterID, instance);
    const a = addressOf(body);
    const started = fresh.get(subject);
    const i = started ?? next.get(subject) ?? 0;
    if (started === undefined) next.set(subject, i + 1);
    if (started === undefined && a && a.kind !== "name" && startsAfresh(body) && !liveOrEnded(io.state.fold.state(a))) fresh.set(subject, i);
    const wave = out[i] ?? [];
    out[i] = wave;
    wave.push({ subject, body, followUp: started !== undefined });
    if (body.type === "ReservationUndone")
      io.d.logger.warn({ kind: body.kind, uuid: body.uuid, reason: body.reason, requestId: io.requestId }, "undoing a reservation");
  }
  return out;
}

/** A state the log has for an aggregate (live, ended, or a name at any sequence): its next event is fenced on it, not on 0. */
const liveOrEnded = (s: Aggregate | undefined) => s !== undefined && s.seq > 0;
