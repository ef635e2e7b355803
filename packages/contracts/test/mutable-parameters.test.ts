import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "../src/errors.js";
import { JournalEvent } from "../src/events.js";
import { journalContract, VolumeCreate, VolumeView } from "../src/journal.js";
import {
  applyMutableParameters,
  inForce,
  limitsFromContext,
  limitsToContext,
  MutableParameters,
  parseMutableParameters,
  pickMutableParameters,
  sameMutableParameters,
} from "../src/mutable-parameters.js";
import { NodeQueueMessage } from "../src/nodes.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const meta = { v: 1, time: "2026-01-01T00:00:00.000Z", requestId: "r", actor: { service: "journal", replica: "h:1" } };

/** The InvalidArgument message parseMutableParameters throws for `map`. */
function refusal(map: Record<string, string>): string {
  try {
    parseMutableParameters(map);
  } catch (err) {
    assert.ok(err instanceof DriverError);
    assert.equal(err.code, "InvalidArgument");
    return err.message;
  }
  assert.fail(`expected ${JSON.stringify(map).slice(0, 100)} to be refused`);
}

describe("mutable parameters: the schema", () => {
  test("the csi-sanity set parses; values come out canonical", () => {
    assert.deepEqual(parseMutableParameters({ readBytesPerSecond: "1048576", writeIOPS: "100" }), { readBytesPerSecond: "1048576", writeIOPS: "100" });
    assert.deepEqual(parseMutableParameters({ readIOPS: "0100", writeBytesPerSecond: "0" }), { readIOPS: "100", writeBytesPerSecond: "0" });
    assert.deepEqual(parseMutableParameters({}), {});
  });

  test("bounds: 0 means no limit; otherwise bytes/s 4096…2^50, IOPS 1…10^9", () => {
    const good: Record<string, string>[] = [
      { readBytesPerSecond: "4096" },
      { writeBytesPerSecond: String(2 ** 50) },
      { readIOPS: "1" },
      { writeIOPS: "1000000000" },
      { readIOPS: "0" },
    ];
    for (const ok of good) {
      assert.doesNotThrow(() => parseMutableParameters(ok), JSON.stringify(ok));
    }
    assert.match(refusal({ readBytesPerSecond: "4095" }), /readBytesPerSecond must be 0 \(no limit\) or between 4096 and 1125899906842624/);
    assert.match(refusal({ writeBytesPerSecond: String(2 ** 50 + 1) }), /writeBytesPerSecond must be 0/);
    // 2^32 would wrap to 0 in the kernel's 32-bit IOPS field (= no limit): refused long before.
    assert.match(refusal({ writeIOPS: "4294967296" }), /writeIOPS must be 0 \(no limit\) or between 1 and 1000000000/);
  });

  test("only digits: no sign, unit, space, fraction, exponent or empty string", () => {
    for (const bad of ["-1", "+5", "1M", " 100", "1.5", "1e6", "", "0x10", "１００"]) {
      assert.match(refusal({ readIOPS: bad }), /readIOPS must be a non-negative decimal integer/, JSON.stringify(bad));
    }
  });

  test("unknown keys are refused, naming at most three, each cut short; values are never echoed", () => {
    assert.match(
      refusal({ XXX_FakeKey: "XXX_FakeValue" }),
      /unknown key "XXX_FakeKey"; the mutable parameters are readBytesPerSecond, writeBytesPerSecond, readIOPS, writeIOPS/,
    );
    assert.match(refusal({ readiops: "1" }), /unknown key "readiops"/, "keys are case-sensitive");
    const many = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`${"k".repeat(500)}${i}`, "v".repeat(1000)]));
    const msg = refusal(many);
    assert.match(msg, /and 47 more/);
    assert.ok(msg.length < 400, `message is bounded (${msg.length})`);
    assert.ok(!refusal({ readIOPS: "9".repeat(3000) }).includes("999999"), "a bad value is not quoted");
  });

  test("a refused map names the field it came from", () => {
    assert.throws(() => parseMutableParameters({ nope: "1" }, "parameters"), /^DriverError: parameters: unknown key/);
  });
});

describe("mutable parameters: modifications", () => {
  test("only the keys asked change, 0 removes a limit, the result is the limits in force", () => {
    const current = { readBytesPerSecond: "1048576", writeIOPS: "100" };
    assert.deepEqual(applyMutableParameters(current, { writeBytesPerSecond: "2097152" }), { ...current, writeBytesPerSecond: "2097152" });
    assert.deepEqual(applyMutableParameters(current, { writeIOPS: "0" }), { readBytesPerSecond: "1048576" });
    assert.deepEqual(applyMutableParameters(current, {}), current);
    assert.deepEqual(inForce({ readIOPS: "0", writeIOPS: "5" }), { writeIOPS: "5" });
  });

  test("sameness ignores zeros and key order", () => {
    assert.ok(sameMutableParameters({ readIOPS: "5", writeIOPS: "0" }, { readIOPS: "5" }));
    assert.ok(sameMutableParameters({ writeIOPS: "1", readIOPS: "5" }, { readIOPS: "5", writeIOPS: "1" }));
    assert.ok(!sameMutableParameters({ readIOPS: "5" }, { readIOPS: "6" }));
    assert.ok(!sameMutableParameters({ readIOPS: "5" }, {}));
  });

  test("pick splits our keys from the rest, unvalidated", () => {
    assert.deepEqual(pickMutableParameters({ readIOPS: "x", pool: "fast", other: "1" }), { picked: { readIOPS: "x" }, rest: { pool: "fast", other: "1" } });
  });
});

describe("mutable parameters: the publish context", () => {
  test("round trip: limits in force plus the sequence", () => {
    const ctx = { imageName: "csi-vol-x", ...limitsToContext({ readIOPS: "5", writeIOPS: "0" }, 42) };
    assert.deepEqual(ctx, { imageName: "csi-vol-x", readIOPS: "5", ioLimitsSeq: "42" });
    assert.deepEqual(limitsFromContext(ctx), { limits: { readIOPS: "5" }, seq: 42 });
    assert.deepEqual(limitsFromContext(limitsToContext({}, 7)), { limits: {}, seq: 7 });
  });

  test("a context without the sequence carries no limits (an older journal); a malformed one is refused", () => {
    assert.equal(limitsFromContext({ imageName: "x", readIOPS: "5" }), undefined);
    assert.throws(() => limitsFromContext({ ioLimitsSeq: "-1" }), /ioLimitsSeq must be a decimal sequence number/);
    assert.throws(() => limitsFromContext({ ioLimitsSeq: "3", readIOPS: "lots" }), /publish_context: readIOPS must be a non-negative decimal integer/);
  });
});

describe("mutable parameters in the contracts", () => {
  test("VolumeModified carries the whole resulting set; VolumeReserved may carry the set at creation", () => {
    const modified = JournalEvent.parse({ ...meta, type: "VolumeModified", uuid: UUID, mutableParameters: { writeIOPS: "100" } });
    assert.equal(modified.type, "VolumeModified");
    assert.equal(JournalEvent.safeParse({ ...meta, type: "VolumeModified", uuid: UUID, mutableParameters: { bogus: "1" } }).success, false);
    const reserved = {
      ...meta,
      type: "VolumeReserved",
      uuid: UUID,
      name: "pvc",
      instance: "default",
      pool: "default",
      poolId: 1,
      imageName: `csi-vol-${UUID}`,
      sizeBytes: 1 << 20,
      digest: "d",
      parameters: {},
      capabilities: [],
    };
    assert.ok(JournalEvent.safeParse(reserved).success, "an event written before mutable parameters existed still parses");
    assert.ok(JournalEvent.safeParse({ ...reserved, mutableParameters: { readIOPS: "5" } }).success);
  });

  test("volume.create may omit limits, VolumeView defaults to none; volume.modify is a command", () => {
    const create = VolumeCreate.parse({
      requestId: "r",
      name: "pvc",
      sizeBytes: 1024 * 1024,
      capabilities: [{ accessType: "block", accessMode: "SINGLE_NODE_WRITER" }],
    });
    assert.equal(create.mutableParameters, undefined);
    const view = VolumeView.parse({
      uuid: UUID,
      name: "pvc",
      pool: "p",
      poolId: 1,
      imageName: "i",
      imageId: "x",
      sizeBytes: 1,
      parameters: {},
      capabilities: [],
      createdAt: "",
      claims: [],
    });
    assert.deepEqual(view.mutableParameters, {}, "a reply of an older journal parses");
    const req = journalContract["volume.modify"].request.safeParse({ requestId: "r", uuid: UUID, mutableParameters: { readIOPS: "007" } });
    assert.ok(req.success);
    assert.deepEqual(req.data.mutableParameters, { readIOPS: "7" });
    assert.equal(
      journalContract["volume.modify"].request.safeParse({ requestId: "r", uuid: UUID, mutableParameters: { readIOPS: "1", x: "1" } }).success,
      false,
    );
  });

  test("the node work queue carries stage/publish work and limits work", () => {
    const limits = NodeQueueMessage.parse({ id: "w1", nodeId: "n1", op: "limits", volumeId: "0001-x", mutableParameters: { readIOPS: "5" }, seq: 9 });
    assert.equal(limits.op, "limits");
    const stage = NodeQueueMessage.parse({
      id: "w2",
      nodeId: "n1",
      op: "stage",
      volumeId: "v",
      stagingPath: "/s",
      capability: { accessType: "block", accessMode: "SINGLE_NODE_WRITER" },
    });
    assert.equal(stage.op, "stage");
    assert.equal(NodeQueueMessage.safeParse({ id: "w3", op: "limits", volumeId: "v", mutableParameters: {} }).success, false, "limits work needs its sequence");
    assert.equal(NodeQueueMessage.safeParse({ id: "w4", op: "resize", volumeId: "v" }).success, false);
    assert.equal(
      NodeQueueMessage.safeParse({ id: "w5", op: "unstage", volumeId: "v", stagingPath: "/s", capability: stage.capability }).success,
      false,
      "work names its node",
    );
  });

  test("MutableParameters refuses unknown keys on its own too (events, commands)", () => {
    assert.equal(MutableParameters.safeParse({ readIOPS: "1", extra: "1" }).success, false);
  });
});
