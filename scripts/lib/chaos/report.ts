/** The chaos run's printed report: the invariant table, then the figures. Pure. */

import { codeName } from "./co-client.js";
import { type Failover, type FaultFigures, journalKillFigures } from "./figures.js";
import type { ChaosResult } from "./run.js";
import { formatTable, ms } from "./table.js";
import { OP_KINDS } from "./workload.js";

const EXAMPLES = 3;
const byCount = (m: Map<string, number>) =>
  [...m.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(", ") || "none";

export function formatReport(r: ChaosResult): string {
  const o = r.options;
  const out: string[] = [];
  const runOps = r.ops.filter((x) => x.phase === "run");
  out.push(
    `chaos${o.hosts ? " --ha --hosts" : o.ha ? " --ha" : ""}: seed ${o.seed}, ${runOps.length} operations (concurrency ${o.concurrency}), ${o.hosts ? "3 hosts, a journal on each" : `${o.replicas} journal replicas`}, ${r.faults.length} faults, ${ms(r.durationMs)}`,
    "",
    formatTable(
      ["invariant", "violations"],
      r.invariants.map((i) => [i.name, i.violations.length]),
    ),
  );
  for (const i of r.invariants.filter((x) => x.violations.length > 0)) {
    out.push("", `${i.name}: ${i.violations.length} violation(s), e.g.`);
    for (const v of i.violations.slice(0, EXAMPLES)) out.push(`  - ${v.slice(0, 240)}`);
  }
  out.push(
    "",
    `gc after settle (as \`csictl gc --apply\`): ${r.leakedRemoved.length} leaked image(s) removed, each a create's leftover of a killed journal${r.leakedRemoved.length ? ` (${r.leakedRemoved.slice(0, 3).join(", ")}${r.leakedRemoved.length > 3 ? ", …" : ""})` : ""}`,
    "",
    formatTable(
      ["fault", "injected", "slowest recovery", "no op after", "another node took over (leader / master)"],
      r.faultFigures.map((f) => [f.kind, f.injected, ms(f.slowestMs), f.unrecovered, takeover(f)]),
    ),
    "",
    formatTable(
      ["operation", "done", "ok", "failed"],
      OP_KINDS.map((k) => {
        const mine = runOps.filter((x) => x.kind === k);
        return [k, mine.length, mine.filter((x) => x.ok).length, mine.filter((x) => !x.ok).length];
      }),
    ),
    "",
    `calls: ${r.stats.attempts} attempts, ${r.stats.retries} retries`,
    `CO-visible errors by code (every failed attempt): ${byCount(r.stats.attemptErrors)}`,
    `final errors by code (operations that failed): ${byCount(finalCodes(r))}`,
    `slowest operation (retries included): ${r.slowest ? `${r.slowest.kind}, ${ms(r.slowest.end - r.slowest.start)}` : "—"}`,
  );
  const alone = r.failovers.filter((x) => !x.during);
  const compound = r.failovers.filter((x) => x.during);
  const slowest = (xs: Failover[]) => ms(Math.max(...xs.map((x) => x.ms)));
  out.push(
    alone.length === 0
      ? "journal failover: no journal SIGKILL with ≥ 2 replicas up had creates around it"
      : `journal failover (SIGKILL with ≥ 2 replicas up; creates in flight or started within 1 s): ${alone.length} kills, slowest ${slowest(alone)}, over ${ms(o.failoverBoundMs)}: ${alone.filter((x) => x.ms > o.failoverBoundMs).length}`,
  );
  if (compound.length > 0)
    out.push(
      `  and ${compound.length} kills less than 1 s after another fault was restored (not held to the bound): slowest ${slowest(compound)} (${compound
        .map((x) => `${x.during?.kind} then kill: ${ms(x.ms)}`)
        .join(", ")})`,
    );
  const k = journalKillFigures(r.faults, r.failovers);
  out.push(
    `journal kills: ${k.kills}; the killed replica had a create in flight: ${k.withCreate}, another command: ${k.withOtherCommand}, nothing: ${k.idle}` +
      (k.measured > 0 ? `; failover of those with a create: ${k.measured} measured, slowest ${ms(k.slowestMs)}` : ""),
  );
  out.push("", r.ok ? "chaos: all invariants hold" : `chaos: ${r.invariants.filter((i) => i.violations.length > 0).length} invariant(s) violated`);
  return out.join("\n");
}

/** "4.1–8.9 s (median 6.0 s)", and for freezes how many froze the leader; "" for kinds without a take-over. */
function takeover(f: FaultFigures): string {
  const t = f.tookOverMs;
  const range = t.length === 0 ? "" : `${ms(t[0])}–${ms(t.at(-1))} (median ${ms(t[Math.floor((t.length - 1) / 2)])})`;
  if (f.kind === "nats-partition") return `froze the leader ${f.ledStream} times${range ? `; new leader while frozen after ${range}` : ""}`;
  return range;
}

function finalCodes(r: ChaosResult): Map<string, number> {
  const m = new Map<string, number>();
  for (const x of r.ops) {
    const code = x.code ?? codeName(undefined);
    if (!x.ok) m.set(code, (m.get(code) ?? 0) + 1);
  }
  return m;
}
