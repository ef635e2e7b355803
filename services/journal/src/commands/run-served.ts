/**
 * A request is served once (commands/runner.ts): a caller that sends a command again (the
 * JournalClient, after a reconnect or a replica's silence: `resend`) must not have it run again once
 * a run of it was answered. Idempotence by name does not cover that: a create answered, then the
 * volume deleted by the CO's next call, then the late resend (held meanwhile behind the name's lock)
 * found the name free and made the volume again, which nobody was told of (ha.test's rolling
 * restart: "snapshots the CO was not told of", the name's records showing one request id twice).
 *
 * - While a run of a request works, it holds the request's lock (`request`), taken with its first
 *   read's locks: two runs of one request never overlap.
 * - A run that ends with an answer (a reply or an error; not one fenced off and run again) marks the
 *   request served (`served`, kept SERVED_TTL_MS) and keeps the answer (`answer`, ANSWER_TTL_MS)
 *   in the projection's write that releases its locks (one step: no resend can take the locks
 *   before the marks are there), before the reply.
 * - A resend checks the marks under its locks: with the answer kept, it answers that again (the
 *   reply its caller lost, or the same error) and does nothing; served with the answer gone (or too
 *   big to keep), Aborted. Not served (the first run died before answering), it runs as the first
 *   would have.
 *
 * A first send never looks at the mark: a caller that sends one request id twice on purpose (tests,
 * csictl's retries) gets what idempotence by name gives, as before.
 */
import { aborted, DriverError, type ErrorName } from "@csi/contracts";
import type { Mark } from "../projection/port.js";
import type { LockOn, ReadPlan } from "./decider.js";
import type { RunnerDeps } from "./run-deps.js";

/**
 * How long a request stays marked served: longer than any caller waits for its answer (the
 * JournalClient's 30 s, a CO's deadline) plus a lock wait, so that no resend of it can still arrive.
 */
export const SERVED_TTL_MS = 10 * 60_000;
/**
 * How long its answer is kept for a resend: while its caller still waits (the JournalClient gives
 * up after 30 s), twice over. Later resends, whose answer nobody waits for, are refused.
 */
export const ANSWER_TTL_MS = 60_000;
/** A larger answer is not kept (its resend is refused): the store holds many requests' answers. */
export const ANSWER_MAX_BYTES = 16 * 1024;
/** The mark's token: any run's mark is the same mark (taking it again extends it). */
const SERVED_TOKEN = "served";

const served = (requestId: string): LockOn => ({ kind: "served", requestId });
const answerOf = (requestId: string): LockOn => ({ kind: "answer", requestId });

/** What a run answered: its reply, or the error it answered with. */
export type Answer = { reply: unknown } | { error: { code: ErrorName; message: string } };

/** A run's first read plan with the request's lock beside its own (a plan without locks is a read: left alone). */
export function withRequestLock(plan: ReadPlan, requestId: string): ReadPlan {
  return plan.locks?.length ? { ...plan, locks: [...plan.locks, { kind: "request", requestId }] } : plan;
}

/**
 * A resend of a request already answered (checked under the run's locks): its kept answer (an error
 * answered is thrown again), or Aborted once that is gone; undefined when no run of it answered.
 */
export async function answerIfServed(d: RunnerDeps, requestId: string): Promise<{ reply: unknown } | undefined> {
  const [mark, kept] = await d.store.marksOf([served(requestId), answerOf(requestId)]);
  if (kept !== undefined) {
    const answer = JSON.parse(kept) as Answer;
    if ("error" in answer) throw new DriverError(answer.error.code, answer.error.message);
    return answer;
  }
  if (mark !== undefined) throw aborted("this request was answered already (the caller sent it again after losing the answer): retry it as a new request");
  return undefined;
}

/** The answer a run ends with, as kept: a reply, or a DriverError's code and message (any other error: not kept). */
export function answerOfRun(o: { reply?: unknown; err?: unknown }): Answer | undefined {
  if (o.err === undefined) return { reply: o.reply };
  return o.err instanceof DriverError ? { error: { code: o.err.code, message: o.err.message } } : undefined;
}

/** The marks an answered run sets as its locks go (CommandStore.applyAndUnlock's `marks`): served, and the answer if it is small enough. */
export function servedMarks(requestId: string, answer: Answer | undefined): Mark[] {
  const marks: Mark[] = [{ lock: served(requestId), token: SERVED_TOKEN, ttlMs: SERVED_TTL_MS }];
  const kept = answer && JSON.stringify(answer);
  if (kept !== undefined && Buffer.byteLength(kept) <= ANSWER_MAX_BYTES) marks.push({ lock: answerOf(requestId), token: kept, ttlMs: ANSWER_TTL_MS });
  return marks;
}
