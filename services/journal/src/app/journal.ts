/**
 * The journal: the single writer of volume and snapshot history for one storage cluster.
 *
 * How a create stays idempotent and crash-safe (ceph-csi's voljournal, made event-sourced):
 *
 *  1. Lock the request name in Redis (and the content source's uuid), reading in the same round
 *     trip the name directory entry, the name subject's last sequence and the record it points at.
 *  2. Decide with the reservation state machine (domain/reservation.ts): reuse, conflict, stale…
 *  3. New: append NameReserved (fenced on the name subject's sequence) and VolumeReserved
 *     (fenced on an empty uuid subject) together, create the image, append VolumeCreated.
 *     Any failure after the reservation removes the image and appends ReservationUndone and
 *     NameReleased, so the log says exactly what was reserved, created and undone.
 *  4. Apply the appended events to the projection and release the locks in one round trip.
 *
 * A writer that dies after step 3's reservation leaves a reservation without an image: the next
 * create of that name sees it as stale, undoes it and starts afresh. A writer that dies after
 * the image was made but before VolumeCreated leaves an image the next create finds and
 * records ("complete"). A writer whose lock expired is fenced off by the sequence checks.
 */
import { randomUUID } from "node:crypto";
import {
  alreadyExists,
  type CommandResult,
  type DeviceReport,
  DriverError,
  type EventBody,
  invalidArgument,
  isUuid,
  type Kind,
  notFound,
  type ParsedRequest,
  type ResolvedCluster,
  readerOnly,
  roundUpToMiB,
  type SnapshotView,
  type StoredEvent,
  subjects,
  type VolumeView,
} from "@csi/contracts";
import { type Append, AppendError, isFenced } from "../adapters/event-log.js";
import { decideClaim } from "../domain/claims.js";
import { createdEvent, KINDS, type RecordOf, uuidSubjects } from "../domain/kinds.js";
import type { ImageInfo, PoolBackend } from "../domain/pool-backend.js";
import { foldRecord, recordChange } from "../domain/projection.js";
import { type Hash, isLive, snapshotFromHash, snapshotView, volumeFromHash, volumeView } from "../domain/records.js";
import { checkSnapshotReservation, checkVolumeReservation, digestOf, nextToken, poolForCreate, type Verdict, volumeDigest } from "../domain/reservation.js";
import { type Operation, type OperationEnv, runOperation } from "./operation.js";

export interface JournalDeps extends OperationEnv {
  cluster: ResolvedCluster;
  pools: Map<string, PoolBackend>;
}

export class Journal {
  readonly #d: JournalDeps;

  constructor(deps: JournalDeps) {
    this.#d = deps;
  }

  get #k() {
    return this.#d.store.keys;
  }
  get #c() {
    return this.#d.cluster.clusterID;
  }
  get #inst() {
    return this.#d.cluster.instance;
  }

  #pool(name: string): PoolBackend {
    const p = this.#d.pools.get(name);
    if (!p) throw invalidArgument(`unknown pool ${name} in cluster ${this.#c}`);
    return p;
  }

  #poolOf(name: string): PoolBackend | undefined {
    return this.#d.pools.get(name);
  }

  #recordSubject(kind: Kind, uuid: string) {
    return KINDS[kind].events(this.#c, uuid);
  }
  #nameSubject(kind: Kind, name: string) {
    return KINDS[kind].nameEvents(this.#c, this.#inst, name);
  }

  /**
   * The record of `kind`/`uuid` once `landed` is applied to `hash` (read under the lock): the
   * same fold the projection applies, so a reply shows what a later read shows.
   */
  #after<K extends Kind>(kind: K, uuid: string, hash: Hash | undefined, landed: StoredEvent[]): RecordOf<K> {
    const h = foldRecord(kind, uuid, hash, landed);
    if (!isLive(h)) throw new DriverError("Internal", `${kind} ${uuid} has no record after its own events`);
    return KINDS[kind].fromHash(uuid, h);
  }

  /** Lock a request name (+ extra uuids) and read its directory entry, fence and record. */
  async #lockName(op: Operation, kind: Kind, name: string, also: { kind: Kind; uuid: string }[] = []) {
    const k = this.#k;
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

  // ---------------------------------------------------------------- volumes

  async createVolume(req: ParsedRequest<"volume.create">): Promise<VolumeView> {
    if (req.pool) this.#pool(req.pool); // an unknown pool is refused before anything is locked
    const sizeBytes = roundUpToMiB(req.sizeBytes);
    if (req.limitBytes > 0 && sizeBytes > req.limitBytes) {
      throw new DriverError("OutOfRange", `${req.sizeBytes} bytes rounded up to ${sizeBytes} exceeds the limit ${req.limitBytes}`);
    }
    const also = req.source ? [{ kind: req.source.kind, uuid: req.source.uuid }] : [];

    return runOperation(this.#d, req.requestId, async (op) => {
      const { dirUuid, nameSeq, hash, alsoHashes } = await this.#lockName(op, "volume", req.name, also);
      const record = hash && dirUuid ? volumeFromHash(dirUuid, hash) : undefined;
      const sourceHash = alsoHashes[0];
      const source = req.source && isLive(sourceHash) && sourceHash["csi.imageid"] ? KINDS[req.source.kind].fromHash(req.source.uuid, sourceHash) : undefined;
      // The pool (and so the digest) is known only now: a clone or restore lands in its source's pool.
      const poolName = poolForCreate(req, source, record, this.#d.cluster.defaultPool);
      const digest = volumeDigest(poolName, req.parameters);
      const image = record ? await this.#poolOf(record.pool)?.statImage(record.imageName) : undefined;
      const ask = { name: req.name, sizeBytes, limitBytes: req.limitBytes, digest, capabilities: req.capabilities, ...(req.source ? { source: req.source } : {}) };
      const settled = await this.#settle(op, "volume", req.name, nameSeq, hash, checkVolumeReservation(ask, dirUuid, record, image));
      if ("done" in settled) return volumeView(settled.done);
      // Source checks come after the name checks: an existing volume is answered as it is.
      if (req.source && !source) throw notFound(`source ${req.source.kind} ${req.source.uuid} does not exist`);
      if (source && source.pool !== poolName) {
        throw invalidArgument(`source ${req.source?.kind} is in pool ${source.pool}, not ${poolName}: cross-pool clones are not supported`);
      }
      if (source && sizeBytes < source.sizeBytes) throw new DriverError("OutOfRange", `requested ${sizeBytes} bytes is smaller than the source's ${source.sizeBytes}`);
      const pool = this.#pool(poolName);
      if (sizeBytes > pool.maxImageBytes) throw new DriverError("OutOfRange", `${sizeBytes} bytes exceeds the pool's maximum image size ${pool.maxImageBytes}`);
      const uuid = randomUUID();
      const imageName = KINDS.volume.imageName(uuid);
      const reserved = {
        type: "VolumeReserved", uuid, name: req.name, instance: this.#inst, pool: poolName, poolId: pool.poolId, imageName,
        sizeBytes, digest, parameters: req.parameters, capabilities: req.capabilities, ...(req.source ? { source: req.source } : {}),
      } as const;
      const landed = await this.#reserveAndBuild(op, "volume", req.name, uuid, settled.fence, pool, imageName, reserved, () =>
        source ? pool.cloneImage(source.imageName, imageName, sizeBytes) : pool.createImage(imageName, sizeBytes),
      );
      return volumeView(this.#after("volume", uuid, undefined, landed));
    });
  }

  /**
   * Settle a reservation verdict: an answer (the existing record, completed if its *Created
   * event was missing), or — for a new or undone-stale reservation — the name fence to reserve with.
   */
  async #settle<K extends Kind>(
    op: Operation,
    kind: K,
    name: string,
    nameSeq: number,
    hash: Hash | undefined,
    verdict: Verdict<RecordOf<K>>,
  ): Promise<{ done: RecordOf<K> } | { fence: number }> {
    switch (verdict.kind) {
      case "reuse":
        return { done: verdict.record };
      case "conflict":
        throw alreadyExists(verdict.reason);
      case "inconsistent":
        throw new DriverError("Inconsistent", verdict.reason);
      case "complete": {
        const { record: r, image } = verdict;
        const created = await op.append({ subject: this.#recordSubject(kind, r.uuid), body: createdEvent(kind, r.uuid, image), expectedSeq: r.seq });
        return { done: this.#after(kind, r.uuid, hash, created) };
      }
      case "stale":
        this.#d.logger.warn({ kind, name, uuid: verdict.uuid, reason: verdict.reason }, "undoing stale reservation");
        return { fence: await this.#undo(op, kind, name, verdict.uuid, nameSeq, verdict.record, verdict.reason) };
      case "new":
        return { fence: nameSeq };
      default: {
        const never: never = verdict;
        throw new Error(`unhandled verdict ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * The new-reservation path shared by volumes and snapshots: append NameReserved and the
   * *Reserved event together, build the image, append *Created. Any failure after the
   * reservation removes the image and appends the undo events. Returns the aggregate's events
   * (reserved, created) as stored.
   */
  async #reserveAndBuild(
    op: Operation,
    kind: Kind,
    name: string,
    uuid: string,
    fence: number,
    pool: PoolBackend,
    imageName: string,
    reserved: EventBody,
    build: () => Promise<ImageInfo>,
  ): Promise<StoredEvent[]> {
    const recordSubject = this.#recordSubject(kind, uuid);
    const [nameEv, reservedEv] = await op
      .append(
        { subject: this.#nameSubject(kind, name), body: { type: "NameReserved", kind, name, uuid }, expectedSeq: fence },
        { subject: recordSubject, body: reserved, expectedSeq: 0 },
      )
      .catch(async (err: unknown) => {
        // The name fence failed but the uuid's reservation landed: undo it, so the log stays true.
        const [nameLanded, recordLanded] = err instanceof AppendError ? err.landed : [];
        if (recordLanded && !nameLanded) {
          await op.append({ subject: recordSubject, body: { type: "ReservationUndone", kind, uuid, reason: "name fenced off" }, expectedSeq: recordLanded.seq }).catch(() => {});
        }
        throw err;
      });
    const reservedSeq = reservedEv?.seq ?? 0;
    let image: ImageInfo;
    try {
      image = await build();
    } catch (err) {
      await pool.deleteImage(imageName).catch(() => {});
      await this.#appendUndo(op, kind, name, uuid, reservedSeq, nameEv?.seq ?? 0, `image creation failed: ${(err as Error).message}`).catch(() => {});
      throw err;
    }
    const [createdEv] = await op.append({ subject: recordSubject, body: createdEvent(kind, uuid, image), expectedSeq: reservedSeq }).catch(async (err: unknown) => {
      // Fenced off: another writer took over while we worked (our lock expired). If it ended
      // this reservation, the image (named after the uuid: ours alone) is an orphan: remove it.
      // If it recorded the image ("complete"), the image is the volume's: keep it. If the log
      // is merely unreachable, keep it too: the next create of the name records it.
      if (isFenced(err) && (await this.#ended(recordSubject))) await pool.deleteImage(imageName).catch(() => {});
      throw err;
    });
    return [reservedEv, createdEv].filter((e) => e !== undefined);
  }

  /** Whether an aggregate's log ends with its end (deleted or undone); false when unsure. */
  async #ended(subject: string): Promise<boolean> {
    const last = await this.#d.log.lastOf(subject).catch(() => undefined);
    return !!last && !!recordChange(last.event)?.end;
  }

  /** Undo a stale reservation: remove a partial image, end the record, release the name. Returns the name fence after. */
  async #undo(op: Operation, kind: Kind, name: string, uuid: string, nameSeq: number, record: RecordOf<Kind> | undefined, reason: string): Promise<number> {
    // Without a record, the image name is still derived from the uuid; try every pool.
    const imageName = record?.imageName ?? KINDS[kind].imageName(uuid);
    const pools = record ? [this.#poolOf(record.pool)] : [...this.#d.pools.values()];
    for (const p of pools) await p?.deleteImage(imageName);
    const recSeq = record?.seq ?? (await this.#d.log.lastSeqOf(this.#recordSubject(kind, uuid)));
    const [released] = await this.#appendUndo(op, kind, name, uuid, recSeq, nameSeq, reason, recSeq > 0);
    return released?.seq ?? nameSeq;
  }

  /** NameReleased (first), then ReservationUndone if the record is to be ended. */
  #appendUndo(op: Operation, kind: Kind, name: string, uuid: string, recSeq: number, nameSeq: number, reason: string, endRecord = true) {
    const list: Append[] = [{ subject: this.#nameSubject(kind, name), body: { type: "NameReleased", kind, name, uuid }, expectedSeq: nameSeq }];
    if (endRecord) list.push({ subject: this.#recordSubject(kind, uuid), body: { type: "ReservationUndone", kind, uuid, reason }, expectedSeq: recSeq });
    return op.append(...list);
  }

  async deleteVolume(req: ParsedRequest<"volume.delete">): Promise<CommandResult<"volume.delete">> {
    return this.#deleteAggregate("volume", req.uuid, req.requestId, async (r) => {
      if (r.claims.length > 0) {
        throw new DriverError("FailedPrecondition", `volume is published to ${r.claims.map((c) => c.nodeId).join(", ")}: unpublish it first`);
      }
    });
  }

  async #deleteAggregate<K extends Kind>(kind: K, uuid: string, requestId: string, check: (r: RecordOf<K>) => Promise<void>) {
    return runOperation(this.#d, requestId, async (op) => {
      const k = this.#k;
      const first = await op.lock({ locks: [k.uuidLock(kind, uuid)], hashes: [k.record(kind, uuid)], fields: [] });
      const h = first.hashes[0];
      if (!isLive(h)) return { deleted: false }; // unknown: deleting is idempotent
      const r = KINDS[kind].fromHash(uuid, h);
      await check(r);
      const second = await op.lock({
        locks: [k.nameLock(kind, r.name)],
        hashes: [],
        fields: [
          [k.dir(kind), k.dirField(kind, r.name)],
          [k.dirSeq(kind), r.name],
        ],
      });
      await this.#poolOf(r.pool)?.deleteImage(r.imageName);
      const list: Append[] = [{ subject: this.#recordSubject(kind, uuid), body: { type: KINDS[kind].deleted, uuid }, expectedSeq: r.seq }];
      if (second.fields[0] === uuid) {
        list.push({ subject: this.#nameSubject(kind, r.name), body: { type: "NameReleased", kind, name: r.name, uuid }, expectedSeq: Number(second.fields[1] ?? 0) });
      }
      await op.append(...list);
      return { deleted: true };
    });
  }

  async expandVolume(req: ParsedRequest<"volume.expand">): Promise<VolumeView> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const read = await op.lock({ locks: [this.#k.uuidLock("volume", req.uuid)], hashes: [this.#k.record("volume", req.uuid)], fields: [] });
      const h = read.hashes[0];
      if (!isLive(h)) throw notFound(`volume ${req.uuid} does not exist`);
      const r = volumeFromHash(req.uuid, h);
      const want = roundUpToMiB(req.sizeBytes);
      if (want <= r.sizeBytes) return volumeView(r); // never shrink: the current size answers
      const img = await this.#pool(r.pool).resizeImage(r.imageName, want);
      const expanded = await op.append({ subject: this.#recordSubject("volume", r.uuid), body: { type: "VolumeExpanded", uuid: r.uuid, sizeBytes: img.sizeBytes }, expectedSeq: r.seq });
      return volumeView(this.#after("volume", r.uuid, h, expanded));
    });
  }

  async getVolume(req: ParsedRequest<"volume.get">): Promise<VolumeView> {
    const [h] = await this.#read([this.#k.record("volume", req.uuid)]);
    if (!isLive(h) || !h["csi.imageid"]) throw notFound(`volume ${req.uuid} does not exist`);
    const r = volumeFromHash(req.uuid, h);
    const img = await this.#poolOf(r.pool)?.statImage(r.imageName);
    const condition = !img
      ? { abnormal: true, message: `image ${r.imageName} is missing from pool ${r.pool}` }
      : img.sizeBytes < r.sizeBytes
        ? { abnormal: true, message: `image is ${img.sizeBytes} bytes, smaller than the recorded ${r.sizeBytes}` }
        : { abnormal: false, message: "image present" };
    return { ...volumeView(r), condition };
  }

  /** ControllerPublishVolume: record a claim, refusing what the access mode forbids. */
  async publishVolume(req: ParsedRequest<"volume.publish">): Promise<CommandResult<"volume.publish">> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const read = await op.lock({
        locks: [this.#k.uuidLock("volume", req.uuid)],
        hashes: [this.#k.record("volume", req.uuid)],
        fields: [],
        counts: [this.#k.nodeClaims(req.nodeId)],
      });
      const h = read.hashes[0];
      if (!isLive(h) || !h["csi.imageid"]) throw notFound(`volume ${req.uuid} does not exist`);
      const r = volumeFromHash(req.uuid, h);
      const readOnly = req.readOnly || readerOnly(req.capability);
      const ask = { nodeId: req.nodeId, accessMode: req.capability.accessMode, accessType: req.capability.accessType, readOnly };
      const verdict = decideClaim(r.claims, ask, { nodeVolumes: read.counts[0] ?? 0, maxVolumes: req.maxVolumes });
      if (verdict.kind === "refused") throw new DriverError(verdict.code, verdict.reason);
      if (verdict.kind === "new") {
        await op.append({ subject: this.#recordSubject("volume", r.uuid), body: { type: "VolumeClaimed", uuid: r.uuid, ...ask }, expectedSeq: r.seq });
      }
      const pool = this.#pool(r.pool);
      return {
        publishContext: {
          clusterID: this.#c, pool: r.pool, poolId: String(r.poolId), imageName: r.imageName,
          imagePath: pool.imagePath(r.imageName), readOnly: String(readOnly),
        },
      };
    });
  }

  /** ControllerUnpublishVolume: release the node's claim (or every claim without a node); idempotent. */
  async unpublishVolume(req: ParsedRequest<"volume.unpublish">): Promise<CommandResult<"volume.unpublish">> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const read = await op.lock({ locks: [this.#k.uuidLock("volume", req.uuid)], hashes: [this.#k.record("volume", req.uuid)], fields: [] });
      const h = read.hashes[0];
      if (!isLive(h)) return { deleted: false }; // CSI: a volume that is gone is unpublished everywhere
      const r = volumeFromHash(req.uuid, h);
      const released = r.claims.filter((c) => req.nodeId === undefined || c.nodeId === req.nodeId);
      let seq = r.seq;
      for (const c of released) {
        const [ev] = await op.append({ subject: this.#recordSubject("volume", r.uuid), body: { type: "VolumeUnclaimed", uuid: r.uuid, nodeId: c.nodeId }, expectedSeq: seq });
        seq = ev?.seq ?? seq;
      }
      return { deleted: released.length > 0 };
    });
  }

  async listVolumes(req: ParsedRequest<"volume.list">): Promise<CommandResult<"volume.list">> {
    const { uuids, hashes, next } = await this.#page(this.#k.index("volume"), req.startingToken, req.maxEntries, "volume");
    // Reservations whose image does not exist yet (in flight, or left by a crash) are not volumes.
    const entries = uuids.flatMap((u, i) => (isLive(hashes[i]) && hashes[i]?.["csi.imageid"] ? [volumeView(volumeFromHash(u, hashes[i] as Hash))] : []));
    return next ? { entries, nextToken: next } : { entries };
  }

  // ---------------------------------------------------------------- snapshots

  async createSnapshot(req: ParsedRequest<"snapshot.create">): Promise<SnapshotView> {
    const digest = digestOf({ parameters: req.parameters });
    return runOperation(this.#d, req.requestId, async (op) => {
      const { dirUuid, nameSeq, hash, alsoHashes } = await this.#lockName(op, "snapshot", req.name, [{ kind: "volume", uuid: req.sourceUuid }]);
      const record = hash && dirUuid ? snapshotFromHash(dirUuid, hash) : undefined;
      const image = record ? await this.#poolOf(record.pool)?.statImage(record.imageName) : undefined;
      const verdict = checkSnapshotReservation({ name: req.name, sourceUuid: req.sourceUuid, digest }, dirUuid, record, image);
      const settled = await this.#settle(op, "snapshot", req.name, nameSeq, hash, verdict);
      if ("done" in settled) return snapshotView(settled.done);
      const src = alsoHashes[0];
      if (!isLive(src) || !src["csi.imageid"]) throw notFound(`source volume ${req.sourceUuid} does not exist`);
      const source = volumeFromHash(req.sourceUuid, src);
      const pool = this.#pool(source.pool);
      const uuid = randomUUID();
      const imageName = KINDS.snapshot.imageName(uuid);
      const reserved = { type: "SnapshotReserved", uuid, name: req.name, instance: this.#inst, sourceUuid: req.sourceUuid, pool: source.pool, poolId: pool.poolId, imageName, digest } as const;
      const landed = await this.#reserveAndBuild(op, "snapshot", req.name, uuid, settled.fence, pool, imageName, reserved, () => pool.snapshotImage(source.imageName, imageName));
      return snapshotView(this.#after("snapshot", uuid, undefined, landed));
    });
  }

  async deleteSnapshot(req: ParsedRequest<"snapshot.delete">): Promise<CommandResult<"snapshot.delete">> {
    return this.#deleteAggregate("snapshot", req.uuid, req.requestId, async () => {});
  }

  async getSnapshot(req: ParsedRequest<"snapshot.get">): Promise<SnapshotView> {
    const [h] = await this.#read([this.#k.record("snapshot", req.uuid)]);
    if (!isLive(h)) throw notFound(`snapshot ${req.uuid} does not exist`);
    return snapshotView(snapshotFromHash(req.uuid, h));
  }

  async listSnapshots(req: ParsedRequest<"snapshot.list">): Promise<CommandResult<"snapshot.list">> {
    if (req.snapshotUuid) {
      const [h] = await this.#read([this.#k.record("snapshot", req.snapshotUuid)]);
      if (!isLive(h)) return { entries: [] };
      const s = snapshotFromHash(req.snapshotUuid, h);
      return { entries: !req.sourceUuid || s.sourceUuid === req.sourceUuid ? [snapshotView(s)] : [] };
    }
    const index = req.sourceUuid ? this.#k.snapsOf(req.sourceUuid) : this.#k.index("snapshot");
    const { uuids, hashes, next } = await this.#page(index, req.startingToken, req.maxEntries, "snapshot");
    const entries = uuids.flatMap((u, i) => (isLive(hashes[i]) ? [snapshotView(snapshotFromHash(u, hashes[i] as Hash))] : []));
    return next ? { entries, nextToken: next } : { entries };
  }

  async poolStat(req: ParsedRequest<"pool.stat">): Promise<CommandResult<"pool.stat">> {
    const name = req.pool ?? this.#d.cluster.defaultPool;
    const pool = this.#pool(name);
    return { pool: name, poolId: pool.poolId, ...(await pool.capacity()) };
  }

  // ---------------------------------------------------------------- device history

  /** A node-agent's device-state report (from the report queue) becomes an event in the volume's history. */
  async reportDevice(report: DeviceReport): Promise<void> {
    const { requestId, ...body } = report;
    const meta = { requestId, actor: this.#d.actor, time: this.#d.now().toISOString() };
    await this.#d.log.append({ subject: subjects.deviceEvents(this.#c, report.uuid), body: { type: "DeviceStateReported", ...body } }, meta);
  }

  /** Every event of a volume (or snapshot), in log order: its own, its device reports, its name's. */
  async history(req: ParsedRequest<"volume.history">): Promise<CommandResult<"volume.history">> {
    const own = await this.#d.log.history(uuidSubjects(this.#c, req.uuid));
    const named: StoredEvent[] = [];
    for (const k of Object.values(KINDS)) {
      const reserved = own.find((e) => e.event.type === k.reserved)?.event;
      if (!reserved || !("name" in reserved)) continue;
      const ofName = await this.#d.log.history([k.nameEvents(this.#c, this.#inst, reserved.name)]);
      named.push(...ofName.filter((e) => "uuid" in e.event && e.event.uuid === req.uuid));
    }
    const events = [...own, ...named].sort((a, b) => a.seq - b.seq);
    return { events: events.map((e) => ({ seq: e.seq, subject: e.subject, event: e.event as unknown as Record<string, unknown> })) };
  }

  // ---------------------------------------------------------------- reads

  /** Read hashes; if the projection is gone, rebuild it first. */
  async #read(keys: string[]): Promise<(Hash | undefined)[]> {
    if ((await this.#d.store.watermark()) === undefined) await this.#d.projector.catchUp();
    return this.#d.store.hashes(keys);
  }

  async #page(index: string, token: string | undefined, maxEntries: number, kind: Kind) {
    if (token !== undefined && !isUuid(token)) throw new DriverError("Aborted", `invalid starting token ${JSON.stringify(token)}`);
    if ((await this.#d.store.watermark()) === undefined) await this.#d.projector.catchUp();
    const uuids = await this.#d.store.indexPage(index, token, maxEntries > 0 ? maxEntries + 1 : 0);
    const next = nextToken(uuids, maxEntries);
    const page = next ? uuids.slice(0, maxEntries) : uuids;
    const hashes = await this.#d.store.hashes(page.map((u) => this.#k.record(kind, u)));
    return { uuids: page, hashes, next };
  }
}
