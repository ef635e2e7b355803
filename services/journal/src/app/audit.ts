/**
 * The audit commands (docs/journal.md, "The fold" and "Audit"): replay the log to a point,
 * verify the log against the projection and the pools, collect garbage, rebuild.
 *
 *   audit.replay   the log folded up to a sequence or a time, for the cluster (paged by uuid)
 *                  or one aggregate (only its subjects are read)
 *   audit.verify   leaked images, orphaned reservations, missing images, projection drift,
 *                  claims of nodes that stopped heartbeating: counts and the first findings
 *   audit.gc       removes leaked images and collects orphaned reservations; a dry run unless
 *                  `apply`; each action re-checked under the normal locks and appended as an event
 *   audit.rebuild  drop the projection and rebuild it from the log (the projector's rules)
 *   audit.purge    remove foreign records from the log (each read again first: only a record that
 *                  is still foreign is removed), then rebuild the projection
 */
import {
  type CommandResult,
  DriverError,
  type GcAction,
  isUuid,
  jsonBytes,
  MAX_PAGE_ENTRIES,
  type ParsedRequest,
  type PurgeAction,
  quote,
  replyBudget,
  subjects,
  takeWithin,
} from "@csi/contracts";
import {
  claimedNodes,
  countFindings,
  emptyReplay,
  gcPlan,
  type Heartbeat,
  imageOwner,
  inspect,
  mayCollect,
  mayRemoveImage,
  pointOf,
  replayEntries,
  replayInto,
} from "../domain/audit.js";
import { type Aggregate, foldOne, type RecordState, type States } from "../domain/evolve.js";
import { KINDS } from "../domain/kinds.js";
import { type ForeignRecord, isForeign, shownSubject } from "../domain/log-records.js";
import type { ImageInfo } from "../domain/pool-backend.js";
import { stateFromHash } from "../domain/projection.js";
import type { Aggregates } from "./aggregates.js";
import { type Operation, runOperation } from "./operation.js";

export type HeartbeatReader = (nodeIds: string[]) => Promise<Map<string, Heartbeat | undefined>>;

export class Audit {
  constructor(
    private readonly a: Aggregates,
    private readonly heartbeats: HeartbeatReader,
  ) {}

  get #d() {
    return this.a.d;
  }

  async replay(req: ParsedRequest<"audit.replay">): Promise<CommandResult<"audit.replay">> {
    const at = pointOf(req.at);
    const r = emptyReplay();
    const upTo = "seq" in at ? { to: at.seq } : {}; // a point by sequence: nothing past it is read
    if (req.uuid) {
      // Only its subjects: each kind's (the uuid says nothing of its kind), each read up to the point.
      for (const k of Object.values(KINDS)) {
        await this.#d.log.read(1, async (batch) => replayInto(r, batch, at), { subject: k.events(this.a.cluster, req.uuid), ...upTo });
      }
      return { upTo: r.upTo, entries: replayEntries(r.states, { uuid: req.uuid }) };
    }
    if (req.startingToken !== undefined && !isUuid(req.startingToken)) throw new DriverError("Aborted", `invalid starting token ${quote(req.startingToken)}`);
    await this.#d.log.read(1, async (batch) => replayInto(r, batch, at), { batch: 4096, ...upTo });
    const all = replayEntries(r.states, req.startingToken ? { after: req.startingToken } : {});
    const max = Math.min(req.maxEntries || MAX_PAGE_ENTRIES, all.length);
    const { entries, nextToken } = this.a.fitReply(all.slice(0, max), (e) => e.uuid, max < all.length ? all[max - 1]?.uuid : undefined);
    return { upTo: r.upTo, entries, ...(nextToken ? { nextToken } : {}) };
  }

  /** The pools' images (listed first), the log folded after that, the projection compared with it. */
  async #observe(withProjection: boolean, olderThanMs: number) {
    const images = new Map<string, ImageInfo[]>();
    for (const [name, pool] of this.#d.pools) images.set(name, await pool.listImages());
    let states: States = new Map();
    let drift: string[] = [];
    let foreign: ForeignRecord[] = [];
    let upTo: number;
    if (withProjection) ({ states, differ: drift, upTo, foreign } = await this.#d.projector.compare());
    else upTo = await this.#d.projector.fold(states);
    const heartbeats = withProjection ? await this.heartbeats(claimedNodes(states)) : new Map();
    const findings = inspect({ states, images, drift, heartbeats, now: this.#d.now().getTime(), olderThanMs, foreign });
    return { findings, upTo };
  }

  async verify(req: ParsedRequest<"audit.verify">): Promise<CommandResult<"audit.verify">> {
    const { findings, upTo } = await this.#observe(true, req.olderThanMs);
    const first = findings.slice(0, req.maxFindings);
    const { taken } = takeWithin(first, (f) => jsonBytes(f) + 1, replyBudget(this.#d.maxPayload) - 1024, false);
    return { upTo, counts: countFindings(findings), findings: taken, truncated: taken.length < findings.length };
  }

  async gc(req: ParsedRequest<"audit.gc">): Promise<CommandResult<"audit.gc">> {
    const { findings } = await this.#observe(false, req.olderThanMs);
    const plan = gcPlan(findings);
    const chosen = plan.slice(0, req.maxActions);
    const actions: GcAction[] = [];
    for (const action of chosen) {
      if (!req.apply) actions.push(action);
      else actions.push(action.type === "removeLeakedImage" ? await this.#removeImage(req, action) : await this.#collect(req, action));
    }
    const { taken } = takeWithin(actions, (x) => jsonBytes(x) + 1, replyBudget(this.#d.maxPayload) - 1024, false);
    return { apply: req.apply, actions: taken, truncated: taken.length < plan.length };
  }

  /** The state of one aggregate from its own subject of the log (what gc re-checks under its lock). */
  async #fromLog(kind: "volume" | "snapshot", uuid: string): Promise<Aggregate | undefined> {
    return foldOne({ kind, uuid }, undefined, await this.#d.log.history([this.a.recordSubject(kind, uuid)]));
  }

  /** Remove a leaked image under its lock (and its aggregate's, if named after one); then ImageLeakCollected. */
  #removeImage(req: ParsedRequest<"audit.gc">, action: GcAction): Promise<GcAction> {
    const k = this.a.keys;
    const owner = imageOwner(action.imageName);
    return runOperation(this.#d, req.requestId, async (op) => {
      await op.lock({
        locks: [k.lock(`image.${action.pool}.${action.imageName}`), ...(owner ? [k.uuidLock(owner.kind, owner.uuid)] : [])],
        hashes: [],
        fields: [],
      });
      const pool = this.a.pool(action.pool);
      const image = await pool.statImage(action.imageName);
      const refused = mayRemoveImage(owner ? await this.#fromLog(owner.kind, owner.uuid) : undefined, image);
      if (refused || !image) return { ...action, outcome: "skipped" as const, reason: refused };
      await pool.deleteImage(action.imageName);
      const reason = "in the pool without a reservation (audit.gc)";
      const [ev] = await op.append({
        subject: subjects.poolEvents(this.a.cluster, action.pool),
        body: { type: "ImageLeakCollected", pool: action.pool, imageName: image.name, imageId: image.id, sizeBytes: image.sizeBytes, reason },
      });
      return { ...action, outcome: "done" as const, ...(ev ? { seq: ev.seq } : {}) };
    });
  }

  /** Collect an orphaned reservation under its uuid's and its name's locks: ReservationCollected (+ NameReleased). */
  #collect(req: ParsedRequest<"audit.gc">, action: GcAction): Promise<GcAction> {
    const k = this.a.keys;
    const kind = action.kind as "volume" | "snapshot";
    const uuid = action.uuid as string;
    return runOperation(this.#d, req.requestId, async (op: Operation) => {
      const [h] = (await op.lock({ locks: [k.uuidLock(kind, uuid)], hashes: [k.record(kind, uuid)], fields: [] })).hashes;
      const state = stateFromHash(kind, uuid, h) as RecordState | undefined;
      const name = state?.record?.name;
      if (!state?.record || name === undefined) return { ...action, outcome: "skipped" as const, reason: "the reservation is gone" };
      const second = await op.lock({
        locks: [k.nameLock(kind, name)],
        hashes: [],
        fields: [
          [k.dir(kind), k.dirField(kind, name)],
          [k.dirSeq(kind), name],
        ],
      });
      const image = await this.a.poolOf(state.record.pool)?.statImage(action.imageName);
      const refused = mayCollect(state, image, { now: this.#d.now().getTime(), olderThanMs: req.olderThanMs });
      if (refused) return { ...action, outcome: "skipped" as const, reason: refused };
      const reason = "reserved without an image past the threshold (audit.gc)";
      const landed = await op.append(
        { subject: this.a.recordSubject(kind, uuid), body: { type: "ReservationCollected", kind, uuid, reason }, expectedSeq: state.seq },
        ...(second.fields[0] === uuid
          ? [
              {
                subject: this.a.nameSubject(kind, name),
                body: { type: "NameReleased" as const, kind, name, uuid },
                expectedSeq: Number(second.fields[1] ?? 0),
              },
            ]
          : []),
      );
      return { ...action, outcome: "done" as const, ...(landed[0] ? { seq: landed[0].seq } : {}) };
    });
  }

  /**
   * Remove foreign records (docs/operations.md, "Foreign records in the log"). Each sequence is
   * read again and removed only if its record is foreign now — a stream sequence's record never
   * changes, so what was judged is what is removed; an event is never removed. Removing records
   * moves their subjects' last sequences back, and the projection holds those (the fences): once
   * anything was removed, the projection is rebuilt from the log before the reply.
   */
  async purge(req: ParsedRequest<"audit.purge">): Promise<CommandResult<"audit.purge">> {
    const records: PurgeAction[] = [];
    let removed = 0;
    for (const seq of req.seqs) {
      const r = await this.#d.log.recordAt(seq);
      if (!r) {
        records.push({ seq, outcome: "skipped", why: "no record at this sequence (never written, or removed)" });
        continue;
      }
      if (!isForeign(r)) {
        records.push({ seq, subject: shownSubject(r.subject), outcome: "skipped", why: `a valid ${r.event.type}: events are never removed` });
        continue;
      }
      const head = { seq, subject: shownSubject(r.subject), reason: r.foreign.reason };
      if (!req.apply) {
        records.push({ ...head, outcome: "planned" });
        continue;
      }
      if (!(await this.#d.log.deleteRecord(seq))) {
        records.push({ ...head, outcome: "skipped", why: "removed meanwhile" });
        continue;
      }
      removed++;
      records.push({ ...head, outcome: "done" });
      this.#d.logger.warn({ seq, subject: head.subject, reason: head.reason, requestId: req.requestId }, "foreign record removed from the event log");
    }
    if (removed > 0) await this.#d.projector.rebuild(`${removed} foreign record(s) removed (audit.purge)`);
    return { apply: req.apply, records, rebuilt: removed > 0 };
  }

  async rebuild(_req: ParsedRequest<"audit.rebuild">): Promise<CommandResult<"audit.rebuild">> {
    const started = performance.now();
    const dropped = (await this.#d.store.projectionKeys()).length;
    const replayedTo = await this.#d.projector.rebuild("asked for (audit.rebuild)");
    return { dropped, replayedTo, ms: Math.round(performance.now() - started) };
  }
}
