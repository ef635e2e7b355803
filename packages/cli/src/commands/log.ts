/**
 * `log export` / `log import`: backup and restore of a cluster's event log, the source of truth
 * (docs/operations.md, "Backup and restore"; the journal's adapters/log-backup.ts does the work).
 * An export is written to `<file>.partial` and renamed when complete, so a file under the given
 * name is always a whole backup. An import checks the whole file first, restores only into an
 * empty stream, and writes as the cluster's journal (the role that may append to its log).
 */
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { BackupError, backupFileLines, exportLogToFile, importLog } from "@csi/journal/operator";
import { CliError, EXIT, usageError } from "../errors.js";
import { fields } from "../output.js";
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
  const replicas = o.replicas === undefined ? undefined : Number(o.replicas);
  if (replicas !== undefined && !(Number.isInteger(replicas) && replicas >= 1 && replicas <= 5))
    throw usageError(`--replicas must be 1 to 5, got ${JSON.stringify(o.replicas)}`);
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
      ["NEXT", "start the cluster's journals: they rebuild the projection from the restored log (or run csictl rebuild)"],
    ]);
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(EXIT.failed, `${file}: ${err.message}; nothing was written`);
    throw err;
  }
}
