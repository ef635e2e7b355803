/**
 * The shape issue 22 asked of the code, kept: no function in services/ longer than 80 lines,
 * the journal's command file under 200 lines, few double casts (`as unknown as`) in product code.
 * Read with the TypeScript compiler's own parser, so a function is what the language says it is.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";

const ROOT = path.resolve(import.meta.dirname, "..");
const MAX_FUNCTION_LINES = 80;

function sources(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".test.ts") && !e.name.endsWith(".d.ts"))
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)))
    .filter((f) => !f.includes(`${path.sep}dist${path.sep}`) && !f.includes("node_modules") && !f.includes(`${path.sep}generated${path.sep}`));
}

/** Every function (declaration, method, arrow, expression) of a file longer than `max` lines: "file:line name (n lines)". */
export function longFunctions(file: string, text: string, max: number): string[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = end - start + 1;
      const name =
        node.name && ts.isIdentifier(node.name)
          ? node.name.text
          : ts.isPropertyAssignment(node.parent) && ts.isIdentifier(node.parent.name)
            ? node.parent.name.text
            : "(anonymous)";
      if (lines > max) out.push(`${file}:${start + 1} ${name} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

test(`no function in services/ is longer than ${MAX_FUNCTION_LINES} lines`, () => {
  const long = sources("services").flatMap((f) => longFunctions(f, readFileSync(path.join(ROOT, f), "utf8"), MAX_FUNCTION_LINES));
  assert.deepEqual(long, []);
});

test("the check finds a long function (it can fail)", () => {
  const body = Array.from({ length: 90 }, (_, i) => `  const x${i} = ${i};`).join("\n");
  assert.equal(longFunctions("x.ts", `export function big() {\n${body}\n}\n`, MAX_FUNCTION_LINES).length, 1);
});

test("the journal's command file is under 200 lines", () => {
  const lines = readFileSync(path.join(ROOT, "services/journal/src/app/journal.ts"), "utf8").split("\n").length;
  assert.ok(lines < 200, `${lines} lines`);
});

test("at most 4 double casts (`as unknown as`) in product code (services, packages, csictl)", () => {
  const found = ["services", "packages", "tools/csictl"].flatMap((d) =>
    sources(d).flatMap((f) =>
      readFileSync(path.join(ROOT, f), "utf8")
        .split("\n")
        .flatMap((l, i) => (l.includes("as unknown as") && !l.trim().startsWith("//") && !l.trim().startsWith("*") ? [`${f}:${i + 1}`] : [])),
    ),
  );
  assert.ok(found.length <= 4, found.join("\n"));
});
