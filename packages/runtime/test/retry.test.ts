import assert from "node:assert/strict";
import { syncBuiltinESMExports } from "node:module";
import { describe, it, type TestContext } from "node:test";
import timers from "node:timers/promises";
import { retry } from "../src/retry.js";

/**
 * A fake clock for `retry`: its waits (timers/promises' setTimeout) are recorded and pass at once,
 * moving Date.now() on by as much. So the schedule is asserted exactly, however busy the machine.
 */
async function withFakeClock<T>(t: TestContext, body: (clock: { waits: number[]; elapsed(): number }) => Promise<T>): Promise<T> {
  const start = 1_000_000;
  let now = start;
  const waits: number[] = [];
  t.mock.method(Date, "now", () => now);
  t.mock.method(timers, "setTimeout", async (ms: number) => {
    waits.push(ms);
    now += ms;
  });
  syncBuiltinESMExports(); // retry.ts's named import of setTimeout now sees the fake
  try {
    return await body({ waits, elapsed: () => now - start });
  } finally {
    t.mock.restoreAll();
    syncBuiltinESMExports();
  }
}

/** An attempt that always fails with `what`, counting its calls. */
function failing(what: string) {
  const c = {
    calls: 0,
    attempt: () => {
      c.calls++;
      return Promise.reject(new Error(what));
    },
  };
  return c;
}

describe("retry", () => {
  it("waits 100 ms then 200 ms by default, and throws the last failure", (t) =>
    withFakeClock(t, async (clock) => {
      const at: number[] = [];
      await assert.rejects(
        retry(async (n) => {
          at.push(clock.elapsed());
          throw new Error(`attempt ${n}`);
        }),
        /attempt 3/,
      );
      assert.deepEqual(clock.waits, [100, 200]);
      assert.deepEqual(at, [0, 100, 300], "each attempt after its wait");
    }));

  it("returns as soon as an attempt succeeds", async () => {
    let calls = 0;
    const v = await retry(async () => (++calls < 2 ? Promise.reject(new Error("not yet")) : "ok"), { firstDelayMs: 1 });
    assert.equal(v, "ok");
    assert.equal(calls, 2);
  });

  it("fails at once on a failure retryIf refuses", async () => {
    const f = failing("permanent");
    await assert.rejects(retry(f.attempt, { retryIf: (err) => (err as Error).message !== "permanent" }), /permanent/);
    assert.equal(f.calls, 1);
  });

  it("stops once the deadline has passed", (t) =>
    withFakeClock(t, async (clock) => {
      const f = failing("late");
      await assert.rejects(retry(f.attempt, { tries: 100, firstDelayMs: 20, deadline: Date.now() + 50 }), /late/);
      // Attempts at 0 and 20 ms (before the deadline: a wait each), then at 60 ms: past it, the last.
      assert.deepEqual(clock.waits, [20, 40]);
      assert.equal(f.calls, 3, `${f.calls} attempts before a 50 ms deadline`);
    }));

  it("caps the delay at maxDelayMs", (t) =>
    withFakeClock(t, async (clock) => {
      const f = failing("x");
      await assert.rejects(retry(f.attempt, { tries: 5, firstDelayMs: 10, maxDelayMs: 20 }));
      assert.equal(f.calls, 5);
      assert.deepEqual(clock.waits, [10, 20, 20, 20]);
    }));
});
