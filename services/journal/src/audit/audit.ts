/**
 * The audit commands (docs/journal.md, "The fold" and "Audit"): replay the log to a point,
 * verify the log against the projection and the pools, collect garbage, rebuild.
 *
 *   volume.history every event of one uuid (its own, its device reports, its name's), paged
 *   audit.replay   the log folded up to a sequence or a time, for the cluster (paged by uuid)
 *                  or one aggregate (only its subjects are read)
 *   audit.verify   leaked images, orphaned reservations, missing images, projection drift,
 *                  claims of nodes that stopped heartbeating: counts and the first findings
 *   audit.gc       removes leaked images and collects orphaned reservations (their image too, if
 *                  made); a dry run unless `apply`; each action re-checked under the normal locks
 *                  and appended as an event. On pools that have them (RBD): purges trash entries
 *                  nothing needs and removes temporaries of interrupted builds (no event); never
 *                  an image that is not ours (verify: foreignImage)
 *   audit.rebuild  drop the projection and rebuild it from the log (the projector's rules)
 *   audit.purge    remove foreign records from the log (each read again first: only a record that
 *                  is still foreign is removed), then rebuild the projection
 */
import { randomBytes } from "node:crypto";
import {
  type CommandResult,
  DriverError,
  type Finding,
  type GcAction,
  isUuid,
  jsonBytes,
  MAX_PAGE_ENTRIES,
  type ParsedRequest,
  type PoolImage,
  type PurgeAction,
  quote,
  replyBudget,
  subjects,
  takeWithin,
} from "@csi/contracts";
import { fitReply, type RunnerDeps, run } from "../commands/index.js";
import type { States } from "../fold/evolve.js";
import { imageOwner, KINDS, uuidSubjects } from "../fold/kinds.js";
import { eventsOf, type ForeignRecord, isForeign, type LogRecord, shownSubject } from "../fold/log-record.js";
import { emptyReplay, pointOf, replayInto } from "../fold/replay.js";
import { FOLD_BATCH } from "../log/port.js";
import type { ImageInfo, Leftover, PoolBackend } from "../pools/port.js";
import type { Projector } from "../projection/index.js";
import { type Difference, differenceName, type JournalStore } from "../projection/port.js";
import {
  claimedNodes,
  collectReservation,
  countFindings,
  gcPlan,
  type Heartbeat,
  inspect,
  type LeakProof,
  ownerView,
  removeLeakedImage,
  replayEntries,
} from "./findings.js";

export type HeartbeatReader = (nodeIds: string[]) => Promise<Map<string, Heartbeat | undefined>>;

/** What the audit reads and runs with: the runner's parts, the whole store and the projector, and what verify and gc look at. */
export interface AuditDeps extends RunnerDeps {
  store: JournalStore;
  projector: Projector;
  /** The NATS connection's max_payload: replies are cut to fit under it (default: NATS's 1 MiB). */
  maxPayload?: number;
  /**
   * Per pool, since when an image no record names may be this log's leftover (epoch ms): its
   * binding to the log, or the log's restore, whichever is later. gc never removes one made before.
   */
  trustedSince?: ReadonlyMap<string, number>;
  /** Every node's latest registration (what each says it holds): verify's stray devices. Without it, none are looked for. */
  registrations?: () => Promise<readonly { nodeId: string; time: string; holding?: readonly string[] }[]>;
}

export class Audit {
  readonly #d: AuditDeps;

  constructor(
    d: AuditDeps,
    private readonly heartbeats: HeartbeatReader,
  ) {
    this.#d = d;
  }

  /** Every event of a volume (or snapshot, or group snapshot), in log order: its own, its device reports, its name's. */
  async history(req: ParsedRequest<"volume.history">): Promise<CommandResult<"volume.history">> {
    const cluster = this.#d.cluster.clusterID;
    const own = await this.#d.log.history(uuidSubjects(cluster, req.uuid));
    const named: LogRecord[] = [];
    for (const k of Object.values(KINDS)) {
      const reserved = eventsOf(own).find((e) => e.event.type === k.reserved)?.event;
      if (!reserved || !("name" in reserved)) continue;
      const ofName = await this.#d.log.history([k.nameEvents(cluster, this.#d.cluster.instance, reserved.name)]);
      // The name's events of this uuid, and the foreign records on the name's subject (they are in its fence's history too).
      named.push(...ofName.filter((e) => isForeign(e) || ("uuid" in e.event && e.event.uuid === req.uuid)));
    }
    const after = Number(req.startingToken ?? 0);
    const events = [...own, ...named].filter((e) => e.seq > after).sort((a, b) => a.seq - b.seq);
    const max = req.maxEntries > 0 ? req.maxEntries : MAX_PAGE_ENTRIES;
    const page = events
      .slice(0, max)
      .map((e) =>
        isForeign(e) ? { seq: e.seq, subject: e.subject, event: {}, foreign: e.foreign } : { seq: e.seq, subject: e.subject, event: { ...e.event } },
      );
    const { entries, nextToken } = fitReply(
      this.#d.maxPayload,
      page,
      (e) => String(e.seq),
      events.length > max ? String(page[page.length - 1]?.seq) : undefined,
    );
    return nextToken ? { events: entries, nextToken } : { events: entries };
  }

  async replay(req: ParsedRequest<"audit.replay">): Promise<CommandResult<"audit.replay">> {
    const at = pointOf(req.at);
    const r = emptyReplay();
    const upTo = "seq" in at ? { to: at.seq } : {}; // a point by sequence: nothing past it is read
    if (req.uuid) {
      // Only its subjects: each kind's (the uuid says nothing of its kind), each read up to the point.
      for (const k of Object.values(KINDS)) {
        await this.#d.log.read(1, async (batch) => replayInto(r, batch, at), { subject: k.events(this.#d.cluster.clusterID, req.uuid), ...upTo });
      }
      return { upTo: r.upTo, entries: replayEntries(r.states, { uuid: req.uuid }) };
    }
    if (req.startingToken !== undefined && !isUuid(req.startingToken)) throw new DriverError("Aborted", `invalid starting token ${quote(req.startingToken)}`);
    await this.#d.log.read(1, async (batch) => replayInto(r, batch, at), { batch: FOLD_BATCH, ...upTo });
    const all = replayEntries(r.states, req.startingToken ? { after: req.startingToken } : {});
    const max = Math.min(req.maxEntries || MAX_PAGE_ENTRIES, all.length);
    const { entries, nextToken } = fitReply(this.#d.maxPayload, all.slice(0, max), (e) => e.uuid, max < all.length ? all[max - 1]?.uuid : undefined);
    return { upTo: r.upTo, entries, ...(nextToken ? { nextToken } : {}) };
  }

  /** The pools' images and leftovers (listed first), the log folded after that, the projection compared with it. */
  async #observe(withProjection: boolean, olderThanMs: number) {
    const images = new Map<string, ImageInfo[]>();
    const leftovers = new Map<string, Leftover[]>();
    const marksOwners = new Set<string>();
    const logs = new Map<string, string>();
    for (const [name, pool] of this.#d.pools) {
      images.set(name, await pool.listImages());
      if (pool.leftovers) leftovers.set(name, await pool.leftovers());
      if (pool.marksOwners) marksOwners.add(name);
      if (pool.boundLog) logs.set(name, pool.boundLog);
    }
    let states: States = new Map();
    let drift: string[] = [];
    let foreign: ForeignRecord[] = [];
    let upTo: number;
    if (withProjection) {
      let differ: Difference[];
      ({ states, differ, upTo, foreign } = await this.#d.projector.compare());
      drift = differ.map(differenceName);
    } else upTo = await this.#d.projector.fold(states);
    const heartbeats = withProjection ? await this.heartbeats(claimedNodes(states)) : new Map();
    const holdings = withProjection && this.#d.registrations ? await this.#d.registrations() : [];
    const clusterID = this.#d.cluster.clusterID;
    const now = this.#d.now().getTime();
    const findings = inspect({ states, images, drift, heartbeats, now, olderThanMs, foreign, clusterID, marksOwners, logs, leftovers, holdings });
    return { findings, upTo, states, images };
  }

  /** What gc needs to judge the leaked images of `findings` (audit/findings.ts, LeakProof): the device reports of each read from the log. */
  async #leakProof(findings: readonly Finding[], images: Map<string, ImageInfo[]>, graceMs: number): Promise<LeakProof> {
    const createdAt = new Map<string, number>();
    for (const [pool, list] of images) for (const i of list) if (i.createdAt !== undefined) createdAt.set(`${pool}/${i.name}`, i.createdAt);
    const trustedSince = new Map([...this.#d.pools.keys()].map((p) => [p, this.#d.trustedSince?.get(p) ?? 0]));
    const reported = new Set<string>();
    for (const f of findings) {
      const owner = f.type === "leakedImage" ? imageOwner(f.imageName) : undefined;
      if (owner?.kind !== "volume") continue;
      const records = await this.#d.log.history([subjects.deviceEvents(this.#d.cluster.clusterID, owner.uuid)]);
      if (eventsOf(records).length > 0) reported.add(owner.uuid);
    }
    return { createdAt, trustedSince, reported, now: this.#d.now().getTime(), graceMs };
  }

  async verify(req: ParsedRequest<"audit.verify">): Promise<CommandResult<"audit.verify">> {
    const { findings, upTo } = await this.#observe(true, req.olderThanMs);
    const first = findings.slice(0, req.maxFindings);
    const { taken } = takeWithin(first, (f) => jsonBytes(f) + 1, replyBudget(this.#d.maxPayload) - 1024, false);
    return { upTo, counts: countFindings(findings), findings: taken, truncated: taken.length < findings.length };
  }

  /** One page of the pools' images (a restore's dry run compares them with a backup): pools by name, images by name, after `<pool>/<image>`. */
  async images(req: ParsedRequest<"audit.images">): Promise<CommandResult<"audit.images">> {
    const names = [...this.#d.pools.keys()].sort();
    const pools = names.map((name) => {
      const p = this.#d.pools.get(name) as PoolBackend;
      return { name, marksOwners: !!p.marksOwners, ...(p.boundLog ? { boundLog: p.boundLog } : {}) };
    });
    const max = req.maxEntries || MAX_PAGE_ENTRIES;
    // After `<pool>/<image>`: the pools before it skipped, in its pool the images up to it (compared apart: "a-b" sorts before "a/…").
    const [afterPool, afterImage] = req.startingToken ? [req.startingToken.split("/")[0] ?? "", req.startingToken.split("/").slice(1).join("/")] : [];
    const entries: PoolImage[] = [];
    for (const pool of names) {
      if (afterPool !== undefined && pool < afterPool) continue;
      for (const i of await (this.#d.pools.get(pool) as PoolBackend).listImages()) {
        if (pool === afterPool && i.name <= (afterImage ?? "")) continue;
        const { owner, ...rest } = i;
        entries.push({ pool, ...rest, ...ownerView(owner) });
        if (entries.length > max) break;
      }
      if (entries.length > max) break;
    }
    const page = entries.slice(0, max);
    const last = page.at(-1);
    const next = entries.length > max && last ? `${last.pool}/${last.name}` : undefined;
    return { pools, ...fitReply(this.#d.maxPayload, page, (e) => `${e.pool}/${e.name}`, next) };
  }

  async gc(req: ParsedRequest<"audit.gc">): Promise<CommandResult<"audit.gc">> {
    const { findings, states, images } = await this.#observe(false, req.olderThanMs);
    const plan = gcPlan(findings, states, await this.#leakProof(findings, images, req.graceMs ?? req.olderThanMs));
    const chosen = plan.slice(0, req.maxActions);
    const actions: GcAction[] = [];
    for (const action of chosen) {
      if (!req.apply || action.outcome === "skipped") actions.push(action);
      else if (action.type === "removeLeakedImage") actions.push(await busyIsSkipped(action, run(this.#d, removeLeakedImage(req.requestId, action))));
      else if (action.type === "collectReservation")
        actions.push(
          await busyIsSkipped(action, run(this.#d, collectReservation(req.requestId, action, { now: this.#d.now().getTime(), olderThanMs: req.olderThanMs }))),
        );
      else actions.push(await this.#removeLeftover(action, req.requestId));
    }
    const { taken } = takeWithin(actions, (x) => jsonBytes(x) + 1, replyBudget(this.#d.maxPayload) - 1024, false);
    return { apply: req.apply, actions: taken, truncated: taken.length < plan.length };
  }

  /**
   * A trash entry purged or a temporary removed: the pool's own housekeeping, no event (the image's
   * end is in the log already, or it never had one). The pool checks again: only a marked entry nothing
   * needs, only the temporary of that id.
   */
  async #removeLeftover(action: GcAction, requestId: string): Promise<GcAction> {
    const pool = this.#d.pools.get(action.pool);
    if (!pool?.removeLeftover) return { ...action, outcome: "skipped", reason: "the pool keeps no leftovers" };
    const kind = action.type === "purgeTrash" ? "trash" : "temp";
    // A temporary of a build still running belongs to a create that holds its uuid's lock (its
    // events come after the image): removed only under that lock, else skipped.
    const owner =
      kind === "temp" && action.uuid && (action.kind === "volume" || action.kind === "snapshot") ? { kind: action.kind, uuid: action.uuid } : undefined;
    const token = randomBytes(16).toString("hex");
    const locked = owner ? await this.#d.store.lockAndRead(token, this.#d.lockTtlMs, { locks: [owner] }) : undefined;
    if (locked && !locked.ok) return { ...action, outcome: "skipped", reason: `busy: a command on ${owner?.kind} ${owner?.uuid} holds its lock` };
    const removed = await pool
      .removeLeftover({ kind, name: action.imageName, id: action.imageId ?? "" })
      .finally(() => (owner && locked?.ok ? this.#d.store.release([owner], token).catch(() => {}) : undefined));
    if (!removed) return { ...action, outcome: "skipped", reason: kind === "trash" ? "clones still need it" : "it is gone" };
    this.#d.logger.info({ pool: action.pool, image: action.imageName, id: action.imageId, type: action.type, requestId }, "gc removed a leftover");
    return { ...action, outcome: "done" };
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
    const dropped = await this.#d.store.recordCount();
    const replayedTo = await this.#d.projector.rebuild("asked for (audit.rebuild)");
    return { dropped, replayedTo, ms: Math.round(performance.now() - started) };
  }
}

/**
 * A gc action whose locks another command holds (Aborted) is skipped, not the whole gc failed: that
 * command is working on it — e.g. a create whose image is made and whose events are on their way
 * (docs/journal.md, "A create in three round trips"). A later gc looks again.
 */
async function busyIsSkipped(action: GcAction, done: Promise<GcAction>): Promise<GcAction> {
  try {
    return await done;
  } catch (err) {
    if (!(err instanceof DriverError) || err.code !== "Aborted") throw err;
    return { ...action, outcome: "skipped", reason: `busy: ${err.message}` };
  }
}
