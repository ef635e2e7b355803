/**
 * Reading a service's /metrics in tests: the Prometheus text format (what prom-client writes)
 * parsed into samples, and lookups by name and labels. Hand-written because prom-client has no
 * parser and the npm ones are unmaintained; it reads sample lines only (`name{labels} value`),
 * which is all the tests look at. And promtool, to check a /metrics text the way Prometheus's own
 * linter does.
 */

import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { ROOT } from "./processes.js";

/**
 * promtool (the Prometheus project's checker): $PROMTOOL, else on the PATH, else in .tools/bin of
 * this checkout, where scripts/install-promtool.sh puts it (.ci/run runs it; as root, and unless
 * CSI_NO_APT=1, it is run here when promtool is missing). Else why not, for a skip.
 */
export function findPromtool(): { path: string } | { why: string } {
  const look = () =>
    [process.env.PROMTOOL, ...(process.env.PATH ?? "").split(":").map((d) => d && path.join(d, "promtool")), path.join(ROOT, ".tools/bin/promtool")].find(
      (p): p is string => !!p && existsSync(p),
    );
  let found = look();
  if (!found && process.getuid?.() === 0 && process.env.CSI_NO_APT !== "1") {
    try {
      execFileSync("bash", [path.join(ROOT, "scripts/install-promtool.sh")], { stdio: "ignore" });
    } catch {
      // reported below
    }
    found = look();
  }
  return found ? { path: found } : { why: "promtool not found: run scripts/install-promtool.sh (as root: it extracts it from Debian's prometheus package)" };
}

/** `promtool check metrics` of a /metrics text: its exit status and what it printed (each problem a line). */
export function promtoolCheckMetrics(promtool: string, text: string): { status: number | null; output: string } {
  const r = spawnSync(promtool, ["check", "metrics"], { input: text, encoding: "utf8" });
  return { status: r.status, output: `${r.stdout}${r.stderr}`.trim() };
}

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
const unescapeLabel = (v: string) => v.replace(/\\(["\\n])/g, (_, c: string) => (c === "n" ? "\n" : c));

export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = LINE.exec(line);
    if (!m) throw new Error(`not a sample line: ${line.slice(0, 120)}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL)) labels[l[1] as string] = unescapeLabel(l[2] as string);
    const v = m[3] as string;
    samples.push({ name: m[1] as string, labels, value: v === "+Inf" ? Infinity : v === "-Inf" ? -Infinity : Number(v) });
  }
  return samples;
}

/** Every series name the registry declares (its `# TYPE` lines), with and without samples; a histogram's _bucket/_sum/_count too. */
export function registeredNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    names.add(name);
    if (type === "histogram" || type === "summary") for (const end of ["_bucket", "_sum", "_count"]) names.add(name + end);
  }
  return names;
}

export async function scrapeText(url: string | undefined): Promise<string> {
  if (!url) throw new Error("the service has no metrics URL (not ready, or METRICS_ADDR=off)");
  const res = await fetch(`${url}/metrics`);
  if (res.status !== 200) throw new Error(`${url}/metrics answered ${res.status}`);
  return res.text();
}

export async function scrape(url: string | undefined): Promise<Sample[]> {
  return parseMetrics(await scrapeText(url));
}

/** The value of the sample `name` whose labels include `labels` (0 when there is none: a counter not yet incremented). */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const hit = samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return hit?.value ?? 0;
}

/** Whether any sample of `name` (with `labels`) is there at all. */
export function has(samples: Sample[], name: string, labels: Record<string, string> = {}): boolean {
  return samples.some((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** Every `name` whose samples exist (histograms: their base name too). */
export function metricNames(samples: Sample[]): Set<string> {
  const names = new Set<string>();
  for (const s of samples) {
    names.add(s.name);
    const base = s.name.replace(/_(bucket|sum|count)$/, "");
    if (base !== s.name) names.add(base);
  }
  return names;
}

/** /readyz: its status and JSON. */
export async function readyz(
  url: string | undefined,
): Promise<{ status: number; body: { ready: boolean; failing?: string; reason?: string; checks: Record<string, string> } }> {
  if (!url) throw new Error("the service has no metrics URL");
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as { ready: boolean; failing?: string; checks: Record<string, string> } };
}

/** Ask /readyz until `want` holds (up to `ms`); returns the last answer. */
export async function readyzUntil(url: string | undefined, want: (r: Awaited<ReturnType<typeof readyz>>) => boolean, ms = 15_000) {
  const until = Date.now() + ms;
  for (;;) {
    const r = await readyz(url).catch(() => undefined);
    if (r && (want(r) || Date.now() > until)) return r;
    if (!r && Date.now() > until) throw new Error(`${url}/readyz does not answer`);
    await new Promise((res) => setTimeout(res, 100));
  }
}
