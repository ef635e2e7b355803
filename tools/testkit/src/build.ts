/**
 * What production runs (docs/building.md): the JavaScript `npm run build` makes (tsc -b
 * tsconfig.build.json, read through TypeScript's own config parser, so the answer is the
 * compiler's), and the Dockerfile whose final stage holds it. Used by test/deploy.test.ts (the
 * deployment files run only built files; the Dockerfile's final stage has no tsx) and
 * test/image.test.ts (the final stage replayed, then run).
 */
import path from "node:path";
import ts from "typescript";

/** Every .js file `tsc -b <config>` writes, relative to `root` with / separators: the projects it references, recursively. */
export function builtOutputs(root: string, config = "tsconfig.build.json"): Set<string> {
  const out = new Set<string>();
  const seen = new Set<string>();
  const host: ts.ParseConfigFileHost = {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(`${config}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`);
    },
  };
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const parsed = ts.getParsedCommandLineOfConfigFile(file, {}, host);
    if (!parsed) throw new Error(`cannot read ${file}`);
    for (const ref of parsed.projectReferences ?? []) visit(ts.resolveProjectReferencePath(ref));
    for (const f of parsed.fileNames)
      for (const o of ts.getOutputFileNames(parsed, f, false)) if (o.endsWith(".js")) out.add(path.relative(root, o).split(path.sep).join("/"));
  };
  visit(path.join(root, config));
  return out;
}

export interface DockerInstruction {
  /** Upper case: FROM, RUN, COPY, CMD, … */
  op: string;
  /** The rest of the instruction, continuation lines joined. */
  args: string;
  line: number;
}
export interface DockerStage {
  name: string | undefined;
  from: string;
  instructions: DockerInstruction[];
}

/** A Dockerfile's stages, each with its instructions (comments dropped, `\` continuations joined). */
export function parseDockerfile(text: string): DockerStage[] {
  const stages: DockerStage[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const start = i;
    let line = lines[i] as string;
    if (/^\s*(#|$)/.test(line)) continue;
    while (/\\\s*$/.test(line) && i + 1 < lines.length) {
      line = line.replace(/\\\s*$/, " ");
      const next = lines[++i] as string;
      if (!/^\s*#/.test(next)) line += next.trim();
    }
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`Dockerfile line ${start + 1}: not an instruction: ${line}`);
    const ins = { op: (m[1] as string).toUpperCase(), args: (m[2] as string).trim(), line: start + 1 };
    if (ins.op === "FROM") {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      stages.push({ from: f?.[1] ?? ins.args, name: f?.[2], instructions: [] });
    } else if (stages.length === 0) throw new Error(`Dockerfile line ${start + 1}: ${ins.op} before FROM`);
    stages.at(-1)?.instructions.push(ins);
  }
  return stages;
}

export interface DockerCopy {
  /** The stage it copies from, or undefined for the build context. */
  from: string | undefined;
  sources: string[];
  dest: string;
  line: number;
}

/** A COPY's sources and destination (`--from=stage`; other flags ignored; JSON form not used here). */
export function dockerCopy(ins: DockerInstruction): DockerCopy {
  const words = ins.args.split(/\s+/);
  const from = words.find((w) => w.startsWith("--from="))?.slice("--from=".length);
  const paths = words.filter((w) => !w.startsWith("--"));
  return { from, sources: paths.slice(0, -1), dest: paths.at(-1) ?? "", line: ins.line };
}

/** The exec form of CMD/ENTRYPOINT (a JSON array), or undefined for the shell form. */
export function execForm(ins: DockerInstruction | undefined): string[] | undefined {
  if (!ins) return undefined;
  try {
    const v = JSON.parse(ins.args) as unknown;
    return Array.isArray(v) && v.every((x) => typeof x === "string") ? v : undefined;
  } catch {
    return undefined;
  }
}

/** WORKDIR of a stage at its end (the image's working directory): "/" when none. */
export function workdir(stage: DockerStage): string {
  return stage.instructions.reduce((dir, i) => (i.op === "WORKDIR" ? path.posix.resolve(dir, i.args) : dir), "/");
}

/** Whether a stage runs `npm run build`: it then holds, under its WORKDIR, what the build makes. */
export const runsBuild = (stage: DockerStage) => stage.instructions.some((i) => i.op === "RUN" && /\bnpm run build\b/.test(i.args));

/** Where a file of a stage comes from: built by a stage that runs `npm run build`, or the build context; with the COPY line that brings it. */
export type Provenance = { built: true; stage: string; line: number } | { built: false; line: number };

/**
 * Where the file at `file` (relative to the stage's WORKDIR) comes from, following COPY lines that
 * keep it at the same place (the same path in the build context, whose root stands for the WORKDIR,
 * or under the other stage's WORKDIR) back through other stages; undefined when no COPY brings it.
 * A stage that runs `npm run build` makes what it holds under its WORKDIR.
 */
export function provenance(stages: DockerStage[], stage: DockerStage, file: string, seen = new Set<DockerStage>()): Provenance | undefined {
  const rel = path.posix.normalize(file);
  if (seen.has(stage)) return undefined;
  seen.add(stage);
  let dir = "/";
  let found: Provenance | undefined;
  for (const ins of stage.instructions) {
    if (ins.op === "WORKDIR") dir = path.posix.resolve(dir, ins.args);
    if (ins.op !== "COPY") continue;
    const copy = dockerCopy(ins);
    const inside = path.posix.relative(path.posix.resolve(dir, copy.dest), path.posix.resolve(dir, rel));
    if (inside.startsWith("..")) continue;
    const from = copy.from === undefined ? undefined : stages.find((st) => st.name === copy.from);
    for (const src of copy.sources) {
      const origin = path.posix.normalize(path.posix.join(src, inside));
      if (!from) {
        if (origin === rel) found = { built: false, line: ins.line };
        continue;
      }
      const there = path.posix.relative(workdir(from), origin);
      if (there.startsWith("..")) continue;
      if (runsBuild(from)) found = { built: true, stage: copy.from as string, line: ins.line };
      else {
        const p = provenance(stages, from, there, new Set(seen));
        if (p) found = p;
      }
    }
  }
  return found;
}

/**
 * The Dockerfile against what production must be: the final stage installs production
 * dependencies only (`npm ci --omit=dev`), mentions no tsx or typescript, and its CMD and every
 * script the deployment files run (`scripts`, relative to the WORKDIR) come from a stage that runs
 * `npm run build` (the command checks themselves are `checkCommands`').
 */
export function checkDockerfile(stages: DockerStage[], scripts: string[]): string[] {
  const problems: string[] = [];
  const final = stages.at(-1);
  if (!final) return ["the Dockerfile has no stage"];
  const at = (i: DockerInstruction) => `Dockerfile line ${i.line} (final stage)`;
  for (const i of final.instructions)
    if (/\b(tsx|typescript)\b/.test(i.args)) problems.push(`${at(i)}: ${i.op} ${i.args}: the final stage must not have tsx or typescript`);
  const installs = final.instructions.filter((i) => i.op === "RUN" && /\bnpm (ci|install)\b/.test(i.args));
  if (installs.length === 0) problems.push("the final stage installs no dependencies (npm ci --omit=dev)");
  for (const i of installs) if (!/\bnpm ci\b.*--omit=dev\b/.test(i.args)) problems.push(`${at(i)}: ${i.args}: production installs with npm ci --omit=dev`);
  const cmd = final.instructions.findLast((i) => i.op === "CMD");
  const argv = execForm(cmd);
  if (!argv) problems.push("the final stage's CMD is not in exec form (a JSON array)");
  const cmdFile = argv?.[1]?.startsWith("-") ? [] : (argv?.slice(1, 2) ?? []);
  for (const s of new Set([...cmdFile, ...scripts])) {
    const p = provenance(stages, final, s);
    if (!p) problems.push(`the final stage does not copy ${s} from the build stage`);
    else if (!p.built) problems.push(`Dockerfile line ${p.line}: ${s} is not built in the image: it would come from the build context`);
  }
  return problems;
}
