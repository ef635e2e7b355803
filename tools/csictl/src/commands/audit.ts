/**
 * `replay --at`, `verify`, `gc`: thin clients of the journal's audit.replay / audit.verify /
 * audit.gc (docs/journal.md, "Audit"), for one cluster (--cluster, or the one a CSI id names).
 */
import { randomUUID } from "node:crypto";
import type { ReplayEntry } from "@csi/contracts";
import { FINDING_HEAD, findingRow, formatDuration, GC_HEAD, gcRow, parseDuration, parseLogPoint, REPLAY_HEAD, replayRow } from "../domain/audit.js";
import { parseTarget } from "../domain/target.js";
import { EXIT, type ExitCode, usageError } from "../errors.js";
import { fields, table } from "../output.js";
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

export async function replay(s: Session, arg: string | undefined, o: { at: string }): Promise<void> {
  const at = parseLogPoint(o.at);
  const target = arg === undefined ? undefined : parseTarget(arg);
  if (target?.by === "name") throw usageError(`replay takes a CSI volume or snapshot id or a uuid, not a request name (${JSON.stringify(arg?.slice(0, 40))})`);
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
  s.out.result({ cluster, at, upTo, entries }, () => {
    const head = `cluster ${cluster} at sequence ${upTo.seq}${upTo.time ? ` (${upTo.time})` : ""}: ${target ? target.uuid : `${entries.length} live aggregates`}`;
    if (entries.length === 0) return `${head}\n${target ? "it did not exist yet at that point" : "nothing"}`;
    return `${head}\n${table(
      REPLAY_HEAD,
      entries.map((e) => replayRow(cluster, e)),
    )}`;
  });
}

export async function verify(s: Session, o: { olderThan?: string; maxFindings?: string }): Promise<ExitCode> {
  const olderThanMs = o.olderThan === undefined ? undefined : parseDuration(o.olderThan);
  const maxFindings = count(o.maxFindings, "--max-findings");
  const cluster = s.cluster().clusterID;
  const r = await (await s.journal()).call(cluster, "audit.verify", {
    ...(olderThanMs === undefined ? {} : { olderThanMs }),
    ...(maxFindings === undefined ? {} : { maxFindings }),
  });
  const total = Object.values(r.counts).reduce((a, b) => a + b, 0);
  s.out.result({ cluster, ok: total === 0, ...r }, () => {
    const counts = fields([
      ["CLUSTER", cluster],
      ["LOG UP TO", `sequence ${r.upTo}`],
      ["LEAKED IMAGES", r.counts.leakedImages],
      ["ORPHANED RESERVATIONS", r.counts.orphanedReservations],
      ["MISSING IMAGES", r.counts.missingImages],
      ["PROJECTION DRIFT", r.counts.projectionDrift],
      ["STALE CLAIMS", r.counts.staleClaims],
      ["FOREIGN RECORDS", r.counts.foreignRecords],
    ]);
    if (total === 0) return `${counts}\nclean`;
    const more = r.truncated ? `\n(${total - r.findings.length} more not shown: --max-findings)` : "";
    return `${table(FINDING_HEAD, r.findings.map(findingRow))}\n\n${counts}\n${total} found${more}`;
  });
  return total === 0 ? EXIT.ok : EXIT.failed;
}

export async function gc(s: Session, o: { apply?: boolean; olderThan?: string; maxActions?: string; requestId?: string }): Promise<void> {
  const olderThanMs = o.olderThan === undefined ? undefined : parseDuration(o.olderThan);
  const maxActions = count(o.maxActions, "--max-actions");
  const cluster = s.cluster().clusterID;
  const requestId = o.requestId ?? `csictl-${randomUUID()}`;
  const r = await (await s.journal()).call(cluster, "audit.gc", {
    requestId,
    apply: !!o.apply,
    ...(olderThanMs === undefined ? {} : { olderThanMs }),
    ...(maxActions === undefined ? {} : { maxActions }),
  });
  s.out.result({ cluster, requestId, ...r }, () => {
    const what = r.apply
      ? `${r.actions.filter((a) => a.outcome === "done").length} done`
      : `${r.actions.length} planned (dry run: nothing touched; --apply to act)`;
    const age = olderThanMs === undefined ? "" : `, reservations older than ${formatDuration(olderThanMs)}`;
    const more = r.truncated ? "\nmore left: run it again" : "";
    const summary = `cluster ${cluster}, request ${requestId}${age}: ${what}${more}`;
    return r.actions.length === 0 ? `${summary}\nnothing to collect` : `${table(GC_HEAD, r.actions.map(gcRow))}\n${summary}`;
  });
}
