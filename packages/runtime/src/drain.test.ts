import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { pino } from "pino";
import { type Drainable, drainAll, InFlight, settlesWithin } from "./drain.js";

const quiet = pino({ level: "silent" });

/** A deferred promise: a piece of work the test ends when it wants. */
function deferred() {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A Drainable over an InFlight: `drain` stops taking (recorded) and waits for the tasks. */
function part(what: string) {
  const tasks = new InFlight();
  const events: string[] = [];
  const d: Drainable = {
    what,
    inFlight: () => tasks.size,
    drain: async () => {
      events.push("stopped taking");
      await tasks.idle();
    },
    force: () => events.push("forced"),
  };
  return { d, tasks, events };
}

describe("InFlight", () => {
  it("given tasks running, when they settle (one by rejecting), then idle resolves only after the last", async () => {
    const f = new InFlight();
    const a = deferred();
    const b = deferred();
    void f.run(() => a.promise);
    const failing = f.run(() => b.promise.then(() => Promise.reject(new Error("x"))));
    assert.equal(f.size, 2);
    let idle = false;
    const waiting = f.idle().then(() => {
      idle = true;
    });
    a.resolve();
    await a.promise;
    await new Promise((r) => setImmediate(r));
    assert.equal(idle, false, "one task still runs");
    b.resolve();
    await assert.rejects(failing, /x/);
    await waiting;
    assert.equal(f.size, 0);
  });

  it("given nothing running, when idle is asked, then it resolves at once; a task that throws synchronously is counted out", async () => {
    const f = new InFlight();
    await f.idle();
    await assert.rejects(
      f.run(() => {
        throw new Error("sync");
      }),
      /sync/,
    );
    assert.equal(f.size, 0);
  });
});

describe("settlesWithin", () => {
  it("given a promise that settles (or rejects) in time, then true; one that does not, then false", async () => {
    assert.equal(await settlesWithin(Promise.resolve(1), 1000), true);
    assert.equal(await settlesWithin(Promise.reject(new Error("no")), 1000), true);
    assert.equal(await settlesWithin(new Promise(() => {}), 20), false);
  });
});

describe("drainAll", () => {
  it("given work in flight that finishes within the grace period, then every part stops taking, nothing is forced, and the report says what was waited for", async () => {
    const grpc = part("gRPC calls");
    const nats = part("journal commands");
    const call = deferred();
    void grpc.tasks.run(() => call.promise);
    void nats.tasks.run(async () => {});
    const draining = drainAll(quiet, 10_000, [grpc.d, nats.d]);
    assert.deepEqual(grpc.events, ["stopped taking"], "a part stops taking at once");
    call.resolve();
    const report = await draining;
    assert.deepEqual(report.waitedFor, { "gRPC calls": 1, "journal commands": 1 });
    assert.deepEqual(report.cut, {});
    assert.deepEqual(grpc.events, ["stopped taking"], "not forced");
  });

  it("given work that outlives the grace period, then the parts still running are forced and reported cut, the others not", async () => {
    const stuck = part("node work");
    const quick = part("gRPC calls");
    void stuck.tasks.run(() => new Promise(() => {}));
    const report = await drainAll(quiet, 50, [stuck.d, quick.d]);
    assert.deepEqual(report.cut, { "node work": 1 });
    assert.deepEqual(stuck.events, ["stopped taking", "forced"]);
    assert.deepEqual(quick.events, ["stopped taking"]);
  });
});
