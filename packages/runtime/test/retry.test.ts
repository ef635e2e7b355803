import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { retry } from "../src/retry.js";

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
  it("waits 100 ms then 200 ms by default, and throws the last failure", async () => {
    const at: number[] = [];
    const t0 = Date.now();
    await assert.rejects(
      retry(async (n) => {
        at.push(Date.now() - t0);
        throw new Error(`attempt ${n}`);
      }),
      /attempt 3/,
    );
    assert.equal(at.length, 3);
    const [a = 0, b = 0, c = 0] = at;
    assert.ok(b - a >= 95 && b - a < 180, `first delay ${b - a} ms`);
    assert.ok(c - b >= 195 && c - b < 350, `second delay ${c - b} ms`);
  });

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

  it("stops once the deadline has passed", async () => {
    const f = failing("late");
    await assert.rejects(retry(f.attempt, { tries: 100, firstDelayMs: 20, deadline: Date.now() + 50 }), /late/);
    assert.ok(f.calls >= 2 && f.calls <= 4, `${f.calls} attempts before a 50 ms deadline`);
  });

  it("caps the delay at maxDelayMs", async () => {
    const t0 = Date.now();
    const f = failing("x");
    await assert.rejects(retry(f.attempt, { tries: 5, firstDelayMs: 10, maxDelayMs: 20 }));
    assert.equal(f.calls, 5);
    const ms = Date.now() - t0;
    assert.ok(ms >= 65 && ms < 300, `4 waits of at most 20 ms took ${ms} ms`);
  });
});
