/**
 * `log export` / `log import` / `log restore`: backup and restore of a cluster's event log, the
 * source of truth (docs/operations.md, "Backup and restore"; the journal's adapters/log-backup.ts
 * does the work). An export never replaces a file (it is linked to its name once whole; an
 * existing name is a usage error), or goes to stdout with `-`. It is sealed with the backup key
 * (`--key-file`, or the file CSICTL_BACKUP_KEY_FILE names): an HMAC-SHA-256, so that an edited file
 * is refused; without a key, with an unkeyed SHA-256, and says so. An import or restore reads the
 * file (or stdin, `-`) once, checks the whole of it before anything is written, stages it, and only
 * then writes the log, as the cluster's journal (the role that may append to its log); `restore`
 * replaces what the log holds, `import` needs it empty. Both refuse while a journal replica of the
 * cluster answers.
 * `log purge-foreign` removes foreign records through the journal's audit.purge (docs/operations.md,
 * "Foreign records in the log"): the journal reads each again and removes only what is still foreign.
 */
import { randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { DriverError, MAX_PURGE_RECORDS, type PurgeAction, subjects } from "@csi/contracts";
import { BackupError, type BackupKey, exportLogTo, exportLogToFile, type ImportPhase, importLog, newBackupFile, readBackupKey } from "@csi/journal/backup";
import { NoRespondersError } from "@nats-io/transport-node";
import { PURGE_HEAD, purgeRow } from "../domain/audit.js";
import { CliError, EXIT, type ExitCode, usageError } from "../errors.js";
import { replicasOption } from "../options.js";
import { fields, type Printer, printer, table } from "../output.js";
import { startProgress } from "../progress.js";
import type { Session } from "../session.js";

/** The file name that means stdout (export) or stdin (import, restore). */
const STDIO = "-";
/** The environment variable naming the backup key's file (a Kubernetes Secret's mount) when --key-file is not given. */
export const KEY_FILE_ENV = "CSICTL_BACKUP_KEY_FILE";
/** How long csictl listens for journal replicas before it takes the cluster's journals as stopped. */
const DISCOVERY_MS = 1500;
/** Journal replica ids a refusal names at most. */
const NAMED_REPLICAS = 5;

/** A progress bar per phase, each started on its first report (when the total is known); `stop` ends the one running (an error too). */
function phasedProgress(s: Session, label: string) {
  let bar: { phase: string; p: ReturnType<typeof startProgress>; done: number } | undefined;
  const stop = () => {
    bar?.p.finish(bar.done);
    bar = undefined;
  };
  return {
    update: (phase: string, seq: number, last: number) => {
      if (bar?.phase !== phase) {
        stop();
        bar = { phase, p: startProgress(s.out.json, `${label}: ${phase}`, last), done: 0 };
      }
      bar.done = seq;
      bar.p.update(seq);
    },
    stop,
  };
}

/** The backup key: --key-file, else the file KEY_FILE_ENV names; none given: undefined. */
async function backupKey(o: { keyFile?: string }): Promise<BackupKey | undefined> {
  const file = o.keyFile ?? process.env[KEY_FILE_ENV];
  if (!file) return undefined;
  return readBackupKey(file).catch((err: unknown) => {
    throw err instanceof BackupError ? usageError(err.message) : err;
  });
}

/** What export and import print: the stream, its messages and last sequence, how long it took, and `more` rows. */
function printResult(
  out: Printer,
  cluster: string,
  file: string,
  r: { stream: string; messages: number; lastSeq: number },
  started: number,
  more: [string, string | number][],
) {
  const ms = Math.round(performance.now() - started);
  out.result({ cluster, file, ...r, ms }, () =>
    fields([["CLUSTER", cluster], ["STREAM", r.stream], ["MESSAGES", r.messages], ["LAST SEQUENCE", r.lastSeq], ["TOOK", `${ms} ms`], ...more]),
  );
}

export async function logExport(s: Session, file: string, o: { keyFile?: string } = {}): Promise<void> {
  const key = await backupKey(o);
  const cluster = s.cluster().clusterID;
  const toStdout = file === STDIO;
  if (!toStdout)
    await newBackupFile(file).catch((err: unknown) => {
      throw err instanceof BackupError ? usageError(err.message) : err;
    });
  const nc = await s.nats();
  // With `-` stdout carries the backup: the result goes to stderr.
  const out = toStdout ? printer(s.out.format, true, process.stderr, process.stderr) : s.out;
  const progress = phasedProgress(s, `export ${cluster}`);
  const started = performance.now();
  const opts = { key, progress: (seq: number, last: number) => progress.update("read", seq, last), apiPrefix: s.logApi(cluster) };
  try {
    const r = await (toStdout ? exportLogTo(nc, cluster, process.stdout, opts) : exportLogToFile(nc, cluster, file, opts)).catch((err: unknown) => {
      if (err instanceof BackupError) throw err.usage ? usageError(err.message) : new CliError(EXIT.failed, err.message);
      const e = err as NodeJS.ErrnoException;
      if (e.syscall === "open") throw usageError(`cannot write ${file}: ${e.code ?? e.message}`);
      throw err;
    });
    progress.stop();
    if (!key)
      out.note(
        `not authenticated: the backup is sealed with an unkeyed SHA-256, which anyone who can write the file can recompute; restoring it needs --insecure-no-mac. Give a key (--key-file, or ${KEY_FILE_ENV}) to seal it with an HMAC`,
      );
    printResult(out, cluster, file, r, started, [
      ["FILE", toStdout ? "(stdout)" : file],
      ["SEAL", r.keyId ? `HMAC-SHA-256, key id ${r.keyId}` : "SHA-256 (unkeyed: not authenticated)"],
    ]);
  } finally {
    progress.stop();
  }
}

/**
 * Refuses (FailedPrecondition) while any journal replica of `cluster` answers NATS service
 * discovery (`$SRV.PING`, as csictl clusters counts them): nothing may append while a log is restored.
 */
async function noJournals(s: Session, cluster: string): Promise<void> {
  const nc = await s.nats();
  const ids: string[] = [];
  try {
    const answers = await nc.requestMany(`$SRV.PING.${subjects.journalServiceName(cluster)}`, "", {
      strategy: "timer",
      maxWait: Math.min(DISCOVERY_MS, s.timeoutMs),
    });
    for await (const m of answers) ids.push(replicaId(m.data));
  } catch (err) {
    // Nobody listens on the subject: no replica at all (the server answers for it at once).
    if (!(err instanceof NoRespondersError || (err as Error).cause instanceof NoRespondersError)) throw err;
  }
  if (ids.length > 0)
    throw new DriverError(
      "FailedPrecondition",
      `${ids.length} journal replica(s) of cluster ${cluster} answer (${ids.slice(0, NAMED_REPLICAS).join(", ")}): stop them first (scale to 0) — nothing may append while the log is restored; the log was not touched`,
    );
}

/** The id a service discovery answer names (short, printable), or "?". */
function replicaId(data: Uint8Array): string {
  try {
    const id = (JSON.parse(Buffer.from(data).toString("utf8")) as { id?: unknown }).id;
    return typeof id === "string" && /^[\w.-]{1,40}$/.test(id) ? id : "?";
  } catch {
    return "?";
  }
}

export interface RestoreOptions {
  keyFile?: string;
  insecureNoMac?: boolean;
  replicas?: string;
  /** `log restore`: act (without it, a dry run: commands/restore-plan.ts). */
  apply?: boolean;
}

/** `log import` (into an empty or absent log) and `log restore` (`replace`: whatever the log holds is replaced). */
async function restoreLog(s: Session, file: string, o: RestoreOptions, replace: boolean): Promise<void> {
  const replicas = replicasOption(o.replicas);
  const key = await backupKey(o);
  const cluster = s.cluster().clusterID;
  if (file !== STDIO)
    await access(file, constants.R_OK).catch((err: NodeJS.ErrnoException) => {
      throw usageError(`cannot read ${file}: ${err.code ?? err.message}`);
    });
  const label = file === STDIO ? "stdin" : file;
  const input = file === STDIO ? process.stdin : file;
  if (replace && !o.apply)
    return backupRefusal(label, (await import("./restore-plan.js")).restorePlan(s, input, label, { key, insecureNoMac: !!o.insecureNoMac }));
  const nc = await s.nats({ kind: "journal", cluster });
  const progress = phasedProgress(s, `${replace ? "restore" : "import"} ${cluster}`);
  const started = performance.now();
  try {
    const r = await importLog(nc, cluster, input, {
      key,
      insecureNoMac: !!o.insecureNoMac,
      ...(replicas ? { replicas } : {}),
      replace,
      progress: (phase: ImportPhase, seq, last) => progress.update(phase, seq, last),
      noWriters: () => noJournals(s, cluster),
    });
    progress.stop();
    printResult(s.out, cluster, label, r, started, [
      ...(r.replaced ? ([["REPLACED", `${r.replaced.messages} messages up to sequence ${r.replaced.lastSeq}`]] as [string, string][]) : []),
      ...(r.foreign > 0
        ? ([["FOREIGN RECORDS", `${r.foreign} restored as they were (journals skip them; csictl log purge-foreign removes them)`]] as [string, string][])
        : []),
      ["NEXT", "start the cluster's journals: they rebuild the projection from the restored log; then csictl verify"],
    ]);
  } catch (err) {
    throw backupError(label, err);
  } finally {
    progress.stop();
  }
}

/** A backup refused: a usage error (the wrong key, --insecure-no-mac missing) or a failure; nothing was written either way. */
function backupError(label: string, err: unknown): unknown {
  if (!(err instanceof BackupError)) return err;
  return err.usage ? usageError(`${label}: ${err.message}`) : new CliError(EXIT.failed, `${label}: ${err.message}; nothing was written`);
}

const backupRefusal = (label: string, p: Promise<void>) =>
  p.catch((err: unknown) => {
    throw backupError(label, err);
  });

export const logImport = (s: Session, file: string, o: RestoreOptions) => restoreLog(s, file, o, false);
export const logRestore = (s: Session, file: string, o: RestoreOptions) => restoreLog(s, file, o, true);

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
export async function logPurgeForeign(s: Session, o: { seq?: string[]; apply?: boolean; requestId?: string }): Promise<ExitCode> {
  const asked = sequences(o.seq ?? []); // a usage error before anything is sent
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
  // The records on stdout (a table that honours --no-headers); what was done, for a person, on stderr.
  s.out.result({ cluster, requestId, apply: !!o.apply, records, rebuilt, ...(left > 0 ? { more: left } : {}) }, (h) =>
    records.length === 0 ? "" : table(PURGE_HEAD, records.map(purgeRow), h),
  );
  const done = records.filter((x) => x.outcome === "done").length;
  const what = o.apply
    ? `${done} removed${rebuilt ? ", projection rebuilt" : ""}`
    : `${records.filter((x) => x.outcome === "planned").length} to remove (dry run: nothing touched; --apply to act)`;
  s.out.note(`cluster ${cluster}, request ${requestId}: ${what}${records.length === 0 ? "; no foreign records" : ""}`);
  if (left > 0) s.out.note(`${left} more not listed (verify's page is full of other findings, or this was a dry run): run it again, --seq them, or gc first`);
  return asked.length > 0 && records.some((x) => x.outcome === "skipped") ? EXIT.failed : EXIT.ok;
}
