/**
 * What every journal command shares, whatever the aggregate kind: the deps, pools, subjects,
 * taking a request name's lock and reading what it points at, settling a reservation verdict,
 * undoing a reservation, folding appended events into the record a reply shows, paged reads.
 * The commands themselves live in journal.ts (volumes, snapshots) and group-snapshots.ts.
 */
import {
  alreadyExists,
  DriverError,
  invalidArgument,
  isUuid,
  jsonBytes,
  type Kind,
  MAX_PAGE_ENTRIES,
  quote,
  type ResolvedCluster,
  replyBudget,
  type StoredEvent,
  takeWithin,
} from "@csi/contracts";
import type { Append } from "../adapters/event-log.js";
import { type Aggregate, endsAggregate, foldOne, liveRecord } from "../domain/evolve.js";
import { KINDS, type RecordOf } from "../domain/kinds.js";
import { eventsOf, isForeign } from "../domain/log-records.js";
import type { PoolBackend } from "../domain/pool-backend.js";
import { stateFromHash } from "../domain/projection.js";
import { type Hash, isLive } from "../domain/records.js";
import { nextToken, type Verdict } from "../domain/reservation.js";
import type { HeartbeatReader } from "./audit.js";
import type { Operation, OperationEnv } from "./operation.js";

export interface JournalDeps extends OperationEnv {
  cluster: ResolvedCluster;
  pools: Map<string, PoolBackend>;
  /** The NATS connection's max_payload: replies are cut to fit under it (default: NATS's 1 MiB). */
  maxPayload?: number;
  /** The last heartbeat of nodes (audit.verify's stale claims); without it every claimed node counts as silent. */
  heartbeats?: HeartbeatReader;
}

type Completing<R, C> = Extract<Verdict<R, C>, { kind: "complete" }>;
type Stale<R, C> = Extract<Verdict<R, C>, { kind: "stale" }>;

export class Aggregates {
  constructor(readonly d: JournalDeps) {}

  get keys() {
    return this.d.store.keys;
  }
  get cluster() {
    return this.d.cluster.clusterID;
  }

  /** A configured pool; an unknown one is InvalidArgument. */
  pool(name: string): PoolBackend {
    const p = this.d.pools.get(name);
    if (!p) throw invalidArgument(`unknown pool ${quote(name)} in cluster ${this.cluster}`);
    return p;
  }

  poolOf(name: string): PoolBackend | undefined {
    return this.d.pools.get(name);
  }

  recordSubject(kind: Kind, uuid: string) {
    return KINDS[kind].events(this.cluster, uuid);
  }
  nameSubject(kind: Kind, name: string) {
    return KINDS[kind].nameEvents(this.cluster, this.d.cluster.instance, name);
  }

  /**
   * The record of `kind`/`uuid` once `landed` is applied to `hash` (read under the lock): the
   * fold the projection is written from (evolve), so a reply shows what a later read shows.
   */
  after<K extends Kind>(kind: K, uuid: string, hash: Hash | undefined, landed: StoredEvent[]): RecordOf<K> {
    const r = liveRecord(foldOne({ kind, uuid }, stateFromHash(kind, uuid, hash) as Aggregate | undefined, landed), kind);
    if (!r) throw new DriverError("Internal", `${kind} ${uuid} has no record after its own events`);
    return r as RecordOf<K>;
  }

  /** Lock a request name (+ extra uuids) and read its directory entry, fence and record. */
  async lockName(op: Operation, kind: Kind, name: string, also: { kind: Kind; uuid: string }[] = []) {
    const k = this.keys;
    const first = await op.lock({
      locks: [k.nameLock(kind, name), ...also.map((a) => k.uuidLock(a.kind, a.uuid))],
      hashes: also.map((a) => k.record(a.kind, a.uuid)),
      fields: [
        [k.dir(kind), k.dirField(kind, name)],
        [k.dirSeq(kind), name],
      ],
      // The record the name points at, read in the same round trip, under the lock.
      recordPrefix: k.record(kind, ""),
    });
    const dirUuid = first.fields[0];
    const nameSeq = Number(first.fields[1] ?? 0);
    return { dirUuid, nameSeq, hash: isLive(first.record) ? first.record : undefined, alsoHashes: first.hashes };
  }

  /**
   * Settle a reservation verdict: an answer (the existing record, or the one `ways.complete`
   * finishes), or — for a new or undone-stale reservation — the name fence to reserve with.
   */
  async settle<R, C>(
    what: { kind: Kind; name: string; nameSeq: number },
    verdict: Verdict<R, C>,
    ways: { complete: (v: Completing<R, C>) => Promise<R>; undo: (v: Stale<R, C>) => Promise<number> },
  ): Promise<{ done: R } | { fence: number }> {
    switch (verdict.kind) {
      case "reuse":
        return { done: verdict.record };
      case "conflict":
        throw alreadyExists(verdict.reason);
      case "inconsistent":
        throw new DriverError("Inconsistent", verdict.reason);
      case "complete":
        return { done: await ways.complete(verdict as Completing<R, C>) };
      case "stale":
        this.d.logger.warn({ kind: what.kind, name: what.name, uuid: verdict.uuid, reason: verdict.reason }, "undoing stale reservation");
        return { fence: await ways.undo(verdict) };
      case "new":
        return { fence: what.nameSeq };
      default: {
        const never: never = verdict;
        throw new Error(`unhandled verdict ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * Release a request name (first, so `[released]` is the name's new fence) and end the records
   * of a reservation that never became usable. `ends` with seq 0 have nothing to end.
   */
  releaseAndUndo(
    op: Operation,
    name: { kind: Kind; name: string; uuid: string; seq: number },
    ends: { kind: Kind; uuid: string; seq: number }[],
    reason: string,
  ) {
    const list: Append[] = [
      {
        subject: this.nameSubject(name.kind, name.name),
        body: { type: "NameReleased", kind: name.kind, name: name.name, uuid: name.uuid },
        expectedSeq: name.seq,
      },
    ];
    for (const e of ends) {
      if (e.seq > 0)
        list.push({ subject: this.recordSubject(e.kind, e.uuid), body: { type: "ReservationUndone", kind: e.kind, uuid: e.uuid, reason }, expectedSeq: e.seq });
    }
    return op.append(...list);
  }

  /** Whether an aggregate's log ends with its end (deleted or undone), foreign records after it aside; false when unsure. */
  async ended(subject: string): Promise<boolean> {
    const last = await this.d.log.lastOf(subject).catch(() => undefined);
    if (!last || !isForeign(last)) return !!last && endsAggregate(last);
    const event = eventsOf(await this.d.log.history([subject]).catch(() => [])).at(-1);
    return !!event && endsAggregate(event);
  }

  /** Read hashes; if the projection is gone or half built, wait for its rebuild first. */
  async read(keys: string[]): Promise<(Hash | undefined)[]> {
    for (;;) {
      const got = await this.d.store.completeHashes(keys); // one round trip when the projection is complete
      if (got) return got;
      await this.d.projector.ready(); // bounded: Unavailable past REBUILD_WAIT_MS
    }
  }

  /**
   * One page of an index of `kind` uuids, with their hashes; the token is the last uuid of the
   * previous page. `maxEntries` 0 (or more than MAX_PAGE_ENTRIES) reads MAX_PAGE_ENTRIES at most.
   */
  async page(index: string, token: string | undefined, askedEntries: number, kind: Kind) {
    const maxEntries = askedEntries > 0 ? Math.min(askedEntries, MAX_PAGE_ENTRIES) : MAX_PAGE_ENTRIES;
    if (token !== undefined && !isUuid(token)) throw new DriverError("Aborted", `invalid starting token ${quote(token)}`);
    let uuids = await this.d.store.completeIndexPage(index, token, maxEntries + 1); // with the `complete` mark: one round trip
    while (!uuids) {
      await this.d.projector.ready(); // bounded: Unavailable past REBUILD_WAIT_MS
      uuids = await this.d.store.completeIndexPage(index, token, maxEntries + 1);
    }
    const next = nextToken(uuids, maxEntries);
    const page = next ? uuids.slice(0, maxEntries) : uuids;
    const hashes = await this.d.store.hashes(page.map((u) => this.keys.record(kind, u)));
    return { uuids: page, hashes, next };
  }

  /**
   * A page cut so that its encoded reply stays under the connection's max payload (less
   * headroom for the envelope): the entries that fit, and the token to go on from — the last
   * one kept when the page was cut, else `next` (where the store's page ended).
   */
  fitReply<T>(entries: T[], tokenOf: (e: T) => string, next: string | undefined): { entries: T[]; nextToken?: string } {
    const { taken, cut } = takeWithin(entries, (e) => jsonBytes(e) + 1, replyBudget(this.d.maxPayload));
    const last = taken[taken.length - 1];
    const nextToken = cut && last ? tokenOf(last) : next;
    return nextToken ? { entries: taken, nextToken } : { entries: taken };
  }
}
