/**
 * What one run of test/ha.test.ts's stream-leader kill says (scripts/loop-leader-kill.ts): passed or
 * not, the extra objects it found (ids listed that the CO was never told of), and the failure
 * window it measured. Pure: the run's output in, a summary out.
 */

export interface LeaderKillRun {
  passed: boolean;
  /** Volumes and snapshots listed that the CO was never told of (the test names at most 5 of each). */
  extra: { volumes: string[]; snapshots: string[] };
  /** The case's longest failure window (ms), if the run printed its figures. */
  windowMs?: number;
  /** From the kill to the new stream leader's election (JetStream's LEADER_ELECTED advisory), ms. */
  electedMs?: number;
  /** From that election to the first call that succeeded after it, ms: what we add to the engine. */
  firstOkMs?: number;
  /** The first failure's message line, if it failed. */
  failure?: string;
}

/** The ids of a "…the CO was not told of:" message: the lines after it, `<id>: <history>`. */
function extraIds(out: string, kind: "volumes" | "snapshots"): string[] {
  const lines = out.split("\n");
  const ids = new Set<string>();
  lines.forEach((line, i) => {
    if (!line.includes(`${kind} the CO was not told of:`)) return;
    for (const next of lines.slice(i + 1, i + 6)) {
      const m = /^\s*([0-9A-Za-z][0-9A-Za-z-]{20,}): [{"[]/.exec(next);
      if (m?.[1]) ids.add(m[1]);
    }
  });
  return [...ids];
}

export function summariseLeaderKill(out: string, exitCode: number | null): LeaderKillRun {
  const row = out.split("\n").find((l) => /NATS stream leader kill\s+longest failure window/.test(l)) ?? "";
  const window = /longest failure window\s+(\d+) ms/.exec(row);
  const elected = /new leader elected (\d+) ms after the kill/.exec(row);
  const firstOk = /first success (\d+) ms after it/.exec(row);
  const failure = out
    .split("\n")
    .find((l) => /^\s*(AssertionError|Error)\b/.test(l))
    ?.trim();
  const passed = exitCode === 0 && /^ℹ fail 0$/m.test(out);
  return {
    passed,
    extra: { volumes: extraIds(out, "volumes"), snapshots: extraIds(out, "snapshots") },
    ...(window?.[1] ? { windowMs: Number(window[1]) } : {}),
    ...(elected?.[1] ? { electedMs: Number(elected[1]) } : {}),
    ...(firstOk?.[1] ? { firstOkMs: Number(firstOk[1]) } : {}),
    ...(!passed && failure ? { failure: failure.slice(0, 300) } : {}),
  };
}
