/**
 * One Node line everywhere (issue 23; docs/building.md, "Which Node"): the Node the tests run on,
 * package.json's `engines`, the exact release CI installs (.ci/with-node), `@types/node`, the
 * Dockerfile's images, and every locked package's own `engines` (what `npm ci --engine-strict`
 * refuses) agree on the supported LTS line. The second half breaks one fact at a time and sees
 * the check fail.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { parseDockerfile } from "@csi/testkit";
import semver from "semver";

const ROOT = path.resolve(import.meta.dirname, "..");
const read = (p: string) => readFileSync(path.join(ROOT, p), "utf8");

/** What decides which Node the project runs on, each where it is written down. */
interface NodeFacts {
  /** package.json `engines.node`. */
  engines: string | undefined;
  /** The exact release CI runs on: NODE_VERSION in .ci/with-node. */
  pinned: string | undefined;
  /** package.json's `@types/node` range. */
  types: string | undefined;
  /** Each Dockerfile stage: its base (an image, or an earlier stage's name), its name, its FROM line. */
  images: { from: string; name: string | undefined; line: number }[];
  /** The Dockerfile's `npm ci` steps, with their lines. */
  installs: { step: string; line: number }[];
  /** Every package of the lockfile that declares `engines.node`. */
  locked: { name: string; engines: string }[];
}

interface Lockfile {
  packages: Record<string, { engines?: { node?: string } | string[] }>;
}

function factsOf(files: { pkg: string; withNode: string; dockerfile: string; lock: string }): NodeFacts {
  const pkg = JSON.parse(files.pkg) as { engines?: { node?: string }; devDependencies?: Record<string, string> };
  const lock = JSON.parse(files.lock) as Lockfile;
  const stages = parseDockerfile(files.dockerfile);
  return {
    engines: pkg.engines?.node,
    pinned: /^NODE_VERSION=(\S+)$/m.exec(files.withNode)?.[1],
    types: pkg.devDependencies?.["@types/node"],
    images: stages.map((s) => ({ from: s.from, name: s.name, line: s.instructions[0]?.line ?? 0 })),
    installs: stages.flatMap((s) =>
      s.instructions.flatMap((i) =>
        i.op === "RUN" ? i.args.split("&&").flatMap((x) => (/^\s*npm ci\b/.test(x) ? [{ step: x.trim(), line: i.line }] : [])) : [],
      ),
    ),
    locked: Object.entries(lock.packages).flatMap(([where, p]) =>
      where && p.engines && !Array.isArray(p.engines) && p.engines.node ? [{ name: where.replace(/^.*node_modules\//, ""), engines: p.engines.node }] : [],
    ),
  };
}

const realFiles = () => ({ pkg: read("package.json"), withNode: read(".ci/with-node"), dockerfile: read("Dockerfile"), lock: read("package-lock.json") });

/** The problems with a set of facts: none when they all name one Node line that the pinned release satisfies. */
function checkNodeLine(f: NodeFacts): string[] {
  const floor = f.engines && semver.validRange(f.engines) ? semver.minVersion(f.engines) : null;
  if (!floor) return [`package.json engines.node ${JSON.stringify(f.engines)} is not a version range`];
  const line = floor.major;
  const problems: string[] = [];
  if (!f.pinned || !semver.valid(f.pinned)) problems.push(`.ci/with-node pins no exact version (NODE_VERSION=${f.pinned ?? ""})`);
  else {
    if (semver.major(f.pinned) !== line) problems.push(`.ci/with-node pins Node ${f.pinned}, not of line ${line} (engines ${f.engines})`);
    if (!semver.satisfies(f.pinned, f.engines as string)) problems.push(`.ci/with-node pins Node ${f.pinned}, outside engines ${f.engines}`);
    for (const p of f.locked)
      if (!semver.satisfies(f.pinned, p.engines)) problems.push(`${p.name} needs Node ${p.engines}: npm ci --engine-strict refuses it on ${f.pinned}`);
  }
  const typesFloor = f.types && semver.validRange(f.types) ? semver.minVersion(f.types) : null;
  if (typesFloor?.major !== line) problems.push(`@types/node ${f.types ?? "(none)"} describes another line than Node ${line}`);
  const stages = new Set<string>();
  for (const [i, image] of f.images.entries()) {
    // FROM an earlier stage inherits that stage's image; any other base must be of the line.
    if (!stages.has(image.from) && !new RegExp(`^node:${line}(?:[.-]|$)`).test(image.from))
      problems.push(`Dockerfile line ${image.line}: stage ${i + 1} is FROM ${image.from}, not a node:${line} image`);
    if (image.name) stages.add(image.name);
  }
  if (f.images.length === 0) problems.push("the Dockerfile has no stage");
  for (const i of f.installs)
    if (!/\s--engine-strict\b/.test(i.step))
      problems.push(`Dockerfile line ${i.line}: ${i.step}: without --engine-strict, an image of another line would build`);
  return problems;
}

describe("one Node line: the running node, engines, CI's pinned node, @types/node, the image, the lockfile", () => {
  test("the tests run on a Node that package.json's engines accept (CI: .ci/with-node)", () => {
    const engines = factsOf(realFiles()).engines as string;
    assert.ok(semver.satisfies(process.version, engines), `this is Node ${process.version}; engines.node is ${engines}: run the tests with .ci/with-node`);
  });

  test("they all agree, and every locked package accepts the pinned release", () => {
    const facts = factsOf(realFiles());
    assert.deepEqual(checkNodeLine(facts), []);
    assert.ok(facts.locked.length > 5, "the lockfile's engines were read");
    assert.equal(facts.images.length, 3);
    assert.equal(facts.installs.length, 2);
  });
});

describe("the check fails on a broken copy", () => {
  const facts = () => factsOf(realFiles());
  const fails = (change: (f: NodeFacts) => void, re: RegExp) => {
    const f = facts();
    change(f);
    assert.match(checkNodeLine(f).join("\n"), re);
  };

  test("engines of another line, or none", () => {
    fails((f) => (f.engines = ">=20"), /pins Node 24\.\d+\.\d+, not of line 20/);
    fails((f) => (f.engines = undefined), /engines.node undefined is not a version range/);
    fails((f) => (f.engines = ">=24.99.0"), /outside engines >=24\.99\.0/);
  });

  test("CI pinned to another line, or to no exact release", () => {
    fails((f) => (f.pinned = "22.20.0"), /pins Node 22\.20\.0, not of line 24/);
    fails((f) => (f.pinned = "24"), /pins no exact version/);
  });

  test("@types/node of another line", () => {
    fails((f) => (f.types = "^20.19.0"), /@types\/node \^20\.19\.0 describes another line than Node 24/);
    fails((f) => (f.types = "^26.0.0"), /@types\/node \^26\.0\.0/);
  });

  test("a Dockerfile stage on another node image", () => {
    fails((f) => ((f.images[1] as { from: string }).from = "node:20-bookworm-slim"), /stage 2 is FROM node:20-bookworm-slim, not a node:24 image/);
    fails((f) => ((f.images[2] as { from: string }).from = "node:240-slim"), /stage 3 is FROM node:240-slim/);
  });

  test("a Dockerfile npm ci that would install on any Node", () => {
    fails(
      (f) => ((f.installs[1] as { step: string }).step = "npm ci --omit=dev --no-audit --no-fund"),
      /npm ci --omit=dev --no-audit --no-fund: without --engine-strict/,
    );
  });

  test("a locked package that needs a newer Node than the pinned one", () => {
    fails((f) => f.locked.push({ name: "some-lib", engines: ">=26" }), /some-lib needs Node >=26: npm ci --engine-strict refuses it on 24\./);
  });
});

describe("npm itself keeps to the line: devEngines, install scripts", () => {
  const pkg = JSON.parse(read("package.json")) as {
    engines: { node: string };
    devEngines?: { runtime?: { name: string; version: string; onFail?: string } };
    allowScripts?: Record<string, boolean>;
  };
  test("devEngines.runtime is engines.node with onFail error: npm ci, npm start and npm test refuse another Node", () => {
    assert.deepEqual(pkg.devEngines?.runtime, { name: "node", version: pkg.engines.node, onFail: "error" });
  });
  test("every locked package with install scripts is decided in allowScripts (npm ci prints no install-scripts warning)", () => {
    const lock = JSON.parse(read("package-lock.json")) as { packages: Record<string, { hasInstallScript?: boolean }> };
    const scripted = Object.entries(lock.packages).flatMap(([where, p]) => (p.hasInstallScript && where ? [where.replace(/^.*node_modules\//, "")] : []));
    assert.ok(scripted.length > 0);
    for (const name of scripted) assert.equal(typeof pkg.allowScripts?.[name], "boolean", `${name} has install scripts: approve or deny it in allowScripts`);
  });
  // The machine's own node, where it is of another line (Debian's 20 here): npm refuses to run a script on it.
  const other = ["/usr/bin/node", "/usr/local/bin/node"].find((p) => {
    try {
      return p !== process.execPath && semver.major(execFileSync(p, ["--version"], { encoding: "utf8" }).trim()) !== semver.major(process.version);
    } catch {
      return false;
    }
  });
  test("npm run on a Node of another line is refused (EBADDEVENGINES)", { skip: other ? false : "no node of another line on this machine" }, () => {
    const dir = path.dirname(other as string);
    const r = spawnSync("npm", ["run", "csictl", "--", "--version"], {
      cwd: ROOT,
      env: { ...process.env, PATH: `${dir}:${process.env.PATH}` },
      encoding: "utf8",
    });
    assert.notEqual(r.status, 0, r.stdout);
    assert.match(r.stderr, /EBADDEVENGINES/);
  });
});
