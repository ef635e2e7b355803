/** The options of `npm run chaos` (and of the short run in test/chaos.test.ts). Pure. */
import { parseArgs } from "node:util";

export interface ChaosOptions {
  /** Operations to run (at least; the run goes on until every fault has been injected). */
  ops: number;
  /** Faults of every kind to inject. */
  faultsPerKind: number;
  seed: number;
  /** Operations in flight at once. */
  concurrency: number;
  /** Journal replicas (one queue group). */
  replicas: number;
  /**
   * The replicated stack (`--ha`): 3 NATS nodes with the streams at 3 replicas, a Redis primary and
   * replica behind 3 Sentinels, and the HA fault kinds (faults.ts, KINDS_BY_MODE).
   */
  ha: boolean;
  /**
   * `--hosts` (with or implying `--ha`): the replicated stack on three hosts made of network
   * namespaces (scripts/lib/hosts/), one journal and one node-agent on each, and partitions between
   * them as the faults (partitions.ts). Needs root; `--replicas` does not apply (one journal per host).
   */
  hosts?: boolean | undefined;
  /**
   * `--power-cut`: the stack's data on the power-cut harness (power-cut.ts), and power cuts as the
   * only fault (`faultsPerKind` of them), each checked once the stack is up again (after-cut.ts).
   */
  powerCut: boolean;
  /** After a journal SIGKILL with ≥ 2 replicas up, in-flight and new creates must succeed within this (issue 10: 2 s). */
  failoverBoundMs: number;
  /** Write every service log line here (kept after the run). */
  logFile?: string | undefined;
  /** Write the whole result here as JSON (every violation, fault and operation). */
  jsonFile?: string | undefined;
}

export const DEFAULTS: ChaosOptions = {
  ops: 2000,
  faultsPerKind: 20,
  seed: 1,
  concurrency: 6,
  replicas: 3,
  ha: false,
  hosts: false,
  powerCut: false,
  failoverBoundMs: 2000,
};

const USAGE =
  "usage: npm run chaos -- [--ops N] [--faults-per-kind N] [--seed N] [--concurrency N] [--replicas N] [--ha] [--hosts] [--power-cut] [--failover-bound-ms N] [--log FILE] [--json FILE]";

export function parseChaosArgs(argv: string[], seedDefault = DEFAULTS.seed): ChaosOptions {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      ops: { type: "string" },
      "faults-per-kind": { type: "string" },
      seed: { type: "string" },
      concurrency: { type: "string" },
      replicas: { type: "string" },
      ha: { type: "boolean" },
      hosts: { type: "boolean" },
      "power-cut": { type: "boolean" },
      "failover-bound-ms": { type: "string" },
      log: { type: "string" },
      json: { type: "string" },
      help: { type: "boolean" },
    },
  });
  if (values.help) throw new UsageError(USAGE);
  if (values.hosts && values["power-cut"])
    throw new UsageError(`--hosts and --power-cut do not go together (the power-cut harness holds one data directory)\n${USAGE}`);
  const int = (name: string, v: string | undefined, dflt: number, min: number) => {
    if (v === undefined) return dflt;
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got ${JSON.stringify(v.slice(0, 20))}\n${USAGE}`);
    return n;
  };
  return {
    ops: int("ops", values.ops, DEFAULTS.ops, 1),
    faultsPerKind: int("faults-per-kind", values["faults-per-kind"], DEFAULTS.faultsPerKind, 0),
    seed: int("seed", values.seed, seedDefault, 0),
    concurrency: int("concurrency", values.concurrency, DEFAULTS.concurrency, 1),
    replicas: int("replicas", values.replicas, DEFAULTS.replicas, 1),
    ha: values.ha === true || values.hosts === true,
    hosts: values.hosts === true,
    powerCut: values["power-cut"] === true,
    failoverBoundMs: int("failover-bound-ms", values["failover-bound-ms"], DEFAULTS.failoverBoundMs, 1),
    logFile: values.log,
    jsonFile: values.json,
  };
}

/** The arguments that repeat a run (the seed, and every option that changes what it does). Pure. */
export function repeatArgs(o: ChaosOptions): string[] {
  return [
    ...["--seed", String(o.seed), "--ops", String(o.ops), "--faults-per-kind", String(o.faultsPerKind)],
    ...["--concurrency", String(o.concurrency), "--replicas", String(o.replicas), "--failover-bound-ms", String(o.failoverBoundMs)],
    ...(o.ha ? ["--ha"] : []),
    ...(o.hosts ? ["--hosts"] : []),
    ...(o.powerCut ? ["--power-cut"] : []),
  ];
}

export class UsageError extends Error {}
