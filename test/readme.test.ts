/**
 * The README is for users (docs/history.md keeps the history of the work): at most 250 lines, no
 * issue numbers, the one command that starts the system and the one that runs the tests near the
 * top (the latter exactly what CI runs), its figures from one dated run, every link resolving.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

const ROOT = path.resolve(import.meta.dirname, "..");
const readme = readFileSync(path.join(ROOT, "README.md"), "utf8");

test("README: short, no issue numbers, npm start and npm test near the top, npm test as .ci/run runs it", () => {
  const lines = readme.split("\n");
  assert.ok(lines.length <= 250, `${lines.length} lines`);
  assert.doesNotMatch(readme, /\bissues? \d+|#\d+\b/i);
  const top = lines.slice(0, 20).join("\n");
  assert.match(top, /^npm start\b/m);
  assert.match(top, /^npm test\b/m);
  assert.match(readFileSync(path.join(ROOT, ".ci/run"), "utf8"), /^npm test$/m);
});

test("README: its figures name their run's date and machine, and every link resolves", () => {
  const dates = new Set(readme.match(/\b20\d\d-\d\d-\d\d\b(?!T)/g) ?? []);
  assert.equal(dates.size, 1, `one dated run: ${[...dates].join(", ")}`);
  assert.match(readme, /2 vCPUs/);
  for (const [, link] of readme.matchAll(/\]\(([^)#]+)(?:#[^)]*)?\)/g))
    if (!/^https?:/.test(link as string)) assert.ok(existsSync(path.join(ROOT, link as string)), `${link} exists`);
});
