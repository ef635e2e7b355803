#!/usr/bin/env node
// The test command: every *.test.ts under packages/, services/, tools/ and test/, run by node's own
// test runner from the sources, with no build step: tsx's loader and the workspaces' "source"
// export condition (docs/building.md). Pass file paths or name filters to run fewer:
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
const res = spawnSync(
  process.execPath,
  ["--conditions=source", "--import", "tsx", "--test", "--test-reporter=spec", `--test-concurrency=${process.env.TEST_CONCURRENCY ?? 2}`, ...chosen],
  { stdio: "inherit" },
);
process.exit(res.status ?? 1);
