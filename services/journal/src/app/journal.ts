/**
 * The journal: the single writer of volume and snapshot history for one storage cluster. Every
 * command that changes anything is a decider (domain/) run by the one runner (runner.ts): lock,
 * read, decide, image steps, fenced appends, the fold once, the projection written and the locks
 * released, the reply (idempotent, crash-safe creates: commands/deciders/reservation.ts). Reads (get, list,
 * history, pool stat) read the projection or the log directly, here.
 */
import {
  type CommandResult,
  type DeviceReport,
  DriverError,
  type GroupSnapshotView,
  isUuid,
  MAX_PAGE_ENTRIES,
  notFound,
  type ParsedRequest,
  quote,
  type SnapshotView,
  subjects,
  type VolumeView,
} from "@csi/contracts";
import { Audit, type AuditDeps, type HeartbeatReader } from "../audit/index.js";
import {
  type Command,
  deviceHolds,
  fitReply,
  groupView,
  madeIn,
  membersMismatch,
  nextToken,
  poolOf,
  recordIn,
  run,
  type View,
  whyNotNodesBusiness,
} from "../commands/index.js";
import { type Address, addressKey, liveRecord } from "../fold/evolve.js";
import { shared, subjectOf } from "../fold/kinds.js";
import { eventsOf } from "../fold/log-record.js";
import { snapshotView, volumeView } from "../fold/records.js";
import type { IndexOf } from "../projection/port.js";
import { withConditions } from "./conditions.js";
import { type CommandTable, commandTable } from "./table.js";

export interface JournalDeps extends AuditDeps {
  /** The last heartbeat of nodes (audit.verify's stale claims); without it every claimed node counts as silent. */
  heartbeats?: HeartbeatReader;
}

export class Journal {
  readonly audit: Audit;

  constructor(readonly d: JournalDeps) {
    this.audit = new Audit(d, d.heartbeats ?? (async (ids) => new Map(ids.map((id) => [id, undefined]))));
  }

  /** Before a command: if Redis came back since the last catch-up, catch the projection up first. */
  current(): Promise<void> {
    return this.d.projector.current();
  }

  run<R>(cmd: Command<R>): Promise<R> {
    return run(this.d, cmd);
  }

  /** Every journal command, one row each (table.ts): what the NATS service serves. */
  readonly commands: CommandTable = commandTable(this);

  createVolume = this.commands["volume.create"];
  adoptVolume = this.commands["volume.adopt"];
  deleteVolume = this.commands["volume.delete"];
  expandVolume = this.commands["volume.expand"];
  modifyVolume = this.commands["volume.modify"];
  publishVolume = this.commands["volume.publish"];
  unpublishVolume = this.commands["volume.unpublish"];
  createSnapshot = this.commands["snapshot.create"];
  deleteSnapshot = this.commands["snapshot.delete"];
  createGroupSnapshot = this.commands["groupsnapshot.create"];
  deleteGroupSnapshot = this.commands["groupsnapshot.delete"];

  // ---------------------------------------------------------------- reads

  async getVolume(req: ParsedRequest<"volume.get">): Promise<VolumeView> {
    const a = { kind: "volume" as const, uuid: req.uuid };
    const r = madeIn(await this.#view([a]), "volume", req.uuid, req.poolId);
    if (!r) throw notFound(`volume ${req.uuid} does not exist`);
    const img = await this.d.pools.get(r.pool)?.statImage(r.imageName);
    const condition = !img
      ? { abnormal: true, message: `image ${r.imageName} is missing from pool ${r.pool}` }
      : img.sizeBytes < r.sizeBytes
        ? { abnormal: true, message: `image is ${img.sizeBytes} bytes, smaller than the recorded ${r.sizeBytes}` }
        : { abnormal: false, message: "image present" };
    return { ...volumeView(r), condition };
  }

  async getSnapshot(req: ParsedRequest<"snapshot.get">): Promise<SnapshotView> {
    const r = recordIn(await this.#view([{ kind: "snapshot", uuid: req.uuid }]), "snapshot", req.uuid, req.poolId);
    if (!r) throw notFound(`snapshot ${req.uuid} does not exist`);
    return snapshotView(r);
  }

  async getGroupSnapshot(req: ParsedRequest<"groupsnapshot.get">): Promise<GroupSnapshotView> {
    const r = liveRecord((await this.#view([{ kind: "groupsnapshot", uuid: req.uuid }])).state({ kind: "groupsnapshot", uuid: req.uuid }), "groupsnapshot");
    if (!r) throw notFound(`group snapshot ${req.uuid} does not exist`);
    const mismatch = membersMismatch(r, req.snapshotUuids);
    if (mismatch) throw new DriverError("InvalidArgument", mismatch);
    const members = await this.#view(r.members.map((m) => ({ kind: "snapshot" as const, uuid: m.snapshotUuid })));
    return groupView({
      record: r,
      members: r.members.map((member) => ({ member, ...optional(liveRecord(members.state({ kind: "snapshot", uuid: member.snapshotUuid }), "snapshot")) })),
    });
  }

  async listVolumes(req: ParsedRequest<"volume.list">): Promise<CommandResult<"volume.list">> {
    const { uuids, view, next } = await this.#page({ kind: "volume" }, "volume", req.startingToken, req.maxEntries);
    // Reservations whose image does not exist yet (in flight, or left by a crash) are not volumes.
    const made = uuids.flatMap((u) => optionalList(madeIn(view, "volume", u, undefined), volumeView));
    return this.fitReply(await withConditions(made, this.d.pools), (v) => v.uuid, next);
  }

  async listSnapshots(req: ParsedRequest<"snapshot.list">): Promise<CommandResult<"snapshot.list">> {
    if (req.snapshotUuid) {
      // CSI: a snapshot not cut yet is not listed (get shows it, not ready).
      const s = madeIn(await this.#view([{ kind: "snapshot", uuid: req.snapshotUuid }]), "snapshot", req.snapshotUuid, undefined);
      return { entries: s && (!req.sourceUuid || s.sourceUuid === req.sourceUuid) ? [snapshotView(s)] : [] };
    }
    const index: IndexOf = req.sourceUuid ? { snapshotsOf: req.sourceUuid } : { kind: "snapshot" };
    const { uuids, view, next } = await this.#page(index, "snapshot", req.startingToken, req.maxEntries);
    const entries = uuids.flatMap((u) => optionalList(madeIn(view, "snapshot", u, undefined), snapshotView));
    return this.fitReply(entries, (s) => s.uuid, next);
  }

  async poolStat(req: ParsedRequest<"pool.stat">): Promise<CommandResult<"pool.stat">> {
    const name = req.pool ?? this.d.cluster.defaultPool;
    const pool = poolOf(this.d.pools, this.d.cluster.clusterID, name);
    return { pool: name, poolId: pool.poolId, ...(await pool.capacity()) };
  }

  /** These aggregates as the complete projection holds them; if it is gone or half built, after its rebuild (bounded: Unavailable). */
  async #view(addresses: Address[]): Promise<Pick<View, "state">> {
    for (;;) {
      const got = await this.d.store.completeStates(addresses); // one round trip when the projection is complete
      if (got) return { state: (a) => got.get(addressKey(a)) };
      await this.d.projector.ready();
    }
  }

  /** One page of an index (the token is the last uuid of the previous page; 0 or more than MAX_PAGE_ENTRIES entries: MAX_PAGE_ENTRIES). */
  async #page(index: IndexOf, kind: "volume" | "snapshot", token: string | undefined, asked: number) {
    const max = asked > 0 ? Math.min(asked, MAX_PAGE_ENTRIES) : MAX_PAGE_ENTRIES;
    if (token !== undefined && !isUuid(token)) throw new DriverError("Aborted", `invalid starting token ${quote(token)}`);
    let uuids = await this.d.store.completeIndexPage(index, token, max + 1);
    while (!uuids) {
      await this.d.projector.ready(); // bounded: Unavailable past REBUILD_WAIT_MS
      uuids = await this.d.store.completeIndexPage(index, token, max + 1);
    }
    const next = nextToken(uuids, max);
    const page = next ? uuids.slice(0, max) : uuids;
    const states = await this.d.store.readStates(page.map((uuid) => ({ kind, uuid })));
    return { uuids: page, view: { state: (a: Address) => states.get(addressKey(a)) }, next };
  }

  /** A page cut to fit the connection's max payload (commands/reply.ts). */
  fitReply<T>(entries: T[], tokenOf: (e: T) => string, next: string | undefined): { entries: T[]; nextToken?: string } {
    return fitReply(this.d.maxPayload, entries, tokenOf, next);
  }

  /** A volume's claims as the projection holds them, nothing stat'ed (a node's claim check, its reports); undefined when it does not live. */
  claimsOf = async (uuid: string) => liveRecord((await this.#view([{ kind: "volume", uuid }])).state({ kind: "volume", uuid }), "volume")?.claims;
  // ---------------------------------------------------------------- device history
  /** A node's device report becomes an event of the volume's history if the node has business with it (commands/deciders/report-bounds.ts); else FailedPrecondition: dropped. */
  async reportDevice(report: DeviceReport): Promise<void> {
    const reported = this.d.log.history([subjects.deviceEvents(this.d.cluster.clusterID, report.uuid)]);
    const [claims, history] = await Promise.all([this.claimsOf(report.uuid), reported]);
    const why = whyNotNodesBusiness(report.nodeId, claims, deviceHolds(eventsOf(history).map((e) => e.event)));
    if (why) throw new DriverError("FailedPrecondition", `a report of node ${quote(report.nodeId, 64)} on volume ${report.uuid}: ${why}; dropped`);
    const { requestId, ...body } = report;
    const meta = { requestId, actor: this.d.actor, time: this.d.now().toISOString() };
    const event = shared.deviceReported(body);
    await this.d.log.append({ subject: subjectOf(event, this.d.cluster.clusterID, this.d.cluster.instance), body: event }, meta);
  }
}

const optional = <T>(r: T | undefined) => (r ? { record: r } : {});
const optionalList = <T, V>(r: T | undefined, f: (r: T) => V): V[] => (r ? [f(r)] : []);
