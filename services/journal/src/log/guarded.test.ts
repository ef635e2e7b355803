/**
 * The guarded event log (log/guarded.ts) on the in-memory log, and the Redis link's reconnect
 * delays (projection/redis/link.ts): what marks the log down, what fails fast while it is, what brings
 * it back, and that a caller's own failure during a read says nothing of the log.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError, subjects } from "@csi/contracts";
import { createLogger } from "@csi/runtime";
import { REDIS_RECONNECT_CAP_MS, REDIS_RECONNECT_JITTER_MS, reconnectDelayMs } from "../projection/redis/link.js";
import { guardedLog, LogReachability } from "./guarded.js";
import { MemoryLog } from "./memory.js";
import { AppendError, AppendRefused, AppendUncertain, isUnreachable, SequenceConflict } from "./port.js";

const logger = createLogger("guarded-log-test", "silent");

describe("isUnreachable", () => {
  test("no answer is unreachable; a refusal, a fence or another error is not", () => {
    assert.equal(isUnreachable(new AppendUncertain()), true);
    assert.equal(isUnreachable(new DriverError("Unavailable", "event log unavailable")), true);
    assert.equal(isUnreachable(new AppendError([], new AppendUncertain())), true);
    assert.equal(isUnreachable(new AppendRefused("maximum messages exceeded")), false);
    assert.equal(isUnreachable(new AppendError([], new AppendRefused("sealed"))), false);
    assert.equal(isUnreachable(new SequenceConflict("csi.x")), false);
    assert.equal(isUnreachable(new DriverError("NotFound", "x")), false);
    assert.equal(isUnreachable(new Error("boom")), false);
  });
});

describe("guardedLog", () => {
  /** A log whose reads can be made to fail for want of an answer, and a probe that answers when told. */
  function setup() {
    const inner = new MemoryLog({ cluster: "g1" });
    const state = { unreachable: false, probes: 0 };
    const real = inner.info.bind(inner);
    inner.info = async () => {
      if (state.unreachable) throw new DriverError("Unavailable", "event log unavailable", { cause: new Error("TIMEOUT") });
      return real();
    };
    let answered: () => void = () => {};
    const probeAnswered = () => new Promise<void>((r) => (answered = r));
    const reach = new LogReachability(async () => {
      state.probes++;
      if (state.unreachable) throw new DriverError("Unavailable", "event log unavailable", { cause: new Error("no responders") });
      answered();
    }, logger);
    return { log: guardedLog(inner, reach), reach, state, probeAnswered };
  }

  test("a call that gets no answer marks the log down: the next fails at once, naming why; a probe that answers brings it back", async () => {
    const { log, reach, state, probeAnswered } = setup();
    assert.equal((await log.info()).last, 0);
    state.unreachable = true;
    await assert.rejects(log.info(), /event log unavailable/);
    assert.match(reach.down() ?? "", /event log unavailable/);
    await assert.rejects(
      log.lastSeqOf("csi.g1.evt.vol.x"),
      (e: DriverError) => e.code === "Unavailable" && /^event log unavailable: (TIMEOUT|no responders)$/.test(e.message),
      "the reason said once, not event log unavailable: event log unavailable: …",
    );
    const back = probeAnswered();
    state.unreachable = false;
    await back;
    await new Promise(setImmediate); // the probe's caller goes on after the probe's answer
    assert.equal(reach.down(), undefined);
    assert.equal((await log.info()).last, 0);
    reach.stop();
  });

  test("a read asked before the log went down and still unanswered is asked again once the log answers", { timeout: 20_000 }, async () => {
    const { log, reach, state, probeAnswered } = setup();
    let asks = 0;
    const hanging = new MemoryLog({ cluster: "g2" });
    const real = hanging.lastSeqOf.bind(hanging);
    // The first ask goes to a stream leader that died with it: no answer, ever (its timeout is far away).
    hanging.lastSeqOf = (subject) => (++asks === 1 ? new Promise<number>(() => {}) : real(subject));
    const guarded = guardedLog(hanging, reach);
    const read = guarded.lastSeqOf("csi.g2.evt.vol.x");
    state.unreachable = true;
    await assert.rejects(log.info(), /event log unavailable/); // another call finds the log down
    const back = probeAnswered();
    state.unreachable = false;
    await back;
    assert.equal(await read, 0, "answered by the second ask");
    assert.equal(asks, 2);
    reach.stop();
  });

  test("a read unanswered for READ_SUSPECT_MS, the log not known down, has it probed: no answer marks it down, and the read is asked again when it answers", {
    timeout: 20_000,
  }, async () => {
    const { reach, state, probeAnswered } = setup();
    let asks = 0;
    const hanging = new MemoryLog({ cluster: "g3" });
    const real = hanging.lastSeqOf.bind(hanging);
    // Asked of a stream whose leader just died, by a journal whose connection was elsewhere: nothing marks the log down.
    hanging.lastSeqOf = (subject) => (++asks === 1 ? new Promise<number>(() => {}) : real(subject));
    state.unreachable = true;
    const read = guardedLog(hanging, reach).lastSeqOf("csi.g3.evt.vol.x");
    const back = probeAnswered();
    // The suspicion's probe finds no answer: the log is down, the probe loop runs.
    while (reach.down() === undefined) await new Promise((r) => setTimeout(r, 20));
    assert.equal(asks, 1, "not asked again while the log is down");
    state.unreachable = false;
    await back;
    assert.equal(await read, 0, "answered by the second ask");
    assert.equal(asks, 2);
    reach.stop();
  });

  test("a read merely slow, the log answering, is asked once more when the suspicion's probe answers", { timeout: 20_000 }, async () => {
    const { reach } = setup();
    let asks = 0;
    const slow = new MemoryLog({ cluster: "g4" });
    const real = slow.lastSeqOf.bind(slow);
    slow.lastSeqOf = (subject) => (++asks === 1 ? new Promise<number>(() => {}) : real(subject));
    assert.equal(await guardedLog(slow, reach).lastSeqOf("csi.g4.evt.vol.x"), 0);
    assert.equal(asks, 2);
    assert.equal(reach.down(), undefined, "a probe that answered marks nothing down");
    reach.stop();
  });

  test("what a read's own batch handler throws does not mark the log down", async () => {
    const { log, reach } = setup();
    const body = { type: "NameReserved" as const, kind: "volume" as const, name: "n", uuid: "00000000-0000-4000-8000-000000000001" };
    await log.append(
      { subject: subjects.nameEvents("g1", "vol", "default", "n"), body },
      {
        requestId: "r",
        actor: { service: "journal", replica: "t" },
        time: new Date(0).toISOString(),
      },
    );
    const redisDown = new DriverError("Unavailable", "redis unavailable");
    await assert.rejects(
      log.read(1, async () => {
        throw redisDown;
      }),
      (e) => e === redisDown,
    );
    assert.equal(reach.down(), undefined);
  });

  test("readiness: a probe that fails marks the log down and says why", async () => {
    const { reach, state } = setup();
    assert.equal(await reach.check(), true);
    state.unreachable = true;
    assert.match(String(await reach.check()), /^event log unreachable: event log unavailable: no responders/);
    assert.ok(reach.down());
    reach.stop();
  });
});

describe("the journal's Redis reconnect delays", () => {
  test("25 ms doubling, capped at REDIS_RECONNECT_CAP_MS, plus jitter below REDIS_RECONNECT_JITTER_MS", () => {
    assert.equal(reconnectDelayMs(1, 0), 25);
    assert.equal(reconnectDelayMs(2, 0), 50);
    assert.equal(reconnectDelayMs(3, 0), REDIS_RECONNECT_CAP_MS);
    assert.equal(reconnectDelayMs(4, 0), REDIS_RECONNECT_CAP_MS);
    assert.equal(reconnectDelayMs(1000, 0), REDIS_RECONNECT_CAP_MS);
    assert.equal(reconnectDelayMs(1000, 0.999), REDIS_RECONNECT_CAP_MS + REDIS_RECONNECT_JITTER_MS - 1);
  });
});
