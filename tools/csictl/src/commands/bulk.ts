/**
 * `volume create a b c …` and `volume create -f FILE|-`: many volumes in one process, over one
 * gRPC connection, at most --concurrency CreateVolume calls at once; every name gets its own
 * result (its volume, or its error) and the exit status is not 0 if any failed. The names are
 * read and checked whole before the first call (domain/bulk.ts).
 */
import { createReadStream } from "node:fs";
import { csiMethodJson } from "../csi-json.js";
import { concurrencyOption, MAX_BULK_BYTES, mapLimit, parseNames } from "../domain/bulk.js";
import { EXIT, explain, usageError } from "../errors.js";
import { type Column, listing } from "../output.js";
import { startProgress } from "../progress.js";
import { clusterVolumes, inScope } from "../resolve.js";
import type { Session } from "../session.js";
import { type CreateVolumeOptions, createVolumeRequest, type VolumeJson, withRequestId } from "./csi.js";

export interface BulkCreateOptions extends CreateVolumeOptions {
  filename?: string;
  concurrency?: string;
}

interface BulkResult {
  name: string;
  requestId: string;
  volume?: VolumeJson;
  /** created, or exists: the volume of that name was there before (CreateVolume answers it again, idempotently). */
  result?: "created" | "exists";
  /** `CODE: message`, as csictl prints an error. */
  error?: string;
  /** The exit status this failure alone would have had. */
  exitCode?: number;
}

/** A file's (or stdin's, for "-") text, refused past MAX_BULK_BYTES. */
async function readInput(file: string): Promise<string> {
  const input = file === "-" ? process.stdin : createReadStream(file);
  const chunks: Buffer[] = [];
  let bytes = 0;
  try {
    for await (const chunk of input as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > MAX_BULK_BYTES) throw usageError(`${file === "-" ? "stdin" : file}: more than ${MAX_BULK_BYTES} bytes of names`);
      chunks.push(chunk);
    }
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code && e.syscall) throw usageError(`cannot read ${file}: ${e.code}`);
    throw err;
  }
  return Buffer.concat(chunks).toString("utf8");
}

const COLUMNS: Column<BulkResult>[] = [
  { head: "NAME", cell: (r) => r.name },
  { head: "VOLUME ID", cell: (r) => r.volume?.volumeId },
  { head: "RESULT", cell: (r) => r.error ?? (r.result === "exists" ? "exists (already there)" : r.result) ?? "created or already there" },
  { head: "REQUEST", cell: (r) => r.requestId, wide: true },
];

/** Whether `volume create` was given a batch: several names, or -f. */
export const isBulk = (names: string[], o: BulkCreateOptions) => names.length !== 1 || o.filename !== undefined;

/** The ids of the live volumes of every cluster in scope, before the creates (undefined: the journals cannot be asked). */
async function existingIds(s: Session): Promise<Set<string> | undefined> {
  try {
    return new Set((await Promise.all(inScope(s).map((c) => clusterVolumes(s, c)))).flat().map((v) => v.id));
  } catch {
    return undefined;
  }
}

export async function volumeCreateMany(s: Session, given: string[], o: BulkCreateOptions): Promise<number> {
  const concurrency = concurrencyOption(o.concurrency);
  const names =
    o.filename === undefined ? parseNames("", "", given) : parseNames(await readInput(o.filename), o.filename === "-" ? "stdin" : o.filename, given);
  if (names.length === 0) throw usageError("no names: give them as arguments, or one a line with -f FILE (- for stdin)");
  const requests = names.map((n) => createVolumeRequest(s, n, o)); // every option checked before the first call
  const client = s.csi("Controller"); // one client: one channel, one connection for every call
  const json = csiMethodJson("Controller", "CreateVolume");
  const before = await existingIds(s);
  const progress = startProgress(s.out.json, "create", names.length, "volumes");
  const results = await mapLimit(
    requests,
    concurrency,
    async (request, i): Promise<BulkResult> => {
      const { requestId, md } = withRequestId(o.requestId === undefined ? undefined : `${o.requestId}-${i + 1}`);
      try {
        const { volume } = json.response<{ volume: VolumeJson }>(await client.CreateVolume(request, md));
        const existed = before?.has(volume.volumeId);
        return { name: request.name, requestId, volume, ...(existed === undefined ? {} : { result: existed ? "exists" : "created" }) };
      } catch (err) {
        const { exitCode, message } = explain(err);
        return { name: request.name, requestId, error: message, exitCode };
      }
    },
    (n) => progress.update(n),
  );
  progress.finish(results.length);
  const failed = results.filter((r) => r.error !== undefined);
  s.out.result(
    { items: results.map(({ exitCode: _, ...r }) => r) },
    (h) => listing(COLUMNS, results, h),
    () => results.flatMap((r) => (r.volume ? [r.volume.volumeId] : [])),
  );
  const there = results.filter((r) => r.result === "exists").length;
  const made = results.length - failed.length - there;
  s.out.note(`${made} ${before ? "created" : "created or already there"}, ${there ? `${there} already there, ` : ""}${failed.length} failed`);
  if (failed.length === 0) return EXIT.ok;
  const codes = new Set(failed.map((r) => r.exitCode));
  return codes.size === 1 ? (failed[0]?.exitCode ?? EXIT.failed) : EXIT.failed;
}
