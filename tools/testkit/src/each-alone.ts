/**
 * Runs every test of the given files alone, one node process per test name
 * (`--test-name-pattern="^<name>$"`; the file's `before`/`after` hooks run as usual), and says
 * which ones fail that way: a test that passes only after others depends on them.
 *
 *   node --conditions=source --import tsx tools/testkit/src/each-alone.ts test/journal.test.ts test/controller.test.ts
 *
 * Tests of the same name (the ext4 and xfs lifecycles) run together.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { SOURCE_NODE_ARGS } from "./processes.js";

const reporter = path.join(import.meta.dirname, "../leaf-reporter.mjs");
const regexpEscape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

function run(file: string, extra: string[]) {
  const r = spawnSync(process.execPath, [...SOURCE_NODE_ARGS, "--test", `--test-reporter=${reporter}`, ...extra, file], {
    encoding: "utf8",
    maxBuffer: 1 << 26,
    timeout: 600_000,
  });
  const rows = r.stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as { name: string; status: "pass" | "fail" | "skip" });
  return { status: r.status, rows, stderr: r.stderr };
}

let total = 0;
let failed = 0;
for (const file of process.argv.slice(2)) {
  const all = run(file, []);
  const names = [...new Set(all.rows.map((r) => r.name))];
  console.log(`# ${file}: ${names.length} test names; whole file: exit ${all.status}, ${all.rows.filter((r) => r.status === "fail").length} failed`);
  for (const name of names) {
    total++;
    const started = Date.now();
    const r = run(file, [`--test-name-pattern=^${regexpEscape(name)}$`]);
    const mine = r.rows.filter((x) => x.name === name && x.status !== "skip");
    const ok = r.status === 0 && mine.length > 0 && mine.every((x) => x.status === "pass");
    if (!ok) failed++;
    console.log(`${ok ? "ok  " : "FAIL"} ${((Date.now() - started) / 1000).toFixed(1)}s ${JSON.stringify(name)} (ran ${mine.length}, exit ${r.status})`);
    if (!ok) console.log(r.stderr.split("\n").slice(-20).join("\n"));
  }
}
console.log(`# ${total} test names run alone, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
