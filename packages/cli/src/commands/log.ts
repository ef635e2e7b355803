/**
 * `log export` / `log import`: backup and restore of a cluster's event log, the source of truth
 * (docs/operations.md, "Backup and restore"; the journal's adapters/log-backup.ts does the work).
 * An export is written to `<file>.partial` and renamed when complete, so a file under the given
 * name is always a whole backup. An import checks the whole file first, restores only into an
 * empty stream, and writes as the cluster's journal (the role that may append to its log).
 */
import { once } from "node:events";
import { constants, createReadStream, createWriteStream } from "node:fs";
import { access, rename, rm } from "node:fs/promises";
import { BackupError, exportLog, importLog, MAX_BACKUP_LINE } from "@csi/journal/operator";
import { CliError, EXIT, usageError } from "../errors.js";
import { fields } from "../output.js";
import { startProgress } from "../progress.js";
import type { Session } from "../session.js";

/** The lines of a file, none longer than MAX_BACKUP_LINE (a longer one is refused before it fills memory). */
async function* linesOf(file: string): AsyncGenerator<string> {
  let rest = "";
  for await (const chunk of createReadStream(file, { encoding: "utf8", highWaterMark: 256 * 1024 })) {
    const parts = (rest + (chunk as string)).split("\n");
    rest = parts.pop() as string;
    if (rest.length > MAX_BACKUP_LINE) throw new BackupError(`a line is longer than ${MAX_BACKUP_LINE} bytes; not a backup of this driver`);
    yield* parts;
  }
  if (rest !== "") yield rest;
}

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
  const partial = `${file}.partial`;
  const out = createWriteStream(partial, { flags: "wx", mode: 0o600 });
  await once(out, "open").catch((err: NodeJS.ErrnoException) => {
    throw usageError(`cannot write ${partial}: ${err.code ?? err.message}`);
  });
  const write = async (text: string) => {
    if (!out.write(text)) await once(out, "drain");
  };
  const progress = lazyProgress(s, `export ${cluster}`);
  try {
    const started = performance.now();
    const r = await exportLog(nc, cluster, write, progress.update);
    progress.finish(r.lastSeq);
    out.end();
    await once(out, "finish");
    await rename(partial, file);
    printResult(s, cluster, file, r, started, [["FILE", file]]);
  } catch (err) {
    out.destroy();
    await rm(partial, { force: true });
    throw err;
  }
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
    const r = await importLog(nc, cluster, () => linesOf(file), { ...(replicas ? { replicas } : {}), progress: progress.update });
    progress.finish(r.lastSeq);
    printResult(s, cluster, file, r, started, [
      ["NEXT", "start the cluster's journals: they rebuild the projection from the restored log (or run csictl rebuild)"],
    ]);
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(EXIT.failed, `${file}: ${err.message}; nothing was written`);
    throw err;
  }
}
