/**
 * The CSI conformance suite (csi-sanity, kubernetes-csi/csi-test) against a fresh stack in a
 * temporary directory, so it can run beside `npm start`; with `ceph`, a stack whose default pool is
 * an RBD pool on a single-node Ceph started in that directory. Used by `npm run sanity` and by
 * test/sanity.test.ts. Whatever happens — failure, exception, abort — the stack is stopped and
 * everything under the temporary directory is unmounted, its loop devices are detached and it is
 * removed.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { mkdir, mkdtemp } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { cleanupUnder, ROOT } from "@csi/testkit";
import { type Stack, startStack } from "./stack.js";

export { whyNoDevices } from "@csi/testkit";

export const sanityBinary = (env: NodeJS.ProcessEnv = process.env) => path.resolve(env.CSI_SANITY || path.join(ROOT, "..", "shared", "tools", "csi-sanity"));
export const MUTABLE_PARAMETERS = path.join(ROOT, "test", "sanity", "mutable-parameters.yaml");

/** Why `binary` cannot be run, or undefined when it can. */
export function whyNoBinary(binary: string): string | undefined {
  try {
    accessSync(binary, constants.X_OK);
    return undefined;
  } catch {
    return `no csi-sanity binary at ${binary}; set CSI_SANITY=/path/to/csi-sanity (build it from github.com/kubernetes-csi/csi-test, cmd/csi-sanity)`;
  }
}

export interface SanitySummary {
  ran: number;
  total: number;
  passed: number;
  failed: number;
  pending: number;
  skipped: number;
}

export interface SanityResult {
  exitCode: number | null;
  summary: SanitySummary | undefined;
  output: string;
  /** csi-sanity exited 0, printed its summary and that summary has no failure. */
  ok: boolean;
}

/** Ginkgo's closing lines: "Ran 75 of 92 Specs in 61.2 seconds" and "FAIL! -- 72 Passed | 3 Failed | 1 Pending | 16 Skipped". */
export function parseSummary(output: string): SanitySummary | undefined {
  const ran = /Ran (\d+) of (\d+) Specs?/.exec(output);
  const counts = /(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped/.exec(output);
  if (!ran || !counts) return undefined;
  const [passed, failed, pending, skipped] = counts.slice(1).map(Number) as [number, number, number, number];
  return { ran: Number(ran[1]), total: Number(ran[2]), passed, failed, pending, skipped };
}

export function summaryLine(r: SanityResult): string {
  const s = r.summary;
  if (!s) return `csi-sanity exited ${r.exitCode} without a summary line`;
  const figures = `${s.passed} passed, ${s.failed} failed, ${s.pending} pending, ${s.skipped} skipped`;
  return `csi-sanity ran ${s.ran} of ${s.total} specs: ${figures} (${r.ok ? "ok" : `FAILED, exit ${r.exitCode}`})`;
}

export interface SanityOptions {
  binary?: string;
  /** Extra csi-sanity arguments, after ours (so they win): --ginkgo.focus=…, --ginkgo.v, … */
  args?: string[];
  /** csi-sanity's output as it comes. */
  onOutput?: (chunk: string) => void;
  onStackReady?: (stack: Stack) => void;
  /** Stops csi-sanity and the stack; runSanity then rejects with the abort reason. */
  signal?: AbortSignal;
  /** Against a stack whose default pool is an RBD pool on a local single-node Ceph (`npm run sanity -- --ceph`; stack.ts `ceph`), in the temporary directory too. */
  ceph?: boolean;
}

export async function runSanity(opts: SanityOptions = {}): Promise<SanityResult> {
  const binary = opts.binary ?? sanityBinary();
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-sanity-"));
  let stack: Stack | undefined;
  try {
    stack = await startStack({ dataDir: path.join(dir, "data"), runDir: path.join(dir, "run"), signal: opts.signal, ...(opts.ceph ? { ceph: true } : {}) });
    opts.onStackReady?.(stack);
    await mkdir(path.join(dir, "sanity"));
    const args = [
      `--csi.endpoint=${stack.nodeEndpoint}`,
      `--csi.controllerendpoint=${stack.controllerEndpoint}`,
      `--csi.stagingdir=${path.join(dir, "sanity", "staging")}`,
      `--csi.mountdir=${path.join(dir, "sanity", "mount")}`,
      "--csi.testvolumesize=67108864",
      "--csi.testvolumeexpandsize=134217728",
      "--csi.testnodevolumeattachlimit",
      `--csi.testvolumemutableparameters=${MUTABLE_PARAMETERS}`,
      "--ginkgo.no-color",
      ...(opts.args ?? []),
    ];
    const child = spawn(binary, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"], signal: opts.signal });
    let output = "";
    const onData = (chunk: string) => {
      output += chunk;
      opts.onOutput?.(chunk);
    };
    for (const stream of [child.stdout, child.stderr]) stream.setEncoding("utf8").on("data", onData);
    const exitCode = await new Promise<number | null>((resolve) => {
      child.on("error", (err) => {
        if (child.pid !== undefined) return; // an abort: "close" follows
        onData(`${err}\n`);
        resolve(null);
      });
      child.on("close", (code) => resolve(code));
    });
    opts.signal?.throwIfAborted();
    const summary = parseSummary(output);
    return { exitCode, summary, output, ok: exitCode === 0 && summary !== undefined && summary.failed === 0 };
  } finally {
    await stack?.stop();
    await cleanupUnder(dir);
  }
}

/** A test's verdict on a run (test/sanity.test.ts, test/rbd-sanity.test.ts): every spec that ran passed; the summary (and the output, on failure) as diagnostics. */
export function assertNoFailedSpec(t: { diagnostic(msg: string): void }, result: SanityResult): void {
  t.diagnostic(summaryLine(result));
  if (!result.ok) t.diagnostic(`csi-sanity output:\n${result.output}`);
  assert.ok(result.summary, "csi-sanity printed its summary");
  assert.ok(result.summary.ran > 0, "csi-sanity ran specs");
  assert.equal(result.summary.failed, 0, "failed specs");
  assert.equal(result.exitCode, 0, "csi-sanity's exit code");
}

/** `npm run sanity` arguments: `--ceph` (or CEPH=1) is ours, the rest go to csi-sanity. */
export function sanityArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): { ceph: boolean; args: string[] } {
  return { ceph: argv.includes("--ceph") || env.CEPH === "1", args: argv.filter((a) => a !== "--ceph") };
}

/** An AbortSignal that fires on SIGINT / SIGTERM, so an interrupted run still cleans up. */
export function abortOnSignals(): AbortSignal {
  const ac = new AbortController();
  const onSignal = (sig: NodeJS.Signals) => ac.abort(new Error(`interrupted by ${sig}`));
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return ac.signal;
}
