/**
 * What must hold right after a power cut, once the stack is up again and every operation that was
 * in flight at the cut has its answer (docs/chaos.md, "--power-cut"): everything the CO was told
 * is there — each volume it was told was created (at least the size it was told), each snapshot,
 * each claim; nothing it was told was deleted is back — every image of a live volume exists and
 * verify finds nothing wrong but the one leftover a cut may leave (the image of a create that was
 * not answered, which no record names: docs/journal.md's crash table), and gc plans no removal of
 * anything the CO was told of.
 */
import { decomposeVolumeId, type Finding, type GcAction, type SnapshotView, type VolumeView } from "@csi/contracts";
import { JournalClient, retry } from "@csi/runtime";
import type { NatsConnection } from "@nats-io/transport-node";
import type { ModelSnapshot, ModelVolume } from "./workload.js";

/** How long the check asks again a journal that answers Unavailable after the power came back. */
const AFTER_POWER_ON_MS = 120_000;

export interface AfterCut {
  /** volume.get of each model volume with an id (undefined: not found). */
  volumes: Map<string, VolumeView | undefined>;
  snapshots: Map<string, SnapshotView | undefined>;
  findings: Finding[];
  gc: GcAction[];
}

export interface CutModel {
  volumes: readonly ModelVolume[];
  snapshots: readonly ModelSnapshot[];
  nodeId: string;
}

/** Reads what the journal holds of the model's volumes and snapshots, verify's findings and gc's plan. */
/**
 * A journal client that asks again, for up to AFTER_POWER_ON_MS, what a journal answers Unavailable:
 * right after the power is back (or a replicated stream's leader is elected) a journal may still
 * find its log unreachable for a moment (its fail-fast guard), as a CO would ask again.
 */
export function patientJournal(nc: NatsConnection, timeoutMs = 60_000): Pick<JournalClient, "call"> {
  const client = new JournalClient(nc, timeoutMs);
  return {
    call: ((...args: unknown[]) =>
      retry(() => (client.call as (...a: unknown[]) => Promise<unknown>).apply(client, args), {
        tries: Number.POSITIVE_INFINITY,
        deadline: Date.now() + AFTER_POWER_ON_MS,
        firstDelayMs: 200,
        maxDelayMs: 2000,
        retryIf: (err) => (err as { code?: string }).code === "Unavailable",
      })) as JournalClient["call"],
  };
}

export async function observeAfterCut(nc: NatsConnection, cluster: string, m: CutModel): Promise<AfterCut> {
  const journal = patientJournal(nc);
  const notFound = (err: unknown) => {
    if ((err as { code?: string }).code === "NotFound") return undefined;
    throw err;
  };
  const volumes = new Map<string, VolumeView | undefined>();
  for (const v of m.volumes) {
    if (!v.id) continue;
    const { uuid, poolID: poolId } = decomposeVolumeId(v.id);
    volumes.set(v.id, await journal.call(cluster, "volume.get", { uuid, poolId }).catch(notFound));
  }
  const snapshots = new Map<string, SnapshotView | undefined>();
  for (const s of m.snapshots) {
    if (!s.id) continue;
    const { uuid, poolID: poolId } = decomposeVolumeId(s.id);
    snapshots.set(s.id, await journal.call(cluster, "snapshot.get", { uuid, poolId }).catch(notFound));
  }
  const verify = await journal.call(cluster, "audit.verify", { olderThanMs: 0, maxFindings: 1000 });
  const gc = await journal.call(cluster, "audit.gc", { requestId: `power-cut-gc-${Date.now()}`, apply: false, olderThanMs: 0, maxActions: 1000 });
  return { volumes, snapshots, findings: verify.findings, gc: gc.actions };
}

/** The violations of what must hold after a cut (above). Pure. */
export function judgeAfterCut(m: CutModel, o: AfterCut): string[] {
  const out: string[] = [];
  const told = new Set<string>();
  for (const v of m.volumes) {
    if (!v.id || !v.uuid) continue;
    const got = o.volumes.get(v.id);
    if (v.state === "created") {
      told.add(v.uuid);
      if (!got) out.push(`volume ${v.name} (${v.uuid}): the CO was told it was created; it is gone`);
      else {
        if (got.sizeBytes < v.sizeBytes) out.push(`volume ${v.name}: the CO was told ${v.sizeBytes} bytes; it has ${got.sizeBytes}`);
        if (got.condition?.abnormal) out.push(`volume ${v.name}: ${got.condition.message}`);
        const claimed = got.claims.some((c) => c.nodeId === m.nodeId);
        if (v.claimed === "yes" && !claimed) out.push(`volume ${v.name}: the CO was told it was published to ${m.nodeId}; the claim is gone`);
        if (v.claimed === "no" && claimed) out.push(`volume ${v.name}: the CO was told it was unpublished from ${m.nodeId}; the claim is back`);
      }
    } else if (v.state === "deleted" && got) out.push(`volume ${v.name} (${v.uuid}): the CO was told it was deleted; it is back`);
  }
  for (const s of m.snapshots) {
    if (!s.id || !s.uuid) continue;
    const got = o.snapshots.get(s.id);
    if (s.state === "created") {
      told.add(s.uuid);
      if (!got) out.push(`snapshot ${s.name} (${s.uuid}): the CO was told it was created; it is gone`);
    } else if (s.state === "deleted" && got) out.push(`snapshot ${s.name}: the CO was told it was deleted; it is back`);
  }
  for (const f of o.findings) {
    // A cut between a create's image and its write leaves an image no record names: verify reports it, as it should.
    const uuid = "owner" in f ? f.owner?.uuid : "uuid" in f ? f.uuid : undefined;
    const leftover = (f.type === "leakedImage" || f.type === "tempImage") && !(uuid && told.has(uuid));
    if (!leftover) out.push(`verify: ${f.type} ${JSON.stringify(f).slice(0, 200)}`);
  }
  for (const a of o.gc) if (a.uuid && told.has(a.uuid)) out.push(`gc would ${a.type} ${a.pool}/${a.imageName}, which the CO was told of`);
  return out;
}
