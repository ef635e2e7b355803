/**
 * The fold up to a point of the log (a sequence, or a time): what audit.replay shows, what a
 * backup's fold and a restore's dry run read. Pure.
 */
import type { LogPoint } from "@csi/contracts";
import { foldInto, type States } from "./evolve.js";
import { eventsOf, isForeign, type LogRecord } from "./log-record.js";

/** A point of the log: up to a stream sequence, or the longest prefix whose events are not later than a time. */
export type Point = { seq: number } | { time: number };

export function pointOf(at: LogPoint): Point {
  return typeof at === "number" ? { seq: at } : { time: Date.parse(at) };
}

/** What a replay has folded: the states, and the last event folded. */
export interface Replayed {
  states: States;
  upTo: { seq: number; time?: string };
}

export const emptyReplay = (): Replayed => ({ states: new Map(), upTo: { seq: 0 } });

/**
 * Fold `events` (in log order, continuing `r`) while they are within `at`; returns false at the
 * first one past it (the caller stops reading there). The streaming form of `replayAt`. A foreign
 * record has no time: it never ends a prefix by time; `upTo` is the last event folded.
 */
export function replayInto(r: Replayed, events: Iterable<LogRecord>, at: Point): boolean {
  const inside: LogRecord[] = [];
  let more = true;
  for (const e of events) {
    if ("seq" in at ? e.seq > at.seq : !isForeign(e) && Date.parse(e.event.time) > at.time) {
      more = false;
      break;
    }
    inside.push(e);
  }
  foldInto(r.states, inside);
  const last = eventsOf(inside).at(-1);
  if (last) r.upTo = { seq: last.seq, time: last.event.time };
  return more;
}

/** The state of everything `events` (a log, or one aggregate's part of it) say, at `at`. */
export function replayAt(events: Iterable<LogRecord>, at: Point): Replayed {
  const r = emptyReplay();
  replayInto(r, events, at);
  return r;
}
