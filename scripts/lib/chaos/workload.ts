/**
 * The chaos workload: mixed CSI operations as a CO issues them, against a model of what the CO
 * was told. The model is what the invariants are checked against: which creates and deletes
 * were acknowledged, which volumes are (maybe) claimed, staged and published on the node.
 *
 * It never does what the CSI spec forbids a CO to do: one operation at a time per volume (and
 * its snapshot source), no delete of a published volume, unpublish/unstage before
 * ControllerUnpublish. A step whose outcome is unknown (the call was given up while still
 * failing with a retryable code, or failed) is recorded as "maybe": the checks accept either
 * outcome, and the teardown undoes it anyway (CSI's idempotent unpublish/unstage/delete).
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { decomposeVolumeId, GrpcCode } from "@csi/contracts";
import type { ClientRequestOf } from "@csi/runtime";
import type { Random } from "../random.js";
import { CallFailed, type CoClient } from "./co-client.js";

export const OP_KINDS = ["create", "create-retry", "snapshot", "clone", "expand", "publish", "unpublish", "delete", "delete-retry"] as const;
export type OpKind = (typeof OP_KINDS)[number];
/** Operations that need the node-agent (the others only need the controller side). */
export const NODE_OPS: ReadonlySet<OpKind> = new Set(["publish", "unpublish"]);
/** Operations that are one CreateVolume call (the journal failover figure is taken on them). */
export const CREATE_OPS: ReadonlySet<OpKind> = new Set(["create", "create-retry", "clone"]);

/** How often each operation is chosen (when it has a target; otherwise a create is done). */
const WEIGHTS: Record<OpKind, number> = {
  create: 24,
  "create-retry": 8,
  snapshot: 8,
  clone: 8,
  expand: 8,
  publish: 12,
  unpublish: 10,
  delete: 14,
  "delete-retry": 6,
};

const MiB = 1024 * 1024;
export const VOLUME_BYTES = 32 * MiB;
/** How long a delete refused because a node still holds the volume (its reports on their way) is asked again. */
const IN_USE_RETRY_MS = 30_000;
/** Loop devices are shared with the machine: at most this many volumes staged at once. */
const MAX_ON_NODE = 4;

/** What the CO knows of a step: done, not done, or unknown (given up / failed). */
export type Level = "no" | "yes" | "maybe";

export interface OpRecord {
  kind: OpKind;
  /** ms since the run started. */
  start: number;
  end: number;
  ok: boolean;
  /** The final error's code name, if it failed. */
  code?: string;
  detail?: string;
  /** Part of the settle or teardown phase (not counted as a run operation). */
  phase: "run" | "settle" | "teardown";
}

type CreateVolumeRequest = ClientRequestOf<"Controller", "CreateVolume">;

export interface ModelVolume {
  name: string;
  request: CreateVolumeRequest;
  /** Set once the create was acknowledged. */
  id?: string;
  uuid?: string;
  sizeBytes: number;
  /** created: acknowledged; unknown: given up (retried in the settle phase); failed: a final error. */
  state: "creating" | "created" | "unknown" | "failed" | "deleting-unknown" | "deleted";
  busy: boolean;
  claimed: Level;
  staged: Level;
  published: Level;
  stagingPath: string;
  targetPath: string;
}

export interface ModelSnapshot {
  name: string;
  request: ClientRequestOf<"Controller", "CreateSnapshot">;
  id?: string;
  uuid?: string;
  sizeBytes: number;
  state: "creating" | "created" | "unknown" | "failed" | "deleted";
}

/** What went against the spec or the model, seen by the client itself. */
export interface Finding {
  what: "create-retry answered another volume" | "unexpected final error" | "teardown step failed" | "service did not come back";
  example: string;
}

export interface WorkloadOptions {
  co: CoClient;
  random: Random;
  nodeId: string;
  /** The fake kubelet directory for staging and target paths. */
  kubeletDir: string;
  /** ms since the run started. */
  clock: () => number;
  namePrefix: string;
}

const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] as string[] } };
const isNotFound = (err: unknown) => err instanceof CallFailed && err.code === GrpcCode.NOT_FOUND;
const level = (ok: boolean): Level => (ok ? "yes" : "maybe");

export class Workload {
  readonly volumes = new Map<string, ModelVolume>();
  readonly snapshots = new Map<string, ModelSnapshot>();
  readonly records: OpRecord[] = [];
  readonly findings: Finding[] = [];
  #n = 0;

  constructor(private readonly o: WorkloadOptions) {}

  // ------------------------------------------------------------------ choosing

  #live = (v: ModelVolume) => v.state === "created" && !v.busy;
  #onNode = (v: ModelVolume) => v.claimed !== "no" || v.staged !== "no" || v.published !== "no";

  /** The operations that have a target right now. */
  eligible(): OpKind[] {
    const vols = [...this.volumes.values()];
    const live = vols.filter(this.#live);
    const onNode = vols.filter(this.#onNode).length;
    const has: Record<OpKind, boolean> = {
      create: true,
      "create-retry": live.length > 0,
      snapshot: live.length > 0,
      clone: live.length > 0 || [...this.snapshots.values()].some((s) => s.state === "created"),
      expand: live.length > 0,
      publish: onNode < MAX_ON_NODE && live.some((v) => !this.#onNode(v)),
      unpublish: live.some(this.#onNode),
      delete: live.some((v) => !this.#onNode(v)),
      "delete-retry": vols.some((v) => v.state === "deleted" && !v.busy),
    };
    return OP_KINDS.filter((k) => has[k]);
  }

  /** A weighted random choice among the eligible operations. */
  choose(): OpKind {
    const kinds = this.eligible();
    const total = kinds.reduce((s, k) => s + WEIGHTS[k], 0);
    let r = this.o.random.next() * total;
    for (const k of kinds) {
      r -= WEIGHTS[k];
      if (r < 0) return k;
    }
    return "create";
  }

  /** Runs one operation of `kind` (a create when it has no target any more). */
  async run(kind: OpKind, phase: OpRecord["phase"] = "run"): Promise<OpRecord> {
    const start = this.o.clock();
    const done = (ok: boolean, err?: unknown): OpRecord => {
      const rec: OpRecord = { kind, start, end: this.o.clock(), ok, phase };
      if (err instanceof CallFailed) {
        rec.code = err.codeName;
        rec.detail = err.details.slice(0, 200);
        if (!err.gaveUp) this.findings.push({ what: "unexpected final error", example: `${kind}: ${err.message.slice(0, 200)}` });
      } else if (err) {
        rec.code = "HARNESS";
        rec.detail = String((err as Error)?.message ?? err).slice(0, 200);
      }
      this.records.push(rec);
      return rec;
    };
    try {
      await this.#do(kind);
      return done(true);
    } catch (err) {
      return done(false, err);
    }
  }

  /** The volume an op works on, marked busy; undefined if none is eligible. */
  #take(filter: (v: ModelVolume) => boolean): ModelVolume | undefined {
    const candidates = [...this.volumes.values()].filter((v) => !v.busy && filter(v));
    if (candidates.length === 0) return undefined;
    const v = this.o.random.pick(candidates);
    v.busy = true;
    return v;
  }

  async #do(kind: OpKind): Promise<void> {
    switch (kind) {
      case "create":
        return this.#create();
      case "create-retry":
        return this.#with(
          (v) => v.state === "created",
          (v) => this.#createRetry(v),
        );
      case "snapshot":
        return this.#with(
          (v) => v.state === "created",
          (v) => this.#snapshot(v),
        );
      case "clone":
        return this.#clone();
      case "expand":
        return this.#with(
          (v) => v.state === "created",
          (v) => this.#expand(v),
        );
      case "publish":
        return this.#with(
          (v) => v.state === "created" && !this.#onNode(v),
          (v) => this.publish(v),
        );
      case "unpublish":
        return this.#with(
          (v) => v.state === "created" && this.#onNode(v),
          (v) => this.unpublish(v),
        );
      case "delete":
        return this.#with(
          (v) => v.state === "created" && !this.#onNode(v),
          (v) => this.deleteVolume(v),
        );
      case "delete-retry":
        return this.#with(
          (v) => v.state === "deleted",
          (v) => this.deleteVolume(v),
        );
      default: {
        const never: never = kind;
        throw new Error(`unknown op ${never}`);
      }
    }
  }

  /** Runs `body` on an eligible volume (choose() and run() in one tick: eligible() promised one; a create otherwise). */
  async #with(filter: (v: ModelVolume) => boolean, body: (v: ModelVolume) => Promise<void>): Promise<void> {
    const v = this.#take(filter);
    if (!v) return this.#create();
    try {
      return await body(v);
    } finally {
      v.busy = false;
    }
  }

  // ------------------------------------------------------------------ operations

  #name(what: string): string {
    this.#n++;
    return `${this.o.namePrefix}-${what}-${this.#n}`;
  }

  #newVolume(name: string, request: CreateVolumeRequest): ModelVolume {
    const v: ModelVolume = {
      name,
      request,
      sizeBytes: Number(request.capacity_range?.required_bytes ?? VOLUME_BYTES),
      state: "creating",
      busy: true,
      claimed: "no",
      staged: "no",
      published: "no",
      stagingPath: path.join(this.o.kubeletDir, "staging", name),
      targetPath: path.join(this.o.kubeletDir, "pods", name, "mount"),
    };
    this.volumes.set(name, v);
    return v;
  }

  async #create(): Promise<void> {
    const name = this.#name("vol");
    const v = this.#newVolume(name, { name, capacity_range: { required_bytes: String(VOLUME_BYTES) }, volume_capabilities: [cap] });
    try {
      return await this.resolveCreate(v);
    } finally {
      v.busy = false;
    }
  }

  /** CreateVolume with the volume's request (also the settle phase's retry of a given-up create). */
  async resolveCreate(v: ModelVolume): Promise<void> {
    try {
      const res = await this.o.co.controller("CreateVolume", v.request);
      const id = res.volume?.volume_id ?? "";
      v.id = id;
      v.uuid = decomposeVolumeId(id).uuid;
      v.sizeBytes = Number(res.volume?.capacity_bytes ?? v.sizeBytes);
      v.state = "created";
    } catch (err) {
      v.state = err instanceof CallFailed && err.gaveUp ? "unknown" : "failed";
      throw err;
    }
  }

  async #createRetry(v: ModelVolume): Promise<void> {
    const res = await this.o.co.controller("CreateVolume", v.request);
    const id = res.volume?.volume_id;
    if (id !== v.id) this.findings.push({ what: "create-retry answered another volume", example: `${v.name}: ${v.id} then ${id}` });
  }

  async #snapshot(v: ModelVolume): Promise<void> {
    const name = this.#name("snap");
    const s: ModelSnapshot = { name, request: { name, source_volume_id: v.id ?? "" }, sizeBytes: 0, state: "creating" };
    this.snapshots.set(name, s);
    return this.resolveSnapshot(s);
  }

  async resolveSnapshot(s: ModelSnapshot): Promise<void> {
    try {
      const res = await this.o.co.controller("CreateSnapshot", s.request);
      s.id = res.snapshot?.snapshot_id ?? "";
      s.uuid = decomposeVolumeId(s.id).uuid;
      s.sizeBytes = Number(res.snapshot?.size_bytes ?? 0);
      s.state = "created";
    } catch (err) {
      s.state = err instanceof CallFailed && err.gaveUp ? "unknown" : "failed";
      throw err;
    }
  }

  async #clone(): Promise<void> {
    const snaps = [...this.snapshots.values()].filter((s) => s.state === "created");
    const fromSnapshot = snaps.length > 0 && this.o.random.next() < 0.5;
    const source = fromSnapshot ? undefined : this.#take((v) => v.state === "created");
    const snap = fromSnapshot ? this.o.random.pick(snaps) : undefined;
    if (!source && !snap) return this.#create();
    const name = this.#name("clone");
    const bytes = Math.max(VOLUME_BYTES, source?.sizeBytes ?? snap?.sizeBytes ?? 0);
    const v = this.#newVolume(name, {
      name,
      capacity_range: { required_bytes: String(bytes) },
      volume_capabilities: [cap],
      volume_content_source: source ? { volume: { volume_id: source.id ?? "" } } : { snapshot: { snapshot_id: snap?.id ?? "" } },
    });
    try {
      return await this.resolveCreate(v);
    } finally {
      v.busy = false;
      if (source) source.busy = false;
    }
  }

  async #expand(v: ModelVolume): Promise<void> {
    const want = v.sizeBytes + 8 * MiB;
    const res = await this.o.co.controller("ControllerExpandVolume", {
      volume_id: v.id ?? "",
      capacity_range: { required_bytes: String(want) },
      volume_capability: cap,
    });
    v.sizeBytes = Number(res.capacity_bytes ?? want);
  }

  /** ControllerPublishVolume, NodeStageVolume, NodePublishVolume: each retried as a CO does; the model follows each step. */
  async publish(v: ModelVolume): Promise<void> {
    const volume_id = v.id ?? "";
    v.claimed = "maybe";
    const pub = await this.o.co.controller("ControllerPublishVolume", { volume_id, node_id: this.o.nodeId, volume_capability: cap, readonly: false });
    v.claimed = "yes";
    const publish_context = pub.publish_context ?? {};
    await mkdir(v.stagingPath, { recursive: true });
    v.staged = "maybe";
    await this.o.co.node("NodeStageVolume", { volume_id, publish_context, staging_target_path: v.stagingPath, volume_capability: cap });
    v.staged = "yes";
    await mkdir(path.dirname(v.targetPath), { recursive: true });
    v.published = "maybe";
    await this.o.co.node("NodePublishVolume", {
      volume_id,
      publish_context,
      staging_target_path: v.stagingPath,
      target_path: v.targetPath,
      volume_capability: cap,
      readonly: false,
    });
    v.published = "yes";
  }

  /** NodeUnpublishVolume, NodeUnstageVolume, ControllerUnpublishVolume (NOT_FOUND counts as done: nothing was there). */
  async unpublish(v: ModelVolume): Promise<void> {
    const volume_id = v.id ?? "";
    const step = async (was: Level, call: () => Promise<unknown>): Promise<Level> => {
      if (was === "no") return "no";
      try {
        await call();
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return "no";
    };
    try {
      v.published = await step(v.published, () => this.o.co.node("NodeUnpublishVolume", { volume_id, target_path: v.targetPath }));
      v.staged = await step(v.staged, () => this.o.co.node("NodeUnstageVolume", { volume_id, staging_target_path: v.stagingPath }));
      v.claimed = await step(v.claimed, () => this.o.co.controller("ControllerUnpublishVolume", { volume_id, node_id: this.o.nodeId }));
    } catch (err) {
      // What we were undoing may or may not be undone now.
      for (const f of ["published", "staged", "claimed"] as const) if (v[f] === "yes") v[f] = level(false);
      throw err;
    }
  }

  /**
   * DeleteVolume (a repeat of an acknowledged delete must answer OK too). Refused while the node's
   * reports of its unpublish and unstage are on their way (in use means in use: docs/controller.md),
   * it is asked again with backoff, as external-provisioner does, for up to IN_USE_RETRY_MS.
   */
  async deleteVolume(v: ModelVolume): Promise<void> {
    try {
      const until = Date.now() + IN_USE_RETRY_MS;
      for (let wait = 100; ; wait = Math.min(2 * wait, 2000)) {
        const inUse = await this.o.co.controller("DeleteVolume", { volume_id: v.id ?? "" }).then(
          () => false,
          (err: unknown) => {
            if (err instanceof CallFailed && err.code === GrpcCode.FAILED_PRECONDITION && /in use/.test(err.details) && Date.now() < until) return true;
            throw err;
          },
        );
        if (!inUse) break;
        await new Promise((r) => setTimeout(r, wait));
      }
      v.state = "deleted";
    } catch (err) {
      if (v.state !== "deleted") v.state = err instanceof CallFailed && err.gaveUp ? "deleting-unknown" : v.state;
      throw err;
    }
  }

  async deleteSnapshot(s: ModelSnapshot): Promise<void> {
    await this.o.co.controller("DeleteSnapshot", { snapshot_id: s.id ?? "" });
    s.state = "deleted";
  }

  // ------------------------------------------------------------------ settle and teardown

  /** Re-runs every operation that was given up, as the CO eventually would, so each ends known. */
  async settle(): Promise<void> {
    for (const v of this.volumes.values()) {
      if (v.state === "unknown") await this.#phase("create", "settle", () => this.resolveCreate(v));
      else if (v.state === "deleting-unknown") await this.#phase("delete", "settle", () => this.deleteVolume(v));
    }
    for (const s of this.snapshots.values()) if (s.state === "unknown") await this.#phase("snapshot", "settle", () => this.resolveSnapshot(s));
  }

  /** Unpublishes everything that is (maybe) on the node, then deletes every snapshot and volume. */
  async teardown(): Promise<void> {
    for (const v of this.volumes.values()) if (this.#onNode(v)) await this.#phase("unpublish", "teardown", () => this.unpublish(v));
    for (const s of this.snapshots.values()) if (s.id && s.state !== "deleted") await this.#phase("delete", "teardown", () => this.deleteSnapshot(s));
    for (const v of this.volumes.values()) if (v.id && v.state !== "deleted") await this.#phase("delete", "teardown", () => this.deleteVolume(v));
  }

  async #phase(kind: OpKind, phase: "settle" | "teardown", body: () => Promise<void>): Promise<void> {
    const start = this.o.clock();
    try {
      await body();
      this.records.push({ kind, start, end: this.o.clock(), ok: true, phase });
    } catch (err) {
      const e = err instanceof CallFailed ? err : undefined;
      this.records.push({ kind, start, end: this.o.clock(), ok: false, code: e?.codeName ?? "HARNESS", phase });
      this.findings.push({
        what: phase === "teardown" ? "teardown step failed" : "unexpected final error",
        example: `${phase} ${kind}: ${String((err as Error)?.message ?? err).slice(0, 200)}`,
      });
    }
  }
}
