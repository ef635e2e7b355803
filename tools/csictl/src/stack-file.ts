/**
 * `run/stack.json`: where a running `npm start` says its endpoints are, so that csictl finds the
 * local stack on its own. scripts/start.ts writes it once the stack is ready and removes it when
 * the stack stops; csictl reads it (and ignores it when the process that wrote it is gone).
 */
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { processAlive } from "@csi/runtime";
import { z } from "zod";

export const STACK_FILE = "stack.json";

export const StackFile = z.object({
  /** The process that runs the stack (`npm start`): the file is stale once it is gone. */
  pid: z.number().int().positive(),
  startedAt: z.string(),
  controllerEndpoint: z.string().min(1),
  nodeEndpoint: z.string().min(1),
  nodeId: z.string().min(1),
  natsUrl: z.string().min(1),
  redisUrl: z.string().min(1),
  /** An HA stack (`npm start -- --ha`): the sentinels (host:port,…) and the master name; redisUrl is then the primary at start. */
  redisSentinels: z.string().min(1).optional(),
  redisMasterName: z.string().min(1).optional(),
  clustersFile: z.string().min(1).optional(),
  dataDir: z.string().min(1),
  /** Each service's ops listener (/metrics, /healthz, /readyz) when the stack was ready, by service name. */
  metrics: z.record(z.string(), z.string()).optional(),
  /** A locked-down stack (SECURE=1): where its credentials are (files 0600; never the secrets themselves). */
  authDir: z.string().min(1).optional(),
});
export type StackFile = z.infer<typeof StackFile>;

export const stackFilePath = (runDir: string) => path.join(runDir, STACK_FILE);

/** Written atomically (temp file + rename): a reader never sees half a file. */
export function writeStackFile(runDir: string, stack: StackFile): string {
  const file = stackFilePath(runDir);
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(StackFile.parse(stack), null, 2)}\n`, { mode: 0o600 }); // a URL given with credentials in it stays private
  renameSync(tmp, file);
  return file;
}

/** Removed only if it is still this process's (a later stack may have written its own). */
export function removeStackFile(runDir: string, pid = process.pid): void {
  const file = stackFilePath(runDir);
  const current = readStackFile(file);
  if (current.found && current.stack.pid === pid) rmSync(file, { force: true });
}

export type StackLookup = { found: true; stack: StackFile; file: string } | { found: false; file: string; why: string };

export function readStackFile(file: string): StackLookup {
  if (!existsSync(file)) return { found: false, file, why: `no ${file} (is \`npm start\` running?)` };
  let parsed: ReturnType<typeof StackFile.safeParse>;
  try {
    parsed = StackFile.safeParse(JSON.parse(readFileSync(file, "utf8")));
  } catch (err) {
    return { found: false, file, why: `${file} cannot be read: ${(err as Error).message}` };
  }
  if (!parsed.success) return { found: false, file, why: `${file} is not a stack file` };
  if (!processAlive(parsed.data.pid)) return { found: false, file, why: `${file} is left from a stack that is gone (pid ${parsed.data.pid})` };
  return { found: true, stack: parsed.data, file };
}
