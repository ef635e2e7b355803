/**
 * The figures of a chaos run, from the operation and fault records: recovery after each fault,
 * the journal failover time, the slowest operation. Pure.
 */
import { type FaultKind, type FaultRecord, NODE_FAULTS } from "./faults.js";
import { CREATE_OPS, NODE_OPS, type OpRecord } from "./workload.js";

/**
 * Time from a fault to the end of the first successful operation that started after it and
 * depends on what was hit (node operations for node-agent faults, any operation otherwise);
 * undefined when no such operation followed.
 */
export function recoveryMs(f: FaultRecord, ops: readonly OpRecord[]): number | undefined {
  const next = ops
    .filter((o) => o.phase === "run" && o.ok && o.start >= f.at && (!NODE_FAULTS.has(f.kind) || NODE_OPS.has(o.kind)))
    .reduce<OpRecord | undefined>((best, o) => (!best || o.end < best.end ? o : best), undefined);
  return next ? next.end - f.at : undefined;
}

export interface Failover {
  fault: FaultRecord;
  /**
   * Until the creates that were in flight at the kill, and those started within `windowMs` after
   * it, had all answered (a create that started before an earlier fault was restored is left out).
   */
  ms: number;
  /** How many creates that counts, and how many of them failed. */
  creates: number;
  failed: number;
  /**
   * Another fault that was restored less than `windowMs` before this kill: the kill landed while
   * the system was still recovering from it (e.g. the killed replica was rebuilding the projection
   * after a FLUSHALL). Such a failover adds both recoveries; it is a figure, not held to the bound.
   */
  during?: FaultRecord;
}

/** For every journal SIGKILL that left ≥ 2 replicas running: how long creates took to get through. */
export function journalFailovers(faults: readonly FaultRecord[], ops: readonly OpRecord[], windowMs = 1000): Failover[] {
  return faults
    .filter((f) => f.kind === "journal-kill" && (f.journalsUp ?? 0) >= 2)
    .flatMap((f) => {
      // Creates that started while an earlier fault was still in effect measure that fault too: left out.
      const calmSince = Math.max(0, ...faults.filter((g) => g !== f && g.at <= f.at).map((g) => g.restoredAt ?? g.at));
      const creates = ops.filter((o) => o.phase === "run" && CREATE_OPS.has(o.kind) && o.end > f.at && o.start < f.at + windowMs && o.start >= calmSince);
      if (creates.length === 0) return [];
      const during = faults.find((g) => g !== f && g.at <= f.at && (g.restoredAt ?? g.at) > f.at - windowMs);
      return [
        {
          fault: f,
          ms: Math.max(...creates.map((o) => o.end - f.at)),
          creates: creates.length,
          failed: creates.filter((o) => !o.ok).length,
          ...(during ? { during } : {}),
        },
      ];
    });
}

export interface FaultFigures {
  kind: FaultKind;
  injected: number;
  /** Slowest recovery of this kind (undefined: no operation followed any of them). */
  slowestMs: number | undefined;
  /** Faults of this kind after which no dependent operation succeeded. */
  unrecovered: number;
  /** HA faults: from each fault until another node led the stream / was named master, ascending. */
  tookOverMs: number[];
  /** NATS freezes that froze the stream's leader. */
  ledStream: number;
}

export function faultFigures(kinds: readonly FaultKind[], faults: readonly FaultRecord[], ops: readonly OpRecord[]): FaultFigures[] {
  return kinds.map((kind) => {
    const mine = faults.filter((f) => f.kind === kind);
    const rec = mine.map((f) => recoveryMs(f, ops));
    const known = rec.filter((r): r is number => r !== undefined);
    return {
      kind,
      injected: mine.length,
      slowestMs: known.length ? Math.max(...known) : undefined,
      unrecovered: rec.length - known.length,
      tookOverMs: mine.flatMap((f) => (f.tookOverMs === undefined ? [] : [f.tookOverMs])).sort((a, b) => a - b),
      ledStream: mine.filter((f) => f.ledStream).length,
    };
  });
}

/** The journal SIGKILLs by what the killed replica had in flight at the last look before the kill. */
export interface KillFigures {
  kills: number;
  /** A create (volume.create, snapshot.create) was in flight on the killed replica. */
  withCreate: number;
  /** Some other command, no create. */
  withOtherCommand: number;
  idle: number;
  /** Failover (journalFailovers) of the kills with a create in flight: how many were measured, the slowest. */
  measured: number;
  slowestMs: number | undefined;
}

export function journalKillFigures(faults: readonly FaultRecord[], failovers: readonly Failover[]): KillFigures {
  const kills = faults.filter((f) => f.kind === "journal-kill" && f.target !== "?");
  const withCreate = kills.filter((f) => (f.inFlight?.creates ?? 0) > 0);
  const timed = failovers.filter((x) => (x.fault.inFlight?.creates ?? 0) > 0);
  return {
    kills: kills.length,
    withCreate: withCreate.length,
    withOtherCommand: kills.filter((f) => (f.inFlight?.creates ?? 0) === 0 && (f.inFlight?.commands ?? 0) > 0).length,
    idle: kills.filter((f) => (f.inFlight?.commands ?? 0) === 0).length,
    measured: timed.length,
    slowestMs: timed.length ? Math.max(...timed.map((x) => x.ms)) : undefined,
  };
}

/** The slowest operation of the run (retries included). */
export function slowestOp(ops: readonly OpRecord[]): OpRecord | undefined {
  return ops.filter((o) => o.phase === "run").reduce<OpRecord | undefined>((a, o) => (!a || o.end - o.start > a.end - a.start ? o : a), undefined);
}
