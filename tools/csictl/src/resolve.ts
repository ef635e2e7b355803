/**
 * The one place where what a person typed becomes the volume it names (`volume get/expand/delete`,
 * `replay`, `history`): a CSI id as it is; otherwise the live volumes of the clusters in scope
 * (--cluster, else every cluster of the clusters file), as the journal lists them (`volume.list`:
 * uuid, request name, pool), matched by domain/target.ts (volumesNamed): the request name, the
 * PVC's `namespace/name` (read from the log's VolumeReserved events, only for a text of that
 * shape that nothing else matched), a unique prefix of the uuid or id. Several matches are a
 * usage error listing them (exit 2).
 */
import { composeVolumeId, type ResolvedCluster, type VolumeView } from "@csi/contracts";
import { eventsOf } from "@csi/journal/log";
import { looksLikePvc, parseTarget, type Target, type VolumeCandidate, volumesNamed } from "./domain/target.js";
import { CliError, usageError } from "./errors.js";
import type { Session } from "./session.js";

/** Volumes per volume.list page asked of the journal. */
const PAGE = 1000;
/** Candidates an ambiguity error lists. */
const LISTED = 10;

/** Every live volume of a cluster as the journal lists them (`volume.list`, all pages), each with its CSI id. */
export async function clusterVolumes(s: Session, cluster: ResolvedCluster): Promise<(VolumeView & { id: string })[]> {
  const journal = await s.journal();
  const out: (VolumeView & { id: string })[] = [];
  let token: string | undefined;
  do {
    const page = await journal.call(cluster.clusterID, "volume.list", { maxEntries: PAGE, ...(token ? { startingToken: token } : {}) });
    for (const v of page.entries) out.push({ ...v, id: composeVolumeId({ clusterID: cluster.clusterID, poolID: v.poolId, uuid: v.uuid }) });
    token = page.nextToken;
  } while (token);
  return out;
}

/** Every live volume of a cluster, as candidates (without their PVC). */
async function liveVolumes(s: Session, cluster: ResolvedCluster): Promise<VolumeCandidate[]> {
  return (await clusterVolumes(s, cluster)).map((v) => ({ id: v.id, clusterID: cluster.clusterID, uuid: v.uuid, name: v.name }));
}

/** The PVC (`namespace/name`) each volume of the cluster was made for, as its VolumeReserved event recorded it. */
async function pvcs(s: Session, cluster: ResolvedCluster): Promise<Map<string, string>> {
  const log = await s.eventLog(cluster.clusterID);
  const byUuid = new Map<string, string>();
  await log.read(1, async (batch) => {
    for (const { event: e } of eventsOf(batch))
      if (e.type === "VolumeReserved" && e.kubernetes?.pvcName) byUuid.set(e.uuid, `${e.kubernetes.pvcNamespace ?? "default"}/${e.kubernetes.pvcName}`);
  });
  return byUuid;
}

/** The clusters a name is looked for in: --cluster's, else every one. */
export const inScope = (s: Session): ResolvedCluster[] => (s.opts.cluster ? [s.cluster()] : s.clusters().clusters);

/**
 * What `text` names: a CSI id (or `--name`: a request name) as parseTarget reads it; else the one
 * live volume it names, as an id target; else parseTarget's reading (a uuid no live volume has, a
 * name no live volume has: `history` still finds deleted ones in the log).
 */
export async function resolveVolume(s: Session, text: string, o: { asName?: boolean } = {}): Promise<Target> {
  let t: Target;
  let malformed: unknown; // the start of an id (`0001-0005-local-…`) is no id, but may be a prefix
  try {
    t = parseTarget(text, o);
  } catch (err) {
    if (!(err instanceof CliError)) throw err;
    [t, malformed] = [{ by: "name", name: text }, err];
  }
  if (t.by === "id" || o.asName) return t;
  const clusters = inScope(s);
  const live = (await Promise.all(clusters.map((c) => liveVolumes(s, c)))).flat();
  let found = volumesNamed(text, live);
  if (found.length === 0 && looksLikePvc(text)) {
    const known = new Map(await Promise.all(clusters.map(async (c) => [c.clusterID, await pvcs(s, c)] as const)));
    found = volumesNamed(
      text,
      live.map((v) => {
        const pvc = known.get(v.clusterID)?.get(v.uuid);
        return pvc ? { ...v, pvc } : v;
      }),
    );
  }
  if (found.length > 1) {
    const listed = found.slice(0, LISTED).map((v) => `${v.id} (${v.name})`);
    const more = found.length > LISTED ? `, and ${found.length - LISTED} more` : "";
    throw usageError(`${JSON.stringify(text.slice(0, 80))} names ${found.length} volumes: ${listed.join(", ")}${more}; give more of the id`);
  }
  const [one] = found;
  if (!one && malformed) throw malformed;
  return one ? { by: "id", id: one.id, clusterID: one.clusterID, uuid: one.uuid } : t;
}

/** The CSI id of the live volume `text` names, or undefined if it names none. */
export async function volumeIdNamed(s: Session, text: string): Promise<string | undefined> {
  const t = await resolveVolume(s, text);
  return t.by === "id" ? t.id : undefined;
}
