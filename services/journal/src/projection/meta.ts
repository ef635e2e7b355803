/**
 * The projection's own words, whatever store holds it: its meta (which rebuild made it, from which
 * log, how far it got, whether it is complete), what a rebuild begins over, and whether a
 * projection may be served (`judgeProjection`). Pure.
 */
import type { LogInfo } from "../log/port.js";

export interface ProjectionMeta {
  epoch?: string;
  log?: string;
  applied: number;
  complete: boolean;
}

export type Judgement = { ok: true } | { ok: false; reason: string };

/** What a rebuild begins over: any projection (`"force"`), or the one judged (its meta as read; undefined: none). */
export type RebuildOver = "force" | ProjectionMeta | undefined;

/** The epoch and complete mark a rebuild expects to find (what `begin_rebuild` compares), or undefined for "force". */
export function expectedMeta(over: RebuildOver): { epoch: string; complete: boolean } | undefined {
  return over === "force" ? undefined : { epoch: over?.epoch ?? "", complete: over?.complete === true };
}

const EPOCH = /^[0-9a-f]{32}$/;

export function isEpoch(s: string | undefined): s is string {
  return s !== undefined && EPOCH.test(s);
}

/**
 * Whether a projection may be served and caught up, or must be rebuilt from the first sequence.
 * A watermark behind the log is fine (catch-up applies the rest); ahead of it, or from another
 * log, the projection describes history this log does not have.
 */
export function judgeProjection(meta: ProjectionMeta | undefined, log: LogInfo): Judgement {
  if (!meta) return { ok: false, reason: "missing" };
  if (!meta.complete) return { ok: false, reason: "incomplete" };
  if (!isEpoch(meta.epoch)) return { ok: false, reason: "no valid epoch" };
  if (meta.log !== log.id) return { ok: false, reason: "built from another log" };
  if (!Number.isSafeInteger(meta.applied) || meta.applied < 0) return { ok: false, reason: "invalid watermark" };
  if (meta.applied > log.last) return { ok: false, reason: "watermark ahead of the log" };
  return { ok: true };
}
