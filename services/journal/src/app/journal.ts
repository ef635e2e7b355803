/**
 * The journal: the single writer of volume and snapshot history for one storage cluster
 * (group snapshots: group-snapshots.ts; what every kind shares: aggregates.ts).
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
  applyMutableParameters,
  type CommandResult,
  type DeviceReport,
  DriverError,
  type EventBody,
  inForce,
  invalidArgument,
  limitsToContext,
  MAX_PAGE_ENTRIES,
  notFound,
  type ParsedRequest,
  readerOnly,
  roundUpToMiB,
  type SnapshotView,
  type StoredEvent,
  sameMutableParameters,
  subjects,
  type VolumeView,
} from "@csi/contracts";
import { type Append, AppendError, isFenced } from "../adapters/event-log.js";
import { decideClaim } from "../domain/claims.js";
import { createdEvent, type ImageKind, KINDS, type RecordOf, uuidSubjects } from "../domain/kinds.js";
import { eventsOf, isForeign, type LogRecord } from "../domain/log-records.js";
import type { ImageInfo, PoolBackend } from "../domain/pool-backend.js";
import { type Hash, inPool, isLive, isMade, snapshotFromHash, snapshotView, volumeFromHash, volumeView } from "../domain/records.js";
import { checkSnapshotReservation, checkVolumeReservation, digestOf, poolForCreate, type Verdict, volumeDigest } from "../domain/reservation.js";
import { Aggregates, type JournalDeps } from "./aggregates.js";
import { Audit } from "./audit.js";
import { GroupSnapshots } from "./group-snapshots.js";
import { type Operation, runOperation } from "./operation.js";

export type { JournalDeps };

export class Journal {
  readonly #d: JournalDeps;
  readonly #a: Aggregates;
  readonly groups: GroupSnapshots;
  readonly audit: Audit;

  constructor(deps: JournalDeps) {
    this.#d = deps;
    this.#a = new Aggregates(deps);
    this.groups = new GroupSnapshots(this.#a);
    this.audit = new Audit(this.#a, deps.heartbeats ?? (async (ids) => new Map(ids.map((id) => [id, undefined]))));
  }

  get #k() {
    return this.#a.keys;
  }

  /**
   * Before a command: if Redis came back since the last catch-up (a Sentinel failover may have lost
   * its last writes), catch the projection up first, so reads and decisions see the whole log.
   */
  current(): Promise<void> {
    return this.#d.projector.current();
  }

  // ---------------------------------------------------------------- volumes

  async createVolume(req: ParsedRequest<"volume.create">): Promise<VolumeView> {
    if (req.pool) this.#a.pool(req.pool); // an unknown pool is refused before anything is locked
    const sizeBytes = roundUpToMiB(req.sizeBytes);
    if (req.limitBytes > 0 && sizeBytes > req.limitBytes) {
      throw new DriverError("OutOfRange", `${req.sizeBytes} bytes rounded up to ${sizeBytes} exceeds the limit ${req.limitBytes}`);
    }
    const also = req.source ? [{ kind: req.source.kind, uuid: req.source.uuid }] : [];
    const mutableParameters = inForce(req.mutableParameters ?? {});

    return runOperation(this.#d, req.requestId, async (op) => {
      const { dirUuid, nameSeq, hash, alsoHashes } = await this.#a.lockName(op, "volume", req.name, also);
      const record = hash && dirUuid ? volumeFromHash(dirUuid, hash) : undefined;
      const sourceHash = alsoHashes[0];
      const source = req.source && isMade(sourceHash) ? KINDS[req.source.kind].fromHash(req.source.uuid, sourceHash) : undefined;
      // The pool (and so the digest) is known only now: a clone or restore lands in its source's pool.
      const poolName = poolForCreate(req, source, record, this.#d.cluster.defaultPool);
      const digest = volumeDigest(poolName, req.parameters, mutableParameters);
      const image = record ? await this.#a.poolOf(record.pool)?.statImage(record.imageName) : undefined;
      const ask = {
        name: req.name,
        sizeBytes,
        limitBytes: req.limitBytes,
        digest,
        capabilities: req.capabilities,
        ...(req.source ? { source: req.source } : {}),
      };
      const settled = await this.#settle(op, "volume", req.name, nameSeq, hash, checkVolumeReservation(ask, dirUuid, record, image));
      if ("done" in settled) return volumeView(settled.done);
      // Source checks come after the name checks: an existing volume is answered as it is.
      if (req.source && (!source || !inPool(sourceHash, req.sourcePoolId))) throw notFound(`source ${req.source.kind} ${req.source.uuid} does not exist`);
      if (source && source.pool !== poolName) {
        throw invalidArgument(`source ${req.source?.kind} is in pool ${source.pool}, not ${poolName}: cross-pool clones are not supported`);
      }
      if (source && sizeBytes < source.sizeBytes)
        throw new DriverError("OutOfRange", `requested ${sizeBytes} bytes is smaller than the source's ${source.sizeBytes}`);
      const pool = this.#a.pool(poolName);
      if (sizeBytes > pool.maxImageBytes) throw new DriverError("OutOfRange", `${sizeBytes} bytes exceeds the pool's maximum image size ${pool.maxImageBytes}`);
      const uuid = randomUUID();
      const imageName = KINDS.volume.imageName(uuid);
      const reserved = {
        type: "VolumeReserved",
        uuid,
        name: req.name,
        instance: this.#d.cluster.instance,
        pool: poolName,
        poolId: pool.poolId,
        imageName,
        sizeBytes,
        digest,
        parameters: req.parameters,
        capabilities: req.capabilities,
        ...(req.source ? { source: req.source } : {}),
        ...(Object.keys(mutableParameters).length > 0 ? { mutableParameters } : {}),
      } as const;
      const landed = await this.#reserveAndBuild(op, "volume", req.name, uuid, settled.fence, pool, imageName, reserved, () =>
        source ? pool.cloneImage(source.imageName, imageName, sizeBytes) : pool.createImage(imageName, sizeBytes),
      );
      return volumeView(this.#a.after("volume", uuid, undefined, landed));
    });
  }

  /** Settle a volume's or snapshot's verdict: complete = record the image found; stale = undo. */
  #settle<K extends ImageKind>(op: Operation, kind: K, name: string, nameSeq: number, hash: Hash | undefined, verdict: Verdict<RecordOf<K>>) {
    return this.#a.settle({ kind, name, nameSeq }, verdict, {
      complete: async ({ record: r, image }) => {
        const created = await op.append({ subject: this.#a.recordSubject(kind, r.uuid), body: createdEvent(kind, r.uuid, image), expectedSeq: r.seq });
        return this.#a.after(kind, r.uuid, hash, created);
      },
      undo: (v) => this.#undo(op, kind, name, v.uuid, nameSeq, v.record, v.reason),
    });
  }

  /**
   * The new-reservation path shared by volumes and snapshots: append NameReserved and the
   * *Reserved event together, build the image, append *Created. Any failure after the
   * reservation removes the image and appends the undo events. Returns the aggregate's events
   * (reserved, created) as stored.
   */
  async #reserveAndBuild(
    op: Operation,
    kind: ImageKind,
    name: string,
    uuid: string,
    fence: number,
    pool: PoolBackend,
    imageName: string,
    reserved: EventBody,
    build: () => Promise<ImageInfo>,
  ): Promise<StoredEvent[]> {
    const recordSubject = this.#a.recordSubject(kind, uuid);
    const [nameEv, reservedEv] = await op
      .append(
        { subject: this.#a.nameSubject(kind, name), body: { type: "NameReserved", kind, name, uuid }, expectedSeq: fence },
        { subject: recordSubject, body: reserved, expectedSeq: 0 },
      )
      .catch(async (err: unknown) => {
        // The name fence failed but the uuid's reservation landed: undo it, so the log stays true.
        const [nameLanded, recordLanded] = err instanceof AppendError ? err.landed : [];
        if (recordLanded && !nameLanded) {
          await op
            .append({ subject: recordSubject, body: { type: "ReservationUndone", kind, uuid, reason: "name fenced off" }, expectedSeq: recordLanded.seq })
            .catch(() => {});
        }
        throw err;
      });
    const reservedSeq = reservedEv?.seq ?? 0;
    let image: ImageInfo;
    try {
      image = await build();
    } catch (err) {
      await pool.deleteImage(imageName).catch(() => {});
      const reason = `image creation failed: ${(err as Error).message}`;
      await this.#a.releaseAndUndo(op, { kind, name, uuid, seq: nameEv?.seq ?? 0 }, [{ kind, uuid, seq: reservedSeq }], reason).catch(() => {});
      throw err;
    }
    const [createdEv] = await op
      .append({ subject: recordSubject, body: createdEvent(kind, uuid, image), expectedSeq: reservedSeq })
      .catch(async (err: unknown) => {
        // Fenced off: another writer took over while we worked (our lock expired). If it ended
        // this reservation, the image (named after the uuid: ours alone) is an orphan: remove it.
        // If it recorded the image ("complete"), the image is the volume's: keep it. If the log
        // is merely unreachable, keep it too: the next create of the name records it.
        if (isFenced(err) && (await this.#a.ended(recordSubject))) await pool.deleteImage(imageName).catch(() => {});
        throw err;
      });
    return [reservedEv, createdEv].filter((e) => e !== undefined);
  }

  /** Undo a stale reservation: remove a partial image, end the record, release the name. Returns the name fence after. */
  async #undo(
    op: Operation,
    kind: ImageKind,
    name: string,
    uuid: string,
    nameSeq: number,
    record: RecordOf<ImageKind> | undefined,
    reason: string,
  ): Promise<number> {
    // Without a record, the image name is still derived from the uuid; try every pool.
    const imageName = record?.imageName ?? KINDS[kind].imageName(uuid);
    const pools = record ? [this.#a.poolOf(record.pool)] : [...this.#d.pools.values()];
    for (const p of pools) await p?.deleteImage(imageName);
    const recSeq = record?.seq ?? (await this.#d.log.lastSeqOf(this.#a.recordSubject(kind, uuid)));
    const [released] = await this.#a.releaseAndUndo(op, { kind, name, uuid, seq: nameSeq }, [{ kind, uuid, seq: recSeq }], reason);
    return released?.seq ?? nameSeq;
  }

  async deleteVolume(req: ParsedRequest<"volume.delete">): Promise<CommandResult<"volume.delete">> {
    return this.#deleteAggregate("volume", req.uuid, req.poolId, req.requestId, async (r) => {
      if (r.claims.length > 0) {
        throw new DriverError("FailedPrecondition", `volume is published to ${r.claims.map((c) => c.nodeId).join(", ")}: unpublish it first`);
      }
    });
  }

  async #deleteAggregate<K extends ImageKind>(kind: K, uuid: string, poolId: number | undefined, requestId: string, check: (r: RecordOf<K>) => Promise<void>) {
    return runOperation(this.#d, requestId, async (op) => {
      const k = this.#k;
      const first = await op.lock({ locks: [k.uuidLock(kind, uuid)], hashes: [k.record(kind, uuid)], fields: [] });
      const h = first.hashes[0];
      if (!isLive(h) || !inPool(h, poolId)) return { deleted: false }; // unknown: deleting is idempotent
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
      await this.#a.poolOf(r.pool)?.deleteImage(r.imageName, { copied: kind === "snapshot" || "source" in r });
      const list: Append[] = [{ subject: this.#a.recordSubject(kind, uuid), body: { type: KINDS[kind].deleted, uuid }, expectedSeq: r.seq }];
      if (second.fields[0] === uuid) {
        list.push({
          subject: this.#a.nameSubject(kind, r.name),
          body: { type: "NameReleased", kind, name: r.name, uuid },
          expectedSeq: Number(second.fields[1] ?? 0),
        });
      }
      await op.append(...list);
      return { deleted: true };
    });
  }

  async expandVolume(req: ParsedRequest<"volume.expand">): Promise<VolumeView> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const read = await op.lock({ locks: [this.#k.uuidLock("volume", req.uuid)], hashes: [this.#k.record("volume", req.uuid)], fields: [] });
      const h = read.hashes[0];
      if (!isLive(h) || !inPool(h, req.poolId)) throw notFound(`volume ${req.uuid} does not exist`);
      const r = volumeFromHash(req.uuid, h);
      const want = roundUpToMiB(req.sizeBytes);
      if (want <= r.sizeBytes) return volumeView(r); // never shrink: the current size answers
      const pool = this.#a.pool(r.pool);
      if (want > pool.maxImageBytes) throw new DriverError("OutOfRange", `${want} bytes exceeds the pool's maximum image size ${pool.maxImageBytes}`);
      const img = await pool.resizeImage(r.imageName, want);
      const expanded = await op.append({
        subject: this.#a.recordSubject("volume", r.uuid),
        body: { type: "VolumeExpanded", uuid: r.uuid, sizeBytes: img.sizeBytes },
        expectedSeq: r.seq,
      });
      return volumeView(this.#a.after("volume", r.uuid, h, expanded));
    });
  }

  /** ControllerModifyVolume: change the I/O limits; nothing is appended when nothing changes. */
  async modifyVolume(req: ParsedRequest<"volume.modify">): Promise<CommandResult<"volume.modify">> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const [h] = (await op.lock({ locks: [this.#k.uuidLock("volume", req.uuid)], hashes: [this.#k.record("volume", req.uuid)], fields: [] })).hashes;
      if (!isMade(h) || !inPool(h, req.poolId)) throw notFound(`volume ${req.uuid} does not exist`);
      const r = volumeFromHash(req.uuid, h);
      const next = applyMutableParameters(r.mutableParameters, req.mutableParameters);
      if (sameMutableParameters(next, r.mutableParameters)) return { volume: volumeView(r), seq: r.seq, changed: false };
      const body = { type: "VolumeModified", uuid: r.uuid, mutableParameters: next } as const;
      const modified = this.#a.after("volume", r.uuid, h, await op.append({ subject: this.#a.recordSubject("volume", r.uuid), body, expectedSeq: r.seq }));
      return { volume: volumeView(modified), seq: modified.seq, changed: true };
    });
  }

  async getVolume(req: ParsedRequest<"volume.get">): Promise<VolumeView> {
    const [h] = await this.#a.read([this.#k.record("volume", req.uuid)]);
    if (!isMade(h) || !inPool(h, req.poolId)) throw notFound(`volume ${req.uuid} does not exist`);
    const r = volumeFromHash(req.uuid, h);
    const img = await this.#a.poolOf(r.pool)?.statImage(r.imageName);
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
      if (!isMade(h) || !inPool(h, req.poolId)) throw notFound(`volume ${req.uuid} does not exist`);
      const r = volumeFromHash(req.uuid, h);
      const readOnly = req.readOnly || readerOnly(req.capability);
      const ask = { nodeId: req.nodeId, accessMode: req.capability.accessMode, accessType: req.capability.accessType, readOnly };
      const verdict = decideClaim(r.claims, ask, { nodeVolumes: read.counts[0] ?? 0, maxVolumes: req.maxVolumes });
      if (verdict.kind === "refused") throw new DriverError(verdict.code, verdict.reason);
      let seq = r.seq;
      if (verdict.kind === "new") {
        const [ev] = await op.append({
          subject: this.#a.recordSubject("volume", r.uuid),
          body: { type: "VolumeClaimed", uuid: r.uuid, ...ask },
          expectedSeq: r.seq,
        });
        seq = ev?.seq ?? seq;
      }
      const pool = this.#a.pool(r.pool);
      return {
        publishContext: {
          clusterID: this.#a.cluster,
          pool: r.pool,
          poolId: String(r.poolId),
          imageName: r.imageName,
          imagePath: pool.imagePath(r.imageName),
          readOnly: String(readOnly),
          // The I/O limits as of this point of the volume's log (a later modification reaches the node as node work).
          ...limitsToContext(r.mutableParameters, seq),
        },
      };
    });
  }

  /** ControllerUnpublishVolume: release the node's claim (or every claim without a node); idempotent. */
  async unpublishVolume(req: ParsedRequest<"volume.unpublish">): Promise<CommandResult<"volume.unpublish">> {
    return runOperation(this.#d, req.requestId, async (op) => {
      const read = await op.lock({ locks: [this.#k.uuidLock("volume", req.uuid)], hashes: [this.#k.record("volume", req.uuid)], fields: [] });
      const h = read.hashes[0];
      if (!isLive(h) || !inPool(h, req.poolId)) return { deleted: false }; // CSI: a volume that is gone is unpublished everywhere
      const r = volumeFromHash(req.uuid, h);
      const released = r.claims.filter((c) => req.nodeId === undefined || c.nodeId === req.nodeId);
      let seq = r.seq;
      for (const c of released) {
        const [ev] = await op.append({
          subject: this.#a.recordSubject("volume", r.uuid),
          body: { type: "VolumeUnclaimed", uuid: r.uuid, nodeId: c.nodeId },
          expectedSeq: seq,
        });
        seq = ev?.seq ?? seq;
      }
      return { deleted: released.length > 0 };
    });
  }

  async listVolumes(req: ParsedRequest<"volume.list">): Promise<CommandResult<"volume.list">> {
    const { uuids, hashes, next } = await this.#a.page(this.#k.index("volume"), req.startingToken, req.maxEntries, "volume");
    // Reservations whose image does not exist yet (in flight, or left by a crash) are not volumes.
    const entries = uuids.flatMap((u, i) => (isMade(hashes[i]) ? [volumeView(volumeFromHash(u, hashes[i] as Hash))] : []));
    return this.#a.fitReply(entries, (v) => v.uuid, next);
  }

  // ---------------------------------------------------------------- snapshots

  async createSnapshot(req: ParsedRequest<"snapshot.create">): Promise<SnapshotView> {
    const digest = digestOf({ parameters: req.parameters });
    return runOperation(this.#d, req.requestId, async (op) => {
      const { dirUuid, nameSeq, hash, alsoHashes } = await this.#a.lockName(op, "snapshot", req.name, [{ kind: "volume", uuid: req.sourceUuid }]);
      const record = hash && dirUuid ? snapshotFromHash(dirUuid, hash) : undefined;
      const image = record ? await this.#a.poolOf(record.pool)?.statImage(record.imageName) : undefined;
      const verdict = checkSnapshotReservation({ name: req.name, sourceUuid: req.sourceUuid, digest }, dirUuid, record, image);
      const settled = await this.#settle(op, "snapshot", req.name, nameSeq, hash, verdict);
      if ("done" in settled) return snapshotView(settled.done);
      const src = alsoHashes[0];
      if (!isMade(src) || !inPool(src, req.sourcePoolId)) throw notFound(`source volume ${req.sourceUuid} does not exist`);
      const source = volumeFromHash(req.sourceUuid, src);
      const pool = this.#a.pool(source.pool);
      const uuid = randomUUID();
      const imageName = KINDS.snapshot.imageName(uuid);
      const reserved = {
        type: "SnapshotReserved",
        uuid,
        name: req.name,
        instance: this.#d.cluster.instance,
        sourceUuid: req.sourceUuid,
        pool: source.pool,
        poolId: pool.poolId,
        imageName,
        digest,
      } as const;
      const landed = await this.#reserveAndBuild(op, "snapshot", req.name, uuid, settled.fence, pool, imageName, reserved, () =>
        pool.snapshotImage(source.imageName, imageName),
      );
      return snapshotView(this.#a.after("snapshot", uuid, undefined, landed));
    });
  }

  async deleteSnapshot(req: ParsedRequest<"snapshot.delete">): Promise<CommandResult<"snapshot.delete">> {
    return this.#deleteAggregate("snapshot", req.uuid, req.poolId, req.requestId, async (r) => {
      // CSI: a member of a group snapshot cannot be deleted on its own (DeleteSnapshot → INVALID_ARGUMENT).
      if (r.groupSnapshotUuid && (await this.groups.isLive(r.groupSnapshotUuid))) {
        throw invalidArgument(`snapshot ${r.uuid} is part of group snapshot ${r.groupSnapshotUuid}: delete the group snapshot instead`);
      }
    });
  }

  async getSnapshot(req: ParsedRequest<"snapshot.get">): Promise<SnapshotView> {
    const [h] = await this.#a.read([this.#k.record("snapshot", req.uuid)]);
    if (!isLive(h) || !inPool(h, req.poolId)) throw notFound(`snapshot ${req.uuid} does not exist`);
    return snapshotView(snapshotFromHash(req.uuid, h));
  }

  async listSnapshots(req: ParsedRequest<"snapshot.list">): Promise<CommandResult<"snapshot.list">> {
    if (req.snapshotUuid) {
      const [h] = await this.#a.read([this.#k.record("snapshot", req.snapshotUuid)]);
      // CSI: a snapshot not cut yet is not listed (get shows it, not ready).
      if (!isMade(h)) return { entries: [] };
      const s = snapshotFromHash(req.snapshotUuid, h);
      return { entries: !req.sourceUuid || s.sourceUuid === req.sourceUuid ? [snapshotView(s)] : [] };
    }
    const index = req.sourceUuid ? this.#k.snapsOf(req.sourceUuid) : this.#k.index("snapshot");
    const { uuids, hashes, next } = await this.#a.page(index, req.startingToken, req.maxEntries, "snapshot");
    const entries = uuids.flatMap((u, i) => (isMade(hashes[i]) ? [snapshotView(snapshotFromHash(u, hashes[i] as Hash))] : []));
    return this.#a.fitReply(entries, (s) => s.uuid, next);
  }

  async poolStat(req: ParsedRequest<"pool.stat">): Promise<CommandResult<"pool.stat">> {
    const name = req.pool ?? this.#d.cluster.defaultPool;
    const pool = this.#a.pool(name);
    return { pool: name, poolId: pool.poolId, ...(await pool.capacity()) };
  }

  // ---------------------------------------------------------------- device history

  /** A node-agent's device-state report (from the report queue) becomes an event in the volume's history. */
  async reportDevice(report: DeviceReport): Promise<void> {
    const { requestId, ...body } = report;
    const meta = { requestId, actor: this.#d.actor, time: this.#d.now().toISOString() };
    await this.#d.log.append({ subject: subjects.deviceEvents(this.#a.cluster, report.uuid), body: { type: "DeviceStateReported", ...body } }, meta);
  }

  /** Every event of a volume (or snapshot, or group snapshot), in log order: its own, its device reports, its name's. */
  async history(req: ParsedRequest<"volume.history">): Promise<CommandResult<"volume.history">> {
    const own = await this.#d.log.history(uuidSubjects(this.#a.cluster, req.uuid));
    const named: LogRecord[] = [];
    for (const k of Object.values(KINDS)) {
      const reserved = eventsOf(own).find((e) => e.event.type === k.reserved)?.event;
      if (!reserved || !("name" in reserved)) continue;
      const ofName = await this.#d.log.history([this.#a.nameSubject(k.kind, reserved.name)]);
      // The name's events of this uuid, and the foreign records on the name's subject (they are in its fence's history too).
      named.push(...ofName.filter((e) => isForeign(e) || ("uuid" in e.event && e.event.uuid === req.uuid)));
    }
    const after = Number(req.startingToken ?? 0);
    const events = [...own, ...named].filter((e) => e.seq > after).sort((a, b) => a.seq - b.seq);
    const max = req.maxEntries > 0 ? req.maxEntries : MAX_PAGE_ENTRIES;
    const page = events
      .slice(0, max)
      .map((e) =>
        isForeign(e)
          ? { seq: e.seq, subject: e.subject, event: {}, foreign: e.foreign }
          : { seq: e.seq, subject: e.subject, event: e.event as unknown as Record<string, unknown> },
      );
    const { entries, nextToken } = this.#a.fitReply(page, (e) => String(e.seq), events.length > max ? String(page[page.length - 1]?.seq) : undefined);
    return nextToken ? { events: entries, nextToken } : { events: entries };
  }
}
