/**
 * Volumes and snapshots through the CSI endpoint, as any CO would drive them (the controller
 * validates, routes by cluster and answers with CSI codes), and `call` for any CSI RPC. Every
 * CSI message csictl prints is proto3 JSON (csi-json.ts): lowerCamelCase names, int64 as
 * strings, RFC 3339 times; a list is `{items: […]}` of the same objects `get` prints.
 */
import { randomUUID } from "node:crypto";
import { type AccessMode, DriverError, decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, type CsiService, methodsOf } from "@csi/runtime";
import * as grpc from "@grpc/grpc-js";
import { csiMethodJson } from "../csi-json.js";
import { formatBytes, parseSize } from "../domain/sizes.js";
import { csiIdOf } from "../domain/target.js";
import { usageError } from "../errors.js";
import { type Column, fields, listing } from "../output.js";
import { volumeIdNamed } from "../resolve.js";
import type { Session } from "../session.js";

const csiMode = (mode: string) => mode.toUpperCase().replaceAll("-", "_") as AccessMode;

/** `k=v` pairs into a map (a repeated key: the last one wins). */
export function parseParams(pairs: string[] = []): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i <= 0) throw usageError(`--param takes key=value, got ${JSON.stringify(p.slice(0, 40))}`);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

/** gRPC metadata carrying our request id, so the journal's events and the node's reports name it. */
export function withRequestId(requestId: string | undefined): { requestId: string; md: grpc.Metadata } {
  const id = requestId ?? `csictl-${randomUUID()}`;
  const md = new grpc.Metadata();
  md.set("x-request-id", id);
  return { requestId: id, md };
}

/** A CSI Volume as proto3 JSON prints it (the fields csictl shows). */
export interface VolumeJson {
  volumeId: string;
  capacityBytes: string;
  volumeContext: Record<string, string>;
  contentSource?: { snapshot?: { snapshotId: string }; volume?: { volumeId: string } };
}
interface VolumeStatusJson {
  publishedNodeIds: string[];
  volumeCondition?: { abnormal: boolean; message: string };
}
/** A volume as `volume get` and every item of `volume list` print it: ListVolumesResponse.Entry = ControllerGetVolumeResponse. */
interface VolumeEntry {
  volume: VolumeJson;
  status?: VolumeStatusJson;
}
interface SnapshotJson {
  sizeBytes: string;
  snapshotId: string;
  sourceVolumeId: string;
  creationTime?: string;
  readyToUse: boolean;
  groupSnapshotId: string;
}
interface SnapshotEntry {
  snapshot: SnapshotJson;
}

/** A field CSI says a reply carries: a reply without it is the endpoint's fault. */
function answered<T>(x: T | null | undefined, what: string): T {
  if (x === null || x === undefined) throw new Error(`the endpoint answered without a ${what}`);
  return x;
}

/** A Controller answer as proto3 JSON, read as the shape csictl knows it has. */
const asJson = <T>(method: string, answer: unknown): T => csiMethodJson("Controller", method).response<T>(answer);

const sourceOf = (v: VolumeJson) => v.contentSource?.snapshot?.snapshotId || v.contentSource?.volume?.volumeId || undefined;

/** What the driver said of a volume's condition: nothing (absent), or normal / abnormal with its message. */
export function conditionOf(status: VolumeStatusJson | undefined, withMessage: boolean): string | undefined {
  const c = status?.volumeCondition;
  if (!c) return undefined;
  return c.abnormal ? (withMessage && c.message ? `abnormal: ${c.message}` : "abnormal") : "normal";
}

function volumeFields(v: VolumeJson, extra: [string, string | undefined][] = []): string {
  return fields([
    ["ID", v.volumeId],
    ["SIZE", `${formatBytes(v.capacityBytes)} (${v.capacityBytes} bytes)`],
    ["CLUSTER", v.volumeContext.clusterID],
    ["POOL", v.volumeContext.pool],
    ["IMAGE", v.volumeContext.imageName],
    ["SOURCE", sourceOf(v)],
    ...extra,
  ]);
}

export interface CreateVolumeOptions {
  size: string;
  limit?: string;
  mode: string;
  block?: boolean;
  fs?: string;
  param?: string[];
  pool?: string;
  fromSnapshot?: string;
  fromVolume?: string;
  requestId?: string;
}

/** The CreateVolumeRequest of `name` with the command's options (checked: a usage error before anything is sent). */
export function createVolumeRequest(s: Session, name: string, o: CreateVolumeOptions) {
  if (o.block && o.fs) throw usageError("--block and --fs exclude each other (a block volume has no filesystem)");
  const size = parseSize(o.size);
  const limit = o.limit ? parseSize(o.limit) : 0;
  if (limit > 0 && limit < size) throw usageError(`--limit ${o.limit} is below --size ${o.size}: no capacity fits both`);
  if (o.fromSnapshot && o.fromVolume) throw usageError("--from-snapshot and --from-volume exclude each other");
  const parameters = parseParams(o.param);
  if (s.opts.cluster) parameters.clusterID = s.opts.cluster;
  if (o.pool) parameters.pool = o.pool;
  const capability = { access_mode: { mode: csiMode(o.mode) }, ...(o.block ? { block: {} } : { mount: { fs_type: o.fs ?? "" } }) };
  const source = o.fromSnapshot
    ? { snapshot: { snapshot_id: csiIdOf(o.fromSnapshot, "snapshot id") } }
    : o.fromVolume
      ? { volume: { volume_id: csiIdOf(o.fromVolume) } }
      : undefined;
  return {
    name,
    capacity_range: { required_bytes: String(size), limit_bytes: String(limit) },
    volume_capabilities: [capability],
    parameters,
    ...(source ? { volume_content_source: source } : {}),
  };
}

export async function volumeCreate(s: Session, name: string, o: CreateVolumeOptions): Promise<void> {
  const request = createVolumeRequest(s, name, o);
  const { requestId, md } = withRequestId(o.requestId);
  const res = await s.csi("Controller").CreateVolume(request, md);
  answered(res.volume, "volume");
  const { volume } = asJson<{ volume: VolumeJson }>("CreateVolume", res);
  s.out.result(
    { requestId, volume },
    () => volumeFields(volume, [["REQUEST", requestId]]),
    () => [volume.volumeId],
  );
}

/**
 * The CSI id of the volume `text` names (resolve.ts: the id, its request name, uuid or a unique
 * prefix, its PVC), checked against --cluster; NotFound (exit 1) when it names no volume.
 */
export async function volumeIdOf(s: Session, text: string): Promise<string> {
  const id = await volumeIdNamed(s, text);
  if (id === undefined) throw new DriverError("NotFound", `no volume is named ${JSON.stringify(text.slice(0, 128))} (${NAMED_BY})`);
  s.inCluster(id);
  return id;
}

/** What a volume argument may be. */
const NAMED_BY = "a volume id, or a live volume's request name, uuid, unique prefix of either, or namespace/pvc";

export async function volumeGet(s: Session, text: string): Promise<void> {
  const id = await volumeIdOf(s, text);
  const res = await s.csi("Controller").ControllerGetVolume({ volume_id: id });
  answered(res.volume, "volume");
  const entry = asJson<VolumeEntry>("ControllerGetVolume", res);
  const nodes = entry.status?.publishedNodeIds ?? [];
  s.out.result(
    entry,
    () =>
      volumeFields(entry.volume, [
        ["PUBLISHED ON", nodes.length ? nodes.join(", ") : "-"],
        ["CONDITION", conditionOf(entry.status, true)],
      ]),
    () => [entry.volume.volumeId],
  );
}

/** Every page of a CSI list (or one page when `max` is given), following next_token. */
async function pages<E>(
  list: (token: string) => Promise<{ entries: E[]; next_token: string }>,
  max: number | undefined,
  start = "",
): Promise<{ entries: E[]; nextToken: string }> {
  const entries: E[] = [];
  let token = start;
  for (;;) {
    const page = await list(token);
    entries.push(...page.entries);
    token = page.next_token;
    if (!token || max !== undefined) return { entries, nextToken: token };
  }
}

const maxEntries = (text: string | undefined) => {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw usageError(`--max-entries must be a positive whole number, got ${JSON.stringify(text)}`);
  return n;
};

/** The cluster a CSI volume or snapshot id names. */
function clusterOfId(id: string): string | undefined {
  try {
    return decomposeVolumeId(id).clusterID;
  } catch {
    return undefined;
  }
}

export const VOLUME_COLUMNS: Column<VolumeEntry>[] = [
  { head: "VOLUME ID", cell: (e) => e.volume.volumeId },
  { head: "SIZE", cell: (e) => formatBytes(e.volume.capacityBytes) },
  { head: "CLUSTER", cell: (e) => e.volume.volumeContext.clusterID },
  { head: "POOL", cell: (e) => e.volume.volumeContext.pool },
  { head: "PUBLISHED ON", cell: (e) => e.status?.publishedNodeIds.join(",") },
  { head: "CONDITION", cell: (e) => conditionOf(e.status, false) },
  { head: "IMAGE", cell: (e) => e.volume.volumeContext.imageName, wide: true },
  { head: "SOURCE", cell: (e) => sourceOf(e.volume), wide: true },
  { head: "MESSAGE", cell: (e) => e.status?.volumeCondition?.message, wide: true },
];

/** A page's next token: in the JSON, and as a hint for people on stderr. */
function moreHint(s: Session, nextToken: string) {
  if (nextToken) s.out.note(`more: --starting-token ${nextToken}`);
}

export async function volumeList(s: Session, o: { maxEntries?: string; startingToken?: string }): Promise<void> {
  const max = maxEntries(o.maxEntries);
  const c = s.csi("Controller");
  const { entries, nextToken } = await pages((token) => c.ListVolumes({ max_entries: max ?? 0, starting_token: token }), max, o.startingToken);
  const all = asJson<{ entries: VolumeEntry[] }>("ListVolumes", { entries, next_token: "" }).entries;
  // --cluster: that cluster's volumes (ListVolumes answers for every cluster behind the controller).
  const items = s.opts.cluster ? all.filter((e) => clusterOfId(e.volume.volumeId) === s.opts.cluster) : all;
  s.out.result(
    { items, ...(nextToken ? { nextToken } : {}) },
    (h) => (items.length === 0 && !h.headers ? "" : listing(VOLUME_COLUMNS, items, h)),
    () => items.map((e) => e.volume.volumeId),
  );
  moreHint(s, nextToken);
}

export async function volumeExpand(s: Session, text: string, o: { size: string; requestId?: string }): Promise<void> {
  const size = parseSize(o.size);
  const id = await volumeIdOf(s, text);
  const request = { volume_id: id, capacity_range: { required_bytes: String(size) } };
  const { requestId, md } = withRequestId(o.requestId);
  const res = asJson<{ capacityBytes: string; nodeExpansionRequired: boolean }>(
    "ControllerExpandVolume",
    await s.csi("Controller").ControllerExpandVolume(request, md),
  );
  if (BigInt(res.capacityBytes) > BigInt(size))
    s.out.note(`${id} is ${formatBytes(res.capacityBytes)} already, more than the ${formatBytes(size)} asked: a volume never shrinks, nothing changed`);
  s.out.result(
    { requestId, volumeId: id, ...res },
    () =>
      fields([
        ["ID", id],
        ["SIZE", `${formatBytes(res.capacityBytes)} (${res.capacityBytes} bytes)`],
        ["NODE EXPANSION", res.nodeExpansionRequired ? "required" : "not required"],
        ["REQUEST", requestId],
      ]),
    () => [id],
  );
}

const isNotFound = (err: unknown) => (err as { code?: unknown })?.code === grpc.status.NOT_FOUND;

/**
 * Whether the controller knows the object: CSI's DeleteVolume and DeleteSnapshot answer OK for
 * an id they do not know (they must be idempotent), so csictl asks ControllerGetVolume /
 * GetSnapshot first, as kubectl's delete reports NotFound (docs/csictl.md, "delete").
 */
async function exists(get: () => Promise<unknown>): Promise<boolean> {
  try {
    await get();
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

interface DeleteOptions {
  requestId?: string;
  ignoreNotFound?: boolean;
}

type Controller = CsiClient<"Controller">;

/** How each kind is looked up and deleted. */
const DELETES = {
  volume: {
    key: "volumeId",
    idOf: (s: Session, text: string) => volumeIdNamed(s, text),
    get: (c: Controller, volume_id: string) => c.ControllerGetVolume({ volume_id }),
    del: (c: Controller, volume_id: string, md: grpc.Metadata) => c.DeleteVolume({ volume_id }, md),
  },
  snapshot: {
    key: "snapshotId",
    idOf: async (_s: Session, text: string) => csiIdOf(text, "snapshot id"),
    get: (c: Controller, snapshot_id: string) => c.GetSnapshot({ snapshot_id }),
    del: (c: Controller, snapshot_id: string, md: grpc.Metadata) => c.DeleteSnapshot({ snapshot_id }, md),
  },
} as const;

/** Delete what is there; what is not is NotFound (exit 1), or nothing at all with --ignore-not-found. */
async function deleteKnown(s: Session, what: keyof typeof DELETES, id: string, o: DeleteOptions): Promise<void> {
  const kind = DELETES[what];
  const csiId = await kind.idOf(s, id);
  if (csiId !== undefined) s.inCluster(csiId);
  const c = s.csi("Controller");
  if (csiId === undefined || !(await exists(() => kind.get(c, csiId)))) {
    if (!o.ignoreNotFound) throw new DriverError("NotFound", `${what} ${id} not found (--ignore-not-found to accept that)`);
    s.out.result(
      { [kind.key]: id, deleted: false, notFound: true },
      () => "",
      () => [],
    );
    s.out.note(`${what} ${id} not found: nothing to delete`);
    return;
  }
  const { requestId, md } = withRequestId(o.requestId);
  await kind.del(c, csiId, md);
  s.out.result(
    { [kind.key]: csiId, deleted: true, requestId },
    () => `deleted ${what} ${csiId} (request ${requestId})`,
    () => [csiId],
  );
}

export const volumeDelete = (s: Session, id: string, o: DeleteOptions) => deleteKnown(s, "volume", id, o);

const yesNo = (b: boolean) => (b ? "yes" : "no");

const SNAPSHOT_COLUMNS: Column<SnapshotEntry>[] = [
  { head: "SNAPSHOT ID", cell: (e) => e.snapshot.snapshotId },
  { head: "SOURCE VOLUME", cell: (e) => e.snapshot.sourceVolumeId },
  { head: "SIZE", cell: (e) => formatBytes(e.snapshot.sizeBytes) },
  { head: "READY", cell: (e) => yesNo(e.snapshot.readyToUse) },
  { head: "CREATED", cell: (e) => e.snapshot.creationTime },
  { head: "GROUP", cell: (e) => e.snapshot.groupSnapshotId, wide: true },
];

export async function snapshotCreate(s: Session, name: string, o: { source: string; param?: string[]; requestId?: string }): Promise<void> {
  s.inCluster(o.source);
  const request = { name, source_volume_id: csiIdOf(o.source), parameters: parseParams(o.param) };
  const { requestId, md } = withRequestId(o.requestId);
  const res = await s.csi("Controller").CreateSnapshot(request, md);
  answered(res.snapshot, "snapshot");
  const { snapshot } = asJson<SnapshotEntry>("CreateSnapshot", res);
  s.out.result(
    { requestId, snapshot },
    () =>
      fields([
        ["ID", snapshot.snapshotId],
        ["SOURCE", snapshot.sourceVolumeId],
        ["SIZE", formatBytes(snapshot.sizeBytes)],
        ["READY", yesNo(snapshot.readyToUse)],
        ["CREATED", snapshot.creationTime],
        ["REQUEST", requestId],
      ]),
    () => [snapshot.snapshotId],
  );
}

export async function snapshotList(s: Session, o: { source?: string; id?: string; maxEntries?: string; startingToken?: string }): Promise<void> {
  const max = maxEntries(o.maxEntries);
  for (const id of [o.source, o.id]) if (id) s.inCluster(id);
  const filter = {
    ...(o.source ? { source_volume_id: csiIdOf(o.source) } : {}),
    ...(o.id ? { snapshot_id: csiIdOf(o.id, "snapshot id") } : {}),
  };
  const c = s.csi("Controller");
  const { entries, nextToken } = await pages((token) => c.ListSnapshots({ ...filter, max_entries: max ?? 0, starting_token: token }), max, o.startingToken);
  const all = asJson<{ entries: SnapshotEntry[] }>("ListSnapshots", { entries, next_token: "" }).entries;
  const cluster = s.opts.cluster;
  const items = cluster ? all.filter((e) => clusterOfId(e.snapshot.snapshotId) === cluster) : all;
  s.out.result(
    { items, ...(nextToken ? { nextToken } : {}) },
    (h) => (items.length === 0 && !h.headers ? "" : listing(SNAPSHOT_COLUMNS, items, h)),
    () => items.map((e) => e.snapshot.snapshotId),
  );
  moreHint(s, nextToken);
}

export const snapshotDelete = (s: Session, id: string, o: DeleteOptions) => deleteKnown(s, "snapshot", id, o);

const SERVICES: CsiService[] = ["Identity", "Controller", "Node", "GroupController"];

/**
 * `call Controller.CreateVolume '{…}'`: any CSI RPC with a proto3 JSON request (lowerCamelCase
 * or proto field names; a field the request message does not have, at any depth, is a usage
 * error and nothing is sent, as grpcurl does); the answer is printed as proto3 JSON (-o yaml: YAML).
 */
export async function call(s: Session, target: string, body: string | undefined, o: { requestId?: string }): Promise<void> {
  const [service, method, ...rest] = target.split(".");
  if (!SERVICES.includes(service as CsiService) || !method || rest.length) {
    throw usageError(`call takes <Service.Method>, the service one of ${SERVICES.join(", ")}: got ${JSON.stringify(target.slice(0, 80))}`);
  }
  const methods = methodsOf(service as CsiService) as string[];
  if (!methods.includes(method)) throw usageError(`${service} has no method ${JSON.stringify(method.slice(0, 60))}; it has ${methods.join(", ")}`);
  if (s.out.format === "name") throw usageError("-o name: call prints no object names (-o json or -o yaml)");
  let json: unknown = {};
  if (body !== undefined) {
    try {
      json = JSON.parse(body);
    } catch (err) {
      throw usageError(`the request is not JSON: ${(err as Error).message}`);
    }
  }
  const codec = csiMethodJson(service as CsiService, method);
  const request = codec.request(json);
  const { md } = withRequestId(o.requestId);
  const client: Record<string, unknown> = s.csi(service as CsiService);
  const f = client[method] as (req: unknown, md: grpc.Metadata) => Promise<unknown>;
  const answer = codec.response(await f(request, md));
  // proto3 JSON is the only rendering of an arbitrary answer: a table is the same JSON.
  s.out.result(answer, () => JSON.stringify(answer, null, 2));
}
