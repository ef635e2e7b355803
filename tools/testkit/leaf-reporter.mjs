// A node:test reporter for each-alone.ts (plain JS: the test runner loads reporters before the
// tsx loader is in place): one JSON line per test that ran or was skipped, suites left out:
// {"name", "status": "pass" | "fail" | "skip"}.
export default async function* leafReporter(source) {
  for await (const ev of source) {
    if (ev.type !== "test:pass" && ev.type !== "test:fail") continue;
    const d = ev.data;
    if (d.details?.type === "suite") continue;
    const status = ev.type === "test:fail" ? "fail" : d.skip !== undefined && d.skip !== false ? "skip" : "pass";
    yield `${JSON.stringify({ name: d.name, status })}\n`;
  }
}
