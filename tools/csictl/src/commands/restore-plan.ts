/**
 * `log restore <file>` without `--apply`: the dry run (docs/operations.md, "Backup and restore").
 * The backup is checked whole and folded as the journal folds its log (the journal's own code),
 * nothing is written; a journal of the cluster lists its pools' images (audit.images), and verify's
 * rules (the journal's inspect) say what the restored log would find apart from the pools: volumes
 * that would come back without their image (deleted since the backup), images of another size than
 * their record (expanded since), and images no record of the backup names (made since: adopt them
 * after the restore, `csictl volume adopt`). With no journal answering (stopped for the restore),
 * the backup is still checked and the comparison said to be skipped.
 */
import { type Finding, type PoolImage, subjects } from "@csi/contracts";
import { inspect } from "@csi/journal/audit";
import { type BackupKey, foldBackup } from "@csi/journal/backup";
import type { ImageInfo } from "@csi/journal/pools";
import { jetstreamManager } from "@nats-io/jetstream";
import { FINDING_HEAD, findingRow } from "../domain/audit.js";
import { fields, table } from "../output.js";
import type { Session } from "../session.js";

/** The findings of a restore's dry run: what the restored log would have apart from the pools. */
const DIFFERENCES = new Set<Finding["type"]>(["missingImage", "imageSizeDiffers", "leakedImage"]);
const PAGE = 1000;

export async function restorePlan(
  s: Session,
  input: string | NodeJS.ReadableStream,
  label: string,
  o: { key: BackupKey | undefined; insecureNoMac: boolean },
): Promise<void> {
  const cluster = s.cluster().clusterID;
  const nc = await s.nats();
  const folded = await foldBackup(input, cluster, { key: o.key, insecureNoMac: o.insecureNoMac, maxPayload: nc.info?.max_payload });
  const pools = await poolImages(s, cluster);
  const findings = pools
    ? inspect({
        states: folded.replayed.states,
        images: pools.images,
        drift: [],
        heartbeats: new Map(),
        now: Date.now(),
        olderThanMs: 0,
        clusterID: cluster,
        marksOwners: pools.marksOwners,
        logs: pools.logs,
      }).filter((f) => DIFFERENCES.has(f.type))
    : [];
  const now = await (await jetstreamManager(nc)).streams.info(subjects.streamName(cluster)).catch(() => undefined);
  const h = folded.header;
  s.out.result(
    { cluster, file: label, dryRun: true, backup: { lastSeq: h.lastSeq, exportedAt: h.exportedAt }, compared: !!pools, differences: findings },
    (opts) => {
      const summary = fields([
        ["CLUSTER", cluster],
        ["BACKUP", `${label}: up to sequence ${h.lastSeq}, exported ${h.exportedAt}`],
        ["LOG NOW", now ? `${now.state.messages} messages up to sequence ${now.state.last_seq}` : "none"],
        [
          "POOLS",
          pools ? `${findings.length} difference(s) from the backup` : "not compared: no journal of the cluster answers (compare before stopping them)",
        ],
        ["DRY RUN", "nothing written; export the log first (csictl log export), stop the journals, then --apply"],
      ]);
      return findings.length === 0 ? summary : `${table(FINDING_HEAD, findings.map(findingRow), opts)}\n\n${summary}`;
    },
  );
  s.out.note(
    findings.length === 0
      ? "dry run: nothing written"
      : `dry run: nothing written; after the restore verify reports these, gc removes none of them; adopt a live image with csictl volume adopt`,
  );
}

/** Every image of the cluster's pools, page by page, from a journal; undefined when none answers. */
async function poolImages(s: Session, cluster: string) {
  const journal = await s.journal();
  const images = new Map<string, ImageInfo[]>();
  const marksOwners = new Set<string>();
  const logs = new Map<string, string>();
  let token: string | undefined;
  do {
    const page = await journal.call(cluster, "audit.images", { maxEntries: PAGE, ...(token ? { startingToken: token } : {}) }).catch((err: unknown) => {
      if (isNobody(err)) return undefined;
      throw err;
    });
    if (!page) return undefined;
    for (const p of page.pools) {
      if (!images.has(p.name)) images.set(p.name, []);
      if (p.marksOwners) marksOwners.add(p.name);
      if (p.boundLog) logs.set(p.name, p.boundLog);
    }
    for (const e of page.entries) images.get(e.pool)?.push(infoOf(e));
    token = page.nextToken;
  } while (token);
  return { images, marksOwners, logs };
}

function infoOf(e: PoolImage): ImageInfo {
  const { pool: _pool, owner, ...rest } = e;
  if (!owner) return rest;
  const { cluster, kind, ...more } = owner;
  return { ...rest, owner: { ...more, ...(kind === "volume" || kind === "snapshot" ? { kind } : {}), ...(cluster ? { clusterID: cluster } : {}) } };
}

/** No journal replica answers (stopped for the restore): the journal client's Unavailable of no responders. */
function isNobody(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown };
  return e.code === "Unavailable" && /^no journal answers/.test(String(e.message));
}
