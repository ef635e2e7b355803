/**
 * `log export` / `log import`: backup and restore of a cluster's event log, the source of truth
 * (docs/operations.md, "Backup and restore"; the journal's adapters/log-backup.ts does the work).
 * An export is written to `<file>.partial` and renamed when complete, so a file under the given
 * name is always a whole backup. An import checks the whole file first, restores only into an
 * empty stream, and writes as the cluster's journal (the role that may append to its log).
 * `log purge-foreign` removes foreign records through the journal's audit.purge (docs/operations.md,
 * "Foreign records in the log"): the journal reads each again and removes only what is still foreign.
 */
import { randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { MAX_PURGE_RECORDS, type PurgeAction } from "@csi/contracts";
import { BackupError, backupFileLines, exportLogToFile, importLog } from "@csi/journal/operator";
import { PURGE_HEAD, purgeRow } from "../domain/audit.js";
import { CliError, EXIT, type ExitCode, usageError } from "../errors.js";
import { replicasOption } from "../options.js";
import { fields, table } from "../output.js";
import { startProgress } from "../progress.js";
import type { Session } from "../session.js";

/** A progress bar started on the first report (when the total is known). */
function lazyProgress(s: Session, label: string) {
  let bar: ReturnType<typeof startProgress> | undefined;
  return {
    update: (seq: number, last: number) => {
      bar ??= startProgress(s.out.json, label, last);
      bar.update(seq);
    },
    finish: (seq: number) => bar?.finish(seq),
  };
}

/** What export and import print: the stream, its messages and last sequence, how long it took, and `more` rows. */
function printResult(
  s: Session,
  cluster: string,
  file: string,
  r: { stream: string; messages: number; lastSeq: number },
  started: number,
  more: [string, string][],
) {
  const ms = Math.round(performance.now() - started);
  s.out.result({ cluster, file, ...r, ms }, () =>
    fields([["CLUSTER", cluster], ["STREAM", r.stream], ["MESSAGES", r.messages], ["LAST SEQUENCE", r.lastSeq], ["TOOK", `${ms} ms`], ...more]),
  );
}

export async function logExport(s: Session, file: string): Promise<void> {
  const cluster = s.cluster().clusterID;
  const nc = await s.nats();
  const progress = lazyProgress(s, `export ${cluster}`);
  const started = performance.now();
  const r = await exportLogToFile(nc, cluster, file, progress.update, s.logApi(cluster)).catch((err: NodeJS.ErrnoException) => {
    if (err.syscall === "open") throw usageError(`cannot write ${file}.partial: ${err.code ?? err.message}`);
    throw err;
  });
  progress.finish(r.lastSeq);
  printResult(s, cluster, file, r, started, [["FILE", file]]);
}

export async function logImport(s: Session, file: string, o: { replicas?: string }): Promise<void> {
  const replicas = replicasOption(o.replicas);
  const cluster = s.cluster().clusterID;
  await access(file, constants.R_OK).catch((err: NodeJS.ErrnoException) => {
    throw usageError(`cannot read ${file}: ${err.code ?? err.message}`);
  });
  const nc = await s.nats({ kind: "journal", cluster });
  const progress = lazyProgress(s, `import ${cluster}`);
  const started = performance.now();
  try {
    const r = await importLog(nc, cluster, () => backupFileLines(file), { ...(replicas ? { replicas } : {}), progress: progress.update });
    progress.finish(r.lastSeq);
    printResult(s, cluster, file, r, started, [
      ...(r.foreign > 0
        ? ([["FOREIGN RECORDS", `${r.foreign} restored as they were (journals skip them; csictl log purge-foreign removes them)`]] as [string, string][])
        : []),
      ["NEXT", "start the cluster's journals: they rebuild the projection from the restored log (or run csictl rebuild)"],
    ]);
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(EXIT.failed, `${file}: ${err.message}; nothing was written`);
    throw err;
  }
}

/** `--seq` values: whole stream sequences above 0, no repeats, at most MAX_PURGE_RECORDS. */
function sequences(texts: string[]): number[] {
  const seqs = texts.map((t) => {
    const n = Number(t);
    if (!/^\d+$/.test(t.trim()) || !Number.isSafeInteger(n) || n < 1)
      throw usageError(`--seq must be a stream sequence above 0, got ${JSON.stringify(t.slice(0, 40))}`);
    return n;
  });
  if (seqs.length > MAX_PURGE_RECORDS) throw usageError(`at most ${MAX_PURGE_RECORDS} --seq in one run`);
  return [...new Set(seqs)];
}

/**
 * `log purge-foreign [--seq n]… [--apply]`: the sequences given, or every foreign record verify
 * finds (in rounds of MAX_PURGE_RECORDS while applying). Exit 1 when a sequence asked for was
 * skipped (not a foreign record, or not there).
 */
export async function logPurgeForeign(s: Session, o: { seq: string[]; apply?: boolean; requestId?: string }): Promise<ExitCode> {
  const asked = sequences(o.seq); // a usage error before anything is sent
  const cluster = s.cluster().clusterID;
  const journal = await s.journal();
  const requestId = o.requestId ?? `csictl-${randomUUID()}`;
  const found = async (): Promise<{ seqs: number[]; total: number }> => {
    const v = await journal.call(cluster, "audit.verify", { maxFindings: MAX_PURGE_RECORDS });
    return { seqs: v.findings.flatMap((f) => (f.type === "foreignRecord" ? [f.seq] : [])), total: v.counts.foreignRecords };
  };
  const records: PurgeAction[] = [];
  let rebuilt = false;
  let left = 0;
  for (;;) {
    const next = asked.length > 0 ? { seqs: asked, total: asked.length } : await found();
    if (next.seqs.length === 0) {
      left = next.total; // verify's other findings filled its page: say so rather than "none"
      break;
    }
    const r = await journal.call(cluster, "audit.purge", { requestId, seqs: next.seqs, apply: !!o.apply });
    records.push(...r.records);
    rebuilt ||= r.rebuilt;
    left = next.total - next.seqs.length;
    // Given sequences, a dry run, or a round that removed nothing: one round. Else verify again for the rest.
    if (asked.length > 0 || !o.apply || left === 0 || !r.records.some((x) => x.outcome === "done")) break;
  }
  s.out.result({ cluster, requestId, apply: !!o.apply, records, rebuilt, ...(left > 0 ? { more: left } : {}) }, () => {
    const done = records.filter((x) => x.outcome === "done").length;
    const what = o.apply
      ? `${done} removed${rebuilt ? ", projection rebuilt" : ""}`
      : `${records.filter((x) => x.outcome === "planned").length} to remove (dry run: nothing touched; --apply to act)`;
    const more =
      left > 0 ? `\n${left} more not listed (verify's page is full of other findings, or this was a dry run): run it again, --seq them, or gc first` : "";
    const summary = `cluster ${cluster}, request ${requestId}: ${what}${more}`;
    return records.length === 0 ? `${summary}\nno foreign records` : `${table(PURGE_HEAD, records.map(purgeRow))}\n${summary}`;
  });
  return asked.length > 0 && records.some((x) => x.outcome === "skipped") ? EXIT.failed : EXIT.ok;
}
