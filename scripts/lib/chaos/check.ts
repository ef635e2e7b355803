/**
 * The invariants of the chaos run, checked against what was observed (pool directory, Redis
 * projection, a replay of the log, the node-agent's state file, mounts and loop devices, the
 * controller's listings) and what the CO was told (the workload's model). Pure: observation and
 * model in, violations out, so each rule has a unit test (test/chaos.test.ts). Rules with no
 * observation behind them (the client's own findings, the failover bound) are added by the driver.
 */
import { snapshotImageName, volumeImageName } from "@csi/contracts";
import type { ImageKind } from "@csi/journal/fold";
import type { Keys } from "@csi/journal/redis";
import type { Finding, Level, ModelSnapshot, ModelVolume } from "./workload.js";

/** One Redis key's value, as read (type and contents). */
export type KeyValue =
  | { type: "hash"; fields: Record<string, string> }
  | { type: "set"; members: string[] }
  | { type: "zset"; members: string[] }
  | { type: "string"; value: string }
  | { type: "other"; value: string };
export type Keyspace = Map<string, KeyValue>;

export interface NodeVolume {
  uuid: string;
  imagePath: string;
  stagingPath?: string | undefined;
  publishes: string[];
}

export interface Observation {
  label: string;
  /** File names in the pool directory. */
  poolFiles: string[];
  /** The projection's keys of the cluster (locks and the replay watermark left out). */
  projection: Keyspace;
  /** The same keys, replayed from the log into an empty Redis database by the journal's own projector. */
  replayed: Keyspace;
  /** Lock keys still present after the grace period ("key (ttl 812 ms)"). */
  locks: string[];
  /** The node-agent's state file: volumes with a staging path or publishes. */
  node: NodeVolume[];
  /** Mount points under the fake kubelet directory. */
  mounts: string[];
  /** Loop devices whose backing file is in the pool. */
  loops: { device: string; backingFile: string }[];
  /** Ids the controller lists (ListVolumes/ListSnapshots, paged), or why it could not list. */
  listed: { volumes: string[]; snapshots: string[] } | { error: string };
}

export interface Model {
  volumes: readonly ModelVolume[];
  snapshots: readonly ModelSnapshot[];
  findings: readonly Finding[];
  nodeId: string;
  keys: Keys;
}

export interface Invariant {
  name: string;
  violations: string[];
}

export const INVARIANTS = [
  "acknowledged create → one image + one reservation",
  "create retries answer the same volume",
  "no image without a reservation",
  "no reservation without an image",
  "no reservation the CO was not told of",
  "projection == replay of the log",
  "the log's replicas hold the same records",
  "acknowledged delete is gone",
  "node state == claims == CO's view",
  "no loop device / mount left over",
  "no lock held after settle",
  "no temp files in the pool",
  "no unexpected final error",
  "services come back after faults",
  "no service exits by itself",
  "teardown completes",
  "journal failover within the bound",
  "gc removes only images of uuids the log never named",
  "after every power cut: what the CO was told is there",
] as const;
export type InvariantName = (typeof INVARIANTS)[number];

const IMG = ".img";
const liveHash = (v: KeyValue | undefined): Record<string, string> | undefined =>
  v?.type === "hash" && v.fields._gone !== "1" && v.fields["csi.volname"] !== undefined ? v.fields : undefined;

interface Aggregate {
  kind: ImageKind;
  name: string;
  uuid?: string | undefined;
  id?: string | undefined;
  acked: boolean;
  deleted: boolean;
}

const aggregatesOf = (m: Model): Aggregate[] => [
  ...m.volumes.map((v) => ({ kind: "volume" as const, name: v.name, uuid: v.uuid, id: v.id, acked: v.state === "created", deleted: v.state === "deleted" })),
  ...m.snapshots.map((s) => ({
    kind: "snapshot" as const,
    name: s.name,
    uuid: s.uuid,
    id: s.id,
    acked: s.state === "created",
    deleted: s.state === "deleted",
  })),
];

/** Every live record of the projection: kind, uuid, fields. */
function liveRecords(o: Observation, k: Keys): { kind: ImageKind; uuid: string; key: string; fields: Record<string, string> }[] {
  const out: { kind: ImageKind; uuid: string; key: string; fields: Record<string, string> }[] = [];
  for (const kind of ["volume", "snapshot"] as const) {
    const prefix = k.record(kind, "");
    for (const [key, v] of o.projection) {
      const fields = key.startsWith(prefix) ? liveHash(v) : undefined;
      if (fields) out.push({ kind, uuid: key.slice(prefix.length), key, fields });
    }
  }
  return out;
}

const canonical = (v: KeyValue | undefined): string => {
  if (!v) return "(absent)";
  switch (v.type) {
    case "hash":
      return JSON.stringify(Object.fromEntries(Object.entries(v.fields).sort(([a], [b]) => a.localeCompare(b))));
    case "set":
    case "zset":
      return `${v.type} ${JSON.stringify([...v.members].sort())}`;
    default:
      return `${v.type} ${JSON.stringify(v.value)}`;
  }
};

/** The first difference between two values, shortly. */
function diff(a: KeyValue | undefined, b: KeyValue | undefined): string {
  if (a?.type === "hash" && b?.type === "hash") {
    const fields = [...new Set([...Object.keys(a.fields), ...Object.keys(b.fields)])].sort();
    const f = fields.find((x) => a.fields[x] !== b.fields[x]);
    if (f) return `${f}: ${JSON.stringify(a.fields[f] ?? null)?.slice(0, 60)} vs replayed ${JSON.stringify(b.fields[f] ?? null)?.slice(0, 60)}`;
  }
  return `${canonical(a).slice(0, 80)} vs replayed ${canonical(b).slice(0, 80)}`;
}

const empty = (): Record<InvariantName, string[]> => Object.fromEntries(INVARIANTS.map((n) => [n, []])) as unknown as Record<InvariantName, string[]>;
const asList = (v: Record<InvariantName, string[]>): Invariant[] => INVARIANTS.map((name) => ({ name, violations: v[name] }));

/** Sums the violations of several checks (rule by rule, in INVARIANTS order). */
export function mergeInvariants(...lists: Invariant[][]): Invariant[] {
  return INVARIANTS.map((name) => ({ name, violations: lists.flatMap((l) => l.find((i) => i.name === name)?.violations ?? []) }));
}

/** What the client itself saw go wrong (once per run, after the teardown). */
export function checkFindings(m: Pick<Model, "findings" | "volumes" | "snapshots">): Invariant[] {
  const v = empty();
  for (const f of m.findings) {
    if (f.what === "create-retry answered another volume") v["create retries answer the same volume"].push(f.example);
    if (f.what === "unexpected final error") v["no unexpected final error"].push(f.example);
    if (f.what === "teardown step failed") v["teardown completes"].push(f.example);
    if (f.what === "service did not come back") v["services come back after faults"].push(f.example);
  }
  for (const x of [...m.volumes, ...m.snapshots]) {
    if (x.state === "unknown" || x.state === "deleting-unknown") v["no unexpected final error"].push(`${x.name}: still no answer after the settle phase`);
  }
  return asList(v);
}

/** The rules that look at the system, against the CO's view at the time of the observation. */
export function checkObservation(o: Observation, m: Model): Invariant[] {
  const k = m.keys;
  const v = empty();
  const at = (s: string) => `${s} [${o.label}]`;
  const records = liveRecords(o, k);
  const images = new Set(o.poolFiles.filter((f) => f.endsWith(IMG)).map((f) => f.slice(0, -IMG.length)));
  const listed = "error" in o.listed ? undefined : new Set([...o.listed.volumes, ...o.listed.snapshots]);
  if ("error" in o.listed) v["acknowledged create → one image + one reservation"].push(at(`cannot list: ${o.listed.error}`));
  const dirOf = (kind: ImageKind) => o.projection.get(k.dir(kind));
  const dirEntry = (kind: ImageKind, name: string) => {
    const d = dirOf(kind);
    return d?.type === "hash" ? d.fields[k.dirField(kind, name)] : undefined;
  };

  // Acknowledged creates: the name points at the acknowledged uuid, whose record is live and
  // complete, whose image is in the pool, and no other record carries the name.
  for (const a of aggregatesOf(m).filter((x) => x.acked)) {
    const rule = v["acknowledged create → one image + one reservation"];
    const uuid = a.uuid ?? "";
    const entry = dirEntry(a.kind, a.name);
    if (entry !== uuid) rule.push(at(`${a.kind} ${a.name}: name directory → ${entry ?? "nothing"}, acknowledged ${uuid}`));
    const rec = records.find((r) => r.kind === a.kind && r.uuid === uuid);
    if (!rec) rule.push(at(`${a.kind} ${a.name} (${uuid}): no live record`));
    else if (!rec.fields["csi.imageid"]) rule.push(at(`${a.kind} ${a.name} (${uuid}): record not complete (no image id)`));
    const image = rec?.fields["csi.imagename"] ?? (a.kind === "volume" ? volumeImageName(uuid) : snapshotImageName(uuid));
    if (!images.has(image)) rule.push(at(`${a.kind} ${a.name} (${uuid}): image ${image} not in the pool`));
    const same = records.filter((r) => r.kind === a.kind && r.fields["csi.volname"] === a.name);
    if (same.length > 1) rule.push(at(`${a.kind} ${a.name}: ${same.length} live records (${same.map((r) => r.uuid).join(", ")})`));
    if (listed && a.id && !listed.has(a.id)) rule.push(at(`${a.kind} ${a.name} (${uuid}): not listed`));
  }

  // Images and reservations pair up; the CO knows every reservation.
  const reservedImages = new Set(records.map((r) => r.fields["csi.imagename"]));
  for (const img of images) if (!reservedImages.has(img)) v["no image without a reservation"].push(at(`${img}${IMG}`));
  const known = new Map(aggregatesOf(m).map((a) => [`${a.kind}/${a.name}`, a]));
  for (const r of records) {
    const img = r.fields["csi.imagename"] ?? "";
    if (!images.has(img)) v["no reservation without an image"].push(at(`${r.kind} ${r.fields["csi.volname"]} (${r.uuid}): image ${img} missing`));
    else if (!r.fields["csi.imageid"])
      v["no reservation without an image"].push(at(`${r.kind} ${r.fields["csi.volname"]} (${r.uuid}): reserved, never recorded as created`));
    // (A record of an acknowledged delete is the rule "acknowledged delete is gone".)
    const a = known.get(`${r.kind}/${r.fields["csi.volname"]}`);
    if (a?.uuid !== r.uuid || !(a.acked || a.deleted)) v["no reservation the CO was not told of"].push(at(`${r.kind} ${r.fields["csi.volname"]} (${r.uuid})`));
  }

  // The projection is exactly what the log replays to.
  for (const key of [...new Set([...o.projection.keys(), ...o.replayed.keys()])].sort()) {
    const a = o.projection.get(key);
    const b = o.replayed.get(key);
    if (canonical(a) !== canonical(b)) v["projection == replay of the log"].push(at(`${key}: ${diff(a, b)}`));
  }

  // Acknowledged deletes: no live record, no name entry, no image, not listed.
  for (const a of aggregatesOf(m).filter((x) => x.deleted && x.uuid)) {
    const rule = v["acknowledged delete is gone"];
    const uuid = a.uuid as string;
    if (records.some((r) => r.kind === a.kind && r.uuid === uuid)) rule.push(at(`${a.kind} ${a.name} (${uuid}): record still live`));
    if (dirEntry(a.kind, a.name) === uuid) rule.push(at(`${a.kind} ${a.name}: name still points at ${uuid}`));
    const image = a.kind === "volume" ? volumeImageName(uuid) : snapshotImageName(uuid);
    if (images.has(image)) rule.push(at(`${a.kind} ${a.name}: image ${image} still in the pool`));
    if (listed && a.id && listed.has(a.id)) rule.push(at(`${a.kind} ${a.name}: still listed`));
  }

  checkNode(o, m, records, v["node state == claims == CO's view"], v["no loop device / mount left over"], at);

  for (const l of o.locks) v["no lock held after settle"].push(at(l));
  for (const f of o.poolFiles) if (f.startsWith(".tmp-")) v["no temp files in the pool"].push(at(f));
  return asList(v);
}

/** Whether a fact matches what the CO knows (a "maybe" matches either way). */
const agrees = (want: Level, have: boolean) => want === "maybe" || (want === "yes") === have;

function checkNode(o: Observation, m: Model, records: ReturnType<typeof liveRecords>, rule: string[], leftovers: string[], at: (s: string) => string): void {
  const claimField = `claim.${m.nodeId}`;
  const claimed = new Set(records.filter((r) => r.kind === "volume" && r.fields[claimField] !== undefined).map((r) => r.uuid));
  const set = o.projection.get(m.keys.nodeClaims(m.nodeId));
  const indexed = new Set(set?.type === "set" ? set.members : []);
  const node = new Map(o.node.map((n) => [n.uuid, n]));
  for (const u of claimed) if (!indexed.has(u)) rule.push(at(`claim of ${u} missing from ${m.keys.nodeClaims(m.nodeId)}`));
  for (const u of indexed) if (!claimed.has(u)) rule.push(at(`${u} in ${m.keys.nodeClaims(m.nodeId)} without a claim`));
  for (const n of o.node)
    if (!claimed.has(n.uuid)) rule.push(at(`node holds ${n.uuid} (staged ${n.stagingPath ?? "no"}, ${n.publishes.length} publishes) without a claim`));
  for (const mv of m.volumes) {
    if (!mv.uuid) continue;
    const n = node.get(mv.uuid);
    if (!agrees(mv.claimed, claimed.has(mv.uuid))) rule.push(at(`${mv.name}: claimed ${claimed.has(mv.uuid)}, CO says ${mv.claimed}`));
    if (!agrees(mv.staged, n?.stagingPath === mv.stagingPath)) rule.push(at(`${mv.name}: staged at ${n?.stagingPath ?? "nothing"}, CO says ${mv.staged}`));
    if (!agrees(mv.published, !!n?.publishes.includes(mv.targetPath)))
      rule.push(at(`${mv.name}: published ${!!n?.publishes.includes(mv.targetPath)}, CO says ${mv.published}`));
  }
  // Mounts and loop devices: exactly those of what the node's state says is staged/published.
  const wantMounts = new Set(o.node.flatMap((n) => [...(n.stagingPath ? [n.stagingPath] : []), ...n.publishes]));
  const mounted = new Set(o.mounts);
  for (const p of mounted) if (!wantMounts.has(p)) leftovers.push(at(`mount ${p}`));
  for (const p of wantMounts) if (!mounted.has(p)) rule.push(at(`node state says ${p} is mounted; it is not`));
  const staged = new Set(o.node.filter((n) => n.stagingPath).map((n) => n.imagePath));
  for (const l of o.loops) if (!staged.has(l.backingFile)) leftovers.push(at(`${l.device} → ${l.backingFile}`));
}
