/**
 * Volumes and snapshots through the CSI endpoint, as any CO would drive them (the controller
 * validates, routes by cluster and answers with CSI codes), and `call` for any CSI RPC.
 */
import { randomUUID } from "node:crypto";
import type { AccessMode } from "@csi/contracts";
import { type ClientResponseOf, type CsiService, methodsOf } from "@csi/runtime";
import * as grpc from "@grpc/grpc-js";
import { formatBytes, parseSize } from "../domain/sizes.js";
import { csiIdOf } from "../domain/target.js";
import { usageError } from "../errors.js";
import { fields, table } from "../output.js";
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
function withRequestId(requestId: string | undefined): { requestId: string; md: grpc.Metadata } {
  const id = requestId ?? `csictl-${randomUUID()}`;
  const md = new grpc.Metadata();
  md.set("x-request-id", id);
  return { requestId: id, md };
}

/** A field CSI says a reply carries: a reply without it is the endpoint's fault. */
function answered<T>(x: T | null | undefined, what: string): T {
  if (x === null || x === undefined) throw new Error(`the endpoint answered without a ${what}`);
  return x;
}

type CsiVolume = NonNullable<ClientResponseOf<"Controller", "CreateVolume">["volume"]>;

const sourceOf = (v: CsiVolume) => v.content_source?.snapshot?.snapshot_id || v.content_source?.volume?.volume_id || undefined;

function volumeFields(v: CsiVolume, extra: [string, string | undefined][] = []): string {
  return fields([
    ["ID", v.volume_id],
    ["SIZE", `${formatBytes(v.capacity_bytes)} (${v.capacity_bytes} bytes)`],
    ["CLUSTER", v.volume_context.clusterID],
    ["POOL", v.volume_context.pool],
    ["IMAGE", v.volume_context.imageName],
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

export async function volumeCreate(s: Session, name: string, o: CreateVolumeOptions): Promise<void> {
  if (o.block && o.fs) throw usageError("--block and --fs exclude each other (a block volume has no filesystem)");
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
  const request = {
    name,
    capacity_range: { required_bytes: String(parseSize(o.size)), limit_bytes: o.limit ? String(parseSize(o.limit)) : "0" },
    volume_capabilities: [capability],
    parameters,
    ...(source ? { volume_content_source: source } : {}),
  };
  const { requestId, md } = withRequestId(o.requestId);
  const res = await s.csi("Controller").CreateVolume(request, md);
  const v = answered(res.volume, "volume");
  s.out.result({ requestId, volume: v }, () => volumeFields(v, [["REQUEST", requestId]]));
}

export async function volumeGet(s: Session, id: string): Promise<void> {
  const request = { volume_id: csiIdOf(id) };
  const res = await s.csi("Controller").ControllerGetVolume(request);
  const v = answered(res.volume, "volume");
  const nodes = res.status?.published_node_ids ?? [];
  const condition = res.status?.volume_condition;
  s.out.result(res, () =>
    volumeFields(v, [
      ["PUBLISHED ON", nodes.length ? nodes.join(", ") : "-"],
      ["CONDITION", condition ? (condition.abnormal ? `abnormal: ${condition.message}` : "normal") : undefined],
    ]),
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

export async function volumeList(s: Session, o: { maxEntries?: string; startingToken?: string }): Promise<void> {
  const max = maxEntries(o.maxEntries);
  const c = s.csi("Controller");
  const { entries, nextToken } = await pages((token) => c.ListVolumes({ max_entries: max ?? 0, starting_token: token }), max, o.startingToken);
  const rows = entries.map((e) => {
    const v = answered(e.volume, "volume");
    const st = e.status;
    return [
      v.volume_id,
      formatBytes(v.capacity_bytes),
      v.volume_context.clusterID,
      v.volume_context.pool,
      st?.published_node_ids?.length ? st.published_node_ids.join(",") : "-",
      st?.volume_condition?.abnormal ? "abnormal" : "normal",
    ];
  });
  s.out.result({ entries, ...(nextToken ? { nextToken } : {}) }, () => {
    const t = table(["VOLUME ID", "SIZE", "CLUSTER", "POOL", "PUBLISHED ON", "CONDITION"], rows);
    return nextToken ? `${t}\nmore: --starting-token ${nextToken}` : t;
  });
}

export async function volumeExpand(s: Session, id: string, o: { size: string; requestId?: string }): Promise<void> {
  const request = { volume_id: csiIdOf(id), capacity_range: { required_bytes: String(parseSize(o.size)) } };
  const { requestId, md } = withRequestId(o.requestId);
  const res = await s.csi("Controller").ControllerExpandVolume(request, md);
  s.out.result({ requestId, ...res }, () =>
    fields([
      ["ID", id],
      ["SIZE", `${formatBytes(res.capacity_bytes)} (${res.capacity_bytes} bytes)`],
      ["NODE EXPANSION", res.node_expansion_required ? "required" : "not required"],
      ["REQUEST", requestId],
    ]),
  );
}

export async function volumeDelete(s: Session, id: string, o: { requestId?: string }): Promise<void> {
  const request = { volume_id: csiIdOf(id) };
  const { requestId, md } = withRequestId(o.requestId);
  await s.csi("Controller").DeleteVolume(request, md);
  s.out.result({ requestId, deleted: id }, () => `deleted ${id} (request ${requestId})`);
}

type CsiSnapshot = NonNullable<ClientResponseOf<"Controller", "CreateSnapshot">["snapshot"]>;

const createdAt = (t: CsiSnapshot["creation_time"]) => (t ? new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)).toISOString() : undefined);

export async function snapshotCreate(s: Session, name: string, o: { source: string; param?: string[]; requestId?: string }): Promise<void> {
  const request = { name, source_volume_id: csiIdOf(o.source), parameters: parseParams(o.param) };
  const { requestId, md } = withRequestId(o.requestId);
  const res = await s.csi("Controller").CreateSnapshot(request, md);
  const snap = answered(res.snapshot, "snapshot");
  s.out.result({ requestId, snapshot: snap }, () =>
    fields([
      ["ID", snap.snapshot_id],
      ["SOURCE", snap.source_volume_id],
      ["SIZE", formatBytes(snap.size_bytes)],
      ["READY", snap.ready_to_use],
      ["CREATED", createdAt(snap.creation_time)],
      ["REQUEST", requestId],
    ]),
  );
}

export async function snapshotList(s: Session, o: { source?: string; id?: string; maxEntries?: string; startingToken?: string }): Promise<void> {
  const max = maxEntries(o.maxEntries);
  const filter = {
    ...(o.source ? { source_volume_id: csiIdOf(o.source) } : {}),
    ...(o.id ? { snapshot_id: csiIdOf(o.id, "snapshot id") } : {}),
  };
  const c = s.csi("Controller");
  const { entries, nextToken } = await pages((token) => c.ListSnapshots({ ...filter, max_entries: max ?? 0, starting_token: token }), max, o.startingToken);
  const rows = entries.map((e) => {
    const snap = answered(e.snapshot, "snapshot");
    return [snap.snapshot_id, snap.source_volume_id, formatBytes(snap.size_bytes), snap.ready_to_use ? "yes" : "no", createdAt(snap.creation_time)];
  });
  s.out.result({ entries, ...(nextToken ? { nextToken } : {}) }, () => {
    const t = table(["SNAPSHOT ID", "SOURCE VOLUME", "SIZE", "READY", "CREATED"], rows);
    return nextToken ? `${t}\nmore: --starting-token ${nextToken}` : t;
  });
}

export async function snapshotDelete(s: Session, id: string, o: { requestId?: string }): Promise<void> {
  const request = { snapshot_id: csiIdOf(id, "snapshot id") };
  const { requestId, md } = withRequestId(o.requestId);
  await s.csi("Controller").DeleteSnapshot(request, md);
  s.out.result({ requestId, deleted: id }, () => `deleted ${id} (request ${requestId})`);
}

const SERVICES: CsiService[] = ["Identity", "Controller", "Node", "GroupController"];

/** `call Controller.CreateVolume '{…}'`: any CSI RPC with a JSON request; the answer is printed as JSON. */
export async function call(s: Session, target: string, body: string | undefined, o: { requestId?: string }): Promise<void> {
  const [service, method, ...rest] = target.split(".");
  if (!SERVICES.includes(service as CsiService) || !method || rest.length) {
    throw usageError(`call takes <Service.Method>, the service one of ${SERVICES.join(", ")}: got ${JSON.stringify(target.slice(0, 80))}`);
  }
  const methods = methodsOf(service as CsiService) as string[];
  if (!methods.includes(method)) throw usageError(`${service} has no method ${JSON.stringify(method.slice(0, 60))}; it has ${methods.join(", ")}`);
  let request: unknown = {};
  if (body !== undefined) {
    try {
      request = JSON.parse(body);
    } catch (err) {
      throw usageError(`the request is not JSON: ${(err as Error).message}`);
    }
  }
  const { md } = withRequestId(o.requestId);
  const client: Record<string, unknown> = s.csi(service as CsiService);
  const call = client[method];
  const res = typeof call === "function" ? await (call as (req: unknown, md: grpc.Metadata) => Promise<unknown>)(request, md) : undefined;
  process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
}
