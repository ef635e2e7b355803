/**
 * Package boundaries (issue 22), over every TypeScript and JavaScript file of the tree (imports,
 * re-exports, `import type`, dynamic `import()`, `require`, `….resolve("…")`):
 *
 *  1. packages/ are what the services build on: nothing under packages/ imports a service or a
 *     tool (`@csi/journal`, `@csi/controller`, `@csi/node-agent`, `@csi/cli`, `@csi/testkit`) or a
 *     path into services/ or tools/;
 *  2. no relative import crosses from one workspace package into another (or between a package and
 *     the root's test/, scripts/, bench/): nothing outside services/X reaches services/X/src;
 *  3. every `@csi/<pkg>[/<entry>]` names an entry that package declares in its exports;
 *  4. a workspace imports only the @csi packages its package.json depends on.
 *
 * The second test plants one bad import per rule in a copy of the tree's file list and sees each fail.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { ROOT } from "@csi/testkit";
import ts from "typescript";

interface SourceFile {
  /** Relative to the root, with / separators. */
  file: string;
  text: string;
}
interface Workspace {
  dir: string;
  name: string;
  /** The subpaths it declares: ".", "./operator", … */
  entries: Set<string>;
  /** The packages its package.json names (dependencies of every kind). */
  deps: Set<string>;
}

const SKIP = new Set(["node_modules", "dist", ".git", ".data", "run", "generated", "results"]);
const CODE = /\.(ts|mts|cts|js|mjs|cjs)$/;

function sourceFiles(dir = ROOT): SourceFile[] {
  return readdirSync(dir).flatMap((e) => {
    if (SKIP.has(e)) return [];
    const p = path.join(dir, e);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    if (!CODE.test(e) || e.endsWith(".d.ts")) return [];
    return [{ file: path.relative(ROOT, p).split(path.sep).join("/"), text: readFileSync(p, "utf8") }];
  });
}

function workspaces(): Workspace[] {
  const root = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { workspaces: string[] };
  return root.workspaces.map((dir) => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, dir, "package.json"), "utf8")) as {
      name: string;
      exports?: Record<string, unknown>;
      dependencies?: Record<string, string>;
      devDependencies?: Record<string, string>;
    };
    return {
      dir,
      name: pkg.name,
      entries: new Set(Object.keys(pkg.exports ?? {})),
      deps: new Set([...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})]),
    };
  });
}

/** Every module specifier a file names, with its line: what TypeScript's preprocessor finds, and `<anything>.resolve("<literal>")` calls. */
function importsOf(f: SourceFile): { spec: string; line: number }[] {
  const source = ts.createSourceFile(f.file, f.text, ts.ScriptTarget.Latest, false);
  const lineOf = (pos: number) => source.getLineAndCharacterOfPosition(pos).line + 1;
  const found = ts.preProcessFile(f.text, true, true).importedFiles.map((i) => ({ spec: i.fileName, line: lineOf(i.pos) }));
  const visit = (node: ts.Node): void => {
    const call = ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) ? node.expression : undefined;
    // require.resolve, import.meta.resolve, createRequire(…).resolve: not path.resolve.
    if (ts.isCallExpression(node) && call?.name.text === "resolve" && !/^(path|path\.posix|posix)$/.test(call.expression.getText(source))) {
      const arg = node.arguments[0];
      if (arg && ts.isStringLiteralLike(arg)) found.push({ spec: arg.text, line: lineOf(arg.getStart(source)) });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const SERVICE_OR_TOOL = /^@csi\/(journal|controller|node-agent|cli|testkit)(\/|$)/;

function checkBoundaries(files: SourceFile[], ws: Workspace[]): string[] {
  const problems: string[] = [];
  const ownerOf = (p: string) => ws.find((w) => p === w.dir || p.startsWith(`${w.dir}/`));
  const byName = new Map(ws.map((w) => [w.name, w]));
  for (const f of files) {
    const owner = ownerOf(f.file);
    const inPackages = f.file.startsWith("packages/");
    for (const { spec, line } of importsOf(f)) {
      const at = `${f.file}:${line} imports ${spec}`;
      if (spec.startsWith(".")) {
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(f.file), spec));
        if (inPackages && /^(services|tools)\//.test(target)) problems.push(`${at}: a package does not depend on a service or a tool`);
        const to = ownerOf(target);
        if (to !== owner)
          problems.push(`${at}: a relative path from ${owner?.name ?? "the root"} into ${to?.name ?? "the root"}; import it by name, through a declared entry`);
        continue;
      }
      const m = /^(@csi\/[^/]+)(?:\/(.+))?$/.exec(spec);
      if (!m) continue;
      const [, name, sub] = m as unknown as [string, string, string | undefined];
      if (inPackages && SERVICE_OR_TOOL.test(spec)) problems.push(`${at}: a package does not depend on a service or a tool`);
      const target = byName.get(name);
      if (!target) {
        problems.push(`${at}: no workspace is named ${name}`);
        continue;
      }
      const entry = sub === undefined ? "." : `./${sub}`;
      if (!target.entries.has(entry)) problems.push(`${at}: ${entry} is not an entry of ${name} (it declares ${[...target.entries].join(", ")})`);
      if (owner && owner !== target && !owner.deps.has(name)) problems.push(`${at}: ${owner.dir}/package.json does not depend on ${name}`);
    }
  }
  return problems;
}

describe("package boundaries", () => {
  const files = sourceFiles();
  const ws = workspaces();

  test("the tree keeps them", () => {
    assert.ok(files.length > 250, `${files.length} files scanned`);
    assert.ok(
      files.some((f) => f.file.startsWith("tools/testkit/src/")),
      "the testkit is scanned",
    );
    assert.deepEqual(checkBoundaries(files, ws), []);
  });

  test("each rule fails on a planted import, whatever its form", () => {
    const planted = (file: string, text: string) => checkBoundaries([...files, { file, text }], ws);
    const fails = (problems: string[], re: RegExp) =>
      assert.ok(
        problems.some((p) => re.test(p)),
        `expected a problem matching ${re}, got:\n  ${problems.join("\n  ") || "(none)"}`,
      );
    // 1. packages/ depend on no service and no tool.
    fails(
      planted("packages/runtime/src/x.ts", 'import { keysFor } from "@csi/journal/operator";\n'),
      /runtime\/src\/x\.ts:1 .*a package does not depend on a service/,
    );
    fails(
      planted("packages/contracts/src/x.ts", 'export type { Journal } from "../../../tools/testkit/src/index.js";\n'),
      /a package does not depend on a service or a tool/,
    );
    // 2. No relative path across packages: not into a service's src from the tests, a tool, the bench.
    fails(
      planted("test/x.test.ts", 'import type { Journal } from "../services/journal/src/app/journal.js";\n'),
      /test\/x\.test\.ts:1 imports \.\.\/services\/journal\/src\/app\/journal\.js: a relative path from the root into @csi\/journal/,
    );
    fails(
      planted("tools/csictl/src/x.ts", '\n\nconst m = await import("../../../services/journal/src/adapters/file-pool.js");\n'),
      /tools\/csictl\/src\/x\.ts:3 .*from @csi\/cli into @csi\/journal/,
    );
    fails(planted("bench/x.ts", 'const { run } = require("../services/node-agent/src/adapters/exec.js");\n'), /into @csi\/node-agent/);
    fails(planted("tools/testkit/src/x.ts", 'export * from "../../../scripts/lib/stack.js";\n'), /from @csi\/testkit into the root/);
    // 3. Only declared entries.
    fails(planted("bench/x.ts", 'import { Journal } from "@csi/journal/src/app/journal.js";\n'), /\.\/src\/app\/journal\.js is not an entry of @csi\/journal/);
    fails(
      planted("scripts/x.ts", 'await import("@csi/node-agent/internals");\n'),
      /\.\/internals is not an entry of @csi\/node-agent \(it declares \., \.\/testing\)/,
    );
    fails(planted("test/x.test.ts", 'const p = createRequire(import.meta.url).resolve("@csi/contracts/package.json");\n'), /\.\/package\.json is not an entry/);
    fails(planted("test/x.test.ts", 'import "@csi/nope";\n'), /no workspace is named @csi\/nope/);
    // 4. A workspace imports only what it depends on.
    fails(
      planted("services/controller/src/x.ts", 'import { spawnService } from "@csi/testkit";\n'),
      /services\/controller\/package\.json does not depend on @csi\/testkit/,
    );
  });
});
