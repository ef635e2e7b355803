/**
 * `replay --at`, `verify`, `gc`: thin clients of the journal's audit.replay / audit.verify /
 * audit.gc (docs/journal.md, "Audit"), for one cluster (--cluster, or the one a CSI id names).
 */
import { randomUUID } from "node:crypto";
import { DriverError, type ReplayEntry } from "@csi/contracts";
import { FINDING_HEAD, findingRow, formatDuration, GC_HEAD, gcRow, parseDuration, parseLogPoint, REPLAY_HEAD, replayId, replayRow } from "../domain/audit.js";
import { EXIT, type ExitCode, usageError } from "../errors.js";
import { fields, table } from "../output.js";
import { resolveVolume } from "../resolve.js";
import type { Session } from "../session.js";

/** Aggregates per replay page asked of the journal (it cuts pages to its reply budget anyway). */
const PAGE = 500;

/** A positive whole number typed on the command line. */
function count(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < 1)
    throw usageError(`${flag} must be a whole number above 0, got ${JSON.stringify(text.slice(0, 40))}`);
  return n;
}

/**
 * A point after the log's last event, said plainly (the state shown is then the log's now): a
 * sequence past its last one; a time after its last event's (known from the whole cluster's
 * replay, whose `upTo` is the log's last event).
 */
async function pastTheEnd(s: Session, cluster: string, at: number | string, logUpTo?: { seq: number; time?: string | undefined }): Promise<string | undefined> {
  if (typeof at === "number") {
    const last = await (await s.eventLog(cluster)).lastSeq();
    return at > last ? `sequence ${at} is past the end of the log (its last sequence is ${last}): this is the state now` : undefined;
  }
  if (!logUpTo?.time || Date.parse(at) <= Date.parse(logUpTo.time)) return undefined;
  const last = await (await s.eventLog(cluster)).lastSeq();
  return logUpTo.seq === last ? `${at} is past the log's last event (sequence ${last}, at ${logUpTo.time}): this is the state now` : undefined;
}

export async function replay(s: Session, arg: string | undefined, o: { at: string }): Promise<void> {
  const at = parseLogPoint(o.at);
  const target = arg === undefined ? undefined : await resolveVolume(s, arg);
  if (target?.by === "name")
    throw new DriverError(
      "NotFound",
      `no live volume is named ${JSON.stringify(arg?.slice(0, 40))}: replay takes a CSI volume or snapshot id, a uuid, or a live volume's request name, unique prefix or namespace/pvc (history <name> shows a deleted name's uuids)`,
    );
  if (target?.by === "id" && s.opts.cluster && s.opts.cluster !== target.clusterID) {
    throw usageError(`the id is of cluster ${target.clusterID}, not ${s.opts.cluster}`);
  }
  const cluster = s.cluster(target?.by === "id" ? target.clusterID : undefined).clusterID;
  const journal = await s.journal();
  const first = await journal.call(cluster, "audit.replay", { at, maxEntries: PAGE, ...(target ? { uuid: target.uuid } : {}) });
  const { upTo } = first;
  const entries: ReplayEntry[] = [...first.entries];
  // Later pages at the first page's sequence: a time point then names the same prefix of the log on every page.
  for (let token = first.nextToken; token; ) {
    const page = await journal.call(cluster, "audit.replay", { at: upTo.seq, maxEntries: PAGE, startingToken: token });
    entries.push(...page.entries);
    token = page.nextToken;
  }
  // The point asked (never the last event's sequence of an aggregate, which may be 0 or earlier): a header, on stderr.
  const point = typeof at === "number" ? `sequence ${at}` : `${at} (up to sequence ${upTo.seq})`;
  const what = target
    ? `${target.uuid}${entries.length === 0 ? ": it did not exist yet at that point" : ""}`
    : `${entries.length} live aggregate${entries.length === 1 ? "" : "s"}`;
  s.out.note(`cluster ${cluster} at ${point}: ${what}`);
  const past = await pastTheEnd(s, cluster, at, target === undefined ? upTo : undefined);
  if (past) s.out.note(past);
  s.out.result(
    { cluster, at, upTo, items: entries },
    (h) =>
      entries.length === 0
        ? ""
        : table(
            REPLAY_HEAD,
            entries.map((e) => replayRow(cluster, e)),
            h,
          ),
    () => entries.map((e) => replayId(cluster, e)),
  );
}

export async function verify(s: Session, o: { olderThan?: string; maxFindings?: string }): Promise<ExitCode> {
  const olderThanMs = o.olderThan === undefined ? undefined : parseDuration(o.olderThan);
  const maxFindings = count(o.maxFindings, "--max-findings");
  const cluster = s.cluster().clusterID;
  const r = await (await s.journal()).call(cluster, "audit.verify", {
    ...(olderThanMs === undefined ? {} : { olderThanMs }),
    ...(maxFindings === undefined ? {} : { maxFindings }),
  });
  const total = Object.values(r.counts).reduce((a: number, b) => a + (b ?? 0), 0);
  // Foreign images (someone else's, in a shared RBD pool) are listed, not faults: they do not fail verify.
  const faults = total - (r.counts.foreignImages ?? 0);
  s.out.result({ cluster, ok: faults === 0, ...r }, (h) => {
    const counts = fields([
      ["CLUSTER", cluster],
      ["LOG UP TO", `sequence ${r.upTo}`],
      ["LEAKED IMAGES", r.counts.leakedImages],
      ["ORPHANED RESERVATIONS", r.counts.orphanedReservations],
      ["MISSING IMAGES", r.counts.missingImages],
      ["PROJECTION DRIFT", r.counts.projectionDrift],
      ["STALE CLAIMS", r.counts.staleClaims],
      ["FOREIGN RECORDS", r.counts.foreignRecords],
      // What only RBD pools have: shown when there are any.
      ...([
        ["FOREIGN IMAGES (not ours, left alone)", r.counts.foreignImages],
        ["TRASHED IMAGES", r.counts.trashedImages],
        ["TEMPORARY IMAGES", r.counts.tempImages],
        ["IMAGES OF ANOTHER SIZE", r.counts.imagesOfAnotherSize],
        ["STRAY DEVICES (held by a node, no volume)", r.counts.strayDevices],
      ].filter(([, n]) => n) as [string, number][]),
    ]);
    return total === 0 ? counts : `${table(FINDING_HEAD, r.findings.map(findingRow), h)}\n\n${counts}`;
  });
  const foreign = r.counts.foreignImages ? `; ${r.counts.foreignImages} foreign image(s) left alone` : "";
  s.out.note(`${faults === 0 ? "clean" : `${faults} found`}${foreign}${r.truncated ? ` (${total - r.findings.length} more not shown: --max-findings)` : ""}`);
  return faults === 0 ? EXIT.ok : EXIT.failed;
}

/** More removals than this in one `gc --apply` need --yes or --max-actions (docs/csictl.md, "gc"). */
export const GC_HANDFUL = 10;

export async function gc(s: Session, o: { apply?: boolean; olderThan?: string; maxActions?: string; requestId?: string; yes?: boolean }): Promise<void> {
  const olderThanMs = o.olderThan === undefined ? undefined : parseDuration(o.olderThan);
  const maxActions = count(o.maxActions, "--max-actions");
  const cluster = s.cluster().clusterID;
  const requestId = o.requestId ?? `csictl-${randomUUID()}`;
  const journal = await s.journal();
  const ask = (apply: boolean) =>
    journal.call(cluster, "audit.gc", {
      requestId,
      apply,
      ...(olderThanMs === undefined ? {} : { olderThanMs }),
      ...(maxActions === undefined ? {} : { maxActions }),
    });
  if (o.apply && !o.yes && maxActions === undefined) {
    const planned = (await ask(false)).actions.filter((a) => a.outcome === "planned").length;
    if (planned > GC_HANDFUL)
      throw usageError(
        `gc would remove ${planned} images and reservations: --yes to remove them all, or --max-actions N for the first N (a dry run lists them)`,
      );
  }
  const r = await ask(!!o.apply);
  s.out.result({ cluster, requestId, ...r }, (h) => (r.actions.length === 0 ? "" : table(GC_HEAD, r.actions.map(gcRow), h)));
  const kept = r.actions.filter((a) => a.outcome === "skipped" && a.reason?.startsWith("kept:")).length;
  const what = r.apply
    ? `${r.actions.filter((a) => a.outcome === "done").length} done`
    : `${r.actions.filter((a) => a.outcome === "planned").length} planned (dry run: nothing touched; --apply to act)`;
  const keptNote = kept > 0 ? `; ${kept} kept, not proven abandoned (the reason is in the table)` : "";
  const age = olderThanMs === undefined ? "" : `, older than ${formatDuration(olderThanMs)}`;
  s.out.note(
    `cluster ${cluster}, request ${requestId}${age}: ${r.actions.length === 0 ? "nothing to collect" : `${what}${keptNote}`}${r.truncated ? "; more left: run it again" : ""}`,
  );
}
