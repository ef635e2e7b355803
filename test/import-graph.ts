/**
 * The import graph of the house's TypeScript (test/code-shape.test.ts keeps it free of circles):
 * each file's imports and re-exports (type-only ones included: a circle of types is a circle of
 * concerns), resolved as the workspaces resolve them: relative paths ("./x.js" is ./x.ts), and a
 * workspace package by name (`@csi/contracts`, `@csi/journal/log`) to the "source" file of
 * its package.json export. Other packages are outside the graph.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import ts from "typescript";

/** Every workspace package by name, with its exports' source files (subpath → file, relative to root). */
function workspaceExports(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { workspaces: string[] };
  for (const ws of pkg.workspaces) {
    const json = JSON.parse(readFileSync(path.join(root, ws, "package.json"), "utf8")) as {
      name: string;
      exports?: Record<string, { source?: string } | string>;
    };
    for (const [sub, target] of Object.entries(json.exports ?? {})) {
      const source = typeof target === "string" ? target : target.source;
      if (source?.endsWith(".ts")) out.set(path.posix.join(json.name, sub), path.join(ws, source));
    }
  }
  return out;
}

/** The specifiers a file imports or re-exports (static and dynamic with a literal). */
export function importsOf(file: string, text: string): string[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const out: string[] = [];
  const visit = (node: ts.Node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier))
      out.push(node.moduleSpecifier.text);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0]))
      out.push(node.arguments[0].text);
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** The graph of the given files (paths relative to `root`): file → the files of the graph it imports. */
export function importGraph(root: string, files: readonly string[]): Map<string, string[]> {
  const exports = workspaceExports(root);
  const known = new Set(files);
  const resolve = (from: string, spec: string): string | undefined => {
    if (spec.startsWith(".")) {
      const base = path.join(path.dirname(from), spec);
      const stem = base.replace(/\.(m?js|ts)$/, "");
      return [`${stem}.ts`, `${stem}.mts`, base, path.join(base, "index.ts")].find((f) => known.has(f) || existsSync(path.join(root, f)));
    }
    return exports.get(spec);
  };
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const to = importsOf(f, readFileSync(path.join(root, f), "utf8")).flatMap((s) => {
      const r = resolve(f, s);
      return r !== undefined && known.has(r) ? [r] : [];
    });
    graph.set(f, [...new Set(to)]);
  }
  return graph;
}

/** The import circles of a graph: each strongly connected set of files larger than one (or a file importing itself), sorted. */
export function importCircles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const connect = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v) as number, idx.get(w) as number));
    }
    if (low.get(v) !== idx.get(v)) return;
    const set: string[] = [];
    let w: string | undefined;
    do {
      w = stack.pop() as string;
      on.delete(w);
      set.push(w);
    } while (w !== v);
    if (set.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(set.sort());
  };
  for (const v of graph.keys()) if (!idx.has(v)) connect(v);
  return out.sort((a, b) => (a[0] as string).localeCompare(b[0] as string));
}

/** The TypeScript files under `dirs` of `root` (no dist/, node_modules, generated code or declarations); `tests`: with the *.test.ts files. */
export function tsFiles(root: string, dirs: readonly string[], tests = false): string[] {
  return dirs.flatMap((dir) =>
    readdirSync(path.join(root, dir), { withFileTypes: true, recursive: true })
      .filter((e) => e.isFile() && /\.m?ts$/.test(e.name) && !e.name.endsWith(".d.ts") && (tests || !e.name.endsWith(".test.ts")))
      .map((e) => path.relative(root, path.join(e.parentPath, e.name)))
      .filter((f) => !f.split(path.sep).some((part) => part === "dist" || part === "node_modules" || part === "generated")),
  );
}

/**
 * The rooms of a service's source (`src`: each directory under it, inner rooms named in `inner`)
 * and the imports that enter a room behind its door: a file of one room importing a file of
 * another that is not the other's door — its index.ts, or its port.ts (a port is a door) for a
 * room, its index.ts for an inner room. The `core` rooms' files are everyone's; within one room
 * (its inner rooms included) files import each other freely; files directly under `src` (the
 * composition root) are in no room and wire any. Each crossing as "from → to".
 */
export function behindDoors(
  graph: ReadonlyMap<string, readonly string[]>,
  src: string,
  rooms: { inner: readonly string[]; core: readonly string[] },
): string[] {
  const place = (file: string) => {
    const rel = path.posix.relative(src, file);
    if (rel.startsWith("..") || !rel.includes("/")) return undefined;
    const room = rel.split("/")[0] as string;
    return { room, part: rooms.inner.find((i) => rel.startsWith(`${i}/`)) ?? room, rel };
  };
  const out: string[] = [];
  for (const [from, tos] of graph) {
    const a = place(from);
    if (!a) continue;
    for (const to of tos) {
      const b = place(to);
      if (!b || b.room === a.room || rooms.core.includes(b.room)) continue;
      const doors = b.part === b.room ? [`${b.part}/index.ts`, `${b.part}/port.ts`] : [`${b.part}/index.ts`];
      if (!doors.includes(b.rel)) out.push(`${from} → ${to}`);
    }
  }
  return out.sort();
}
