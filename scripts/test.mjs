#!/usr/bin/env node
// The test command: every *.test.ts under packages/, services/, tools/ and test/, run by node's own
// test runner from the sources: tsx's loader and the workspaces' "source" export condition
// (docs/building.md). First it brings dist/ up to date (`npm run build`, incremental: seconds when
// nothing changed) and has the services, npm start's services and csictl that the tests spawn run
// the built JavaScript (CSI_RUN_BUILT=1): tsx costs each of those hundreds of processes ~0.4 s of
// CPU. If the build fails, everything runs from the sources, as before. Pass file paths or name
// filters to run fewer:
//   npm test -- journal        (files whose path contains "journal")
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import path from "node:path";

const roots = ["packages", "services", "tools", "test"];
const files = [];
const walk = (dir) => {
  for (const e of readdirSync(dir)) {
    if (e === "node_modules" || e === "dist" || e.startsWith(".")) continue;
    const p = path.join(dir, e);
    if (statSync(p).isDirectory()) walk(p);
    else if (p.endsWith(".test.ts")) files.push(p);
  }
};
for (const r of roots) walk(r);
const filters = process.argv.slice(2);
const chosen = files.sort().filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (chosen.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}
const build = spawnSync("npm", ["run", "build", "--silent"], { stdio: ["ignore", "inherit", "inherit"] });
const env = { ...process.env };
if (build.status === 0) env.CSI_RUN_BUILT = "1";
else {
  delete env.CSI_RUN_BUILT;
  console.error("npm test: `npm run build` failed (above); the spawned services run from the sources instead");
}
// Files named *.alone.test.ts need the machine to themselves (a replicated NATS cluster on the
// power-cut harness forms only within the engine's timeouts when nothing else competes for the two
// cores): they run after the others, one at a time.
const alone = chosen.filter((f) => f.endsWith(".alone.test.ts"));
const together = chosen.filter((f) => !alone.includes(f));
const runFiles = (files, concurrency) =>
  files.length === 0
    ? 0
    : (spawnSync(
        process.execPath,
        ["--conditions=source", "--import", "tsx", "--test", "--test-reporter=spec", `--test-concurrency=${concurrency}`, ...files],
        { stdio: "inherit", env },
      ).status ?? 1);
const first = runFiles(together, process.env.TEST_CONCURRENCY ?? 2);
const second = runFiles(alone, 1);
process.exit(first || second);
