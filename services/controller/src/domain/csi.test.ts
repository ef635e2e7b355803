import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DriverError, MAX_PAGE_ENTRIES } from "@csi/contracts";
import { capacityOf, expansionOf, MAX_VOLUME_BYTES, maxEntriesOf } from "./csi.js";

const MiB = 1024 * 1024;
const code = (f: () => unknown) => {
  try {
    f();
    return "OK";
  } catch (e) {
    return (e as DriverError).code;
  }
};

describe("capacities", () => {
  test("create: no range is the default; int64-max required is OUT_OF_RANGE; negative is INVALID_ARGUMENT", () => {
    assert.equal(capacityOf(undefined).sizeBytes, 1024 * MiB);
    assert.equal(
      code(() => capacityOf({ required_bytes: "9223372036854775807", limit_bytes: "0" })),
      "OutOfRange",
    );
    assert.equal(
      code(() => capacityOf({ required_bytes: "-1", limit_bytes: "0" })),
      "InvalidArgument",
    );
    assert.deepEqual(capacityOf({ required_bytes: String(MiB), limit_bytes: "9223372036854775807" }), { sizeBytes: MiB, limitBytes: MAX_VOLUME_BYTES });
  });
  test("expand: never the create default; an empty range is INVALID_ARGUMENT; a limit alone grows nothing", () => {
    assert.equal(
      code(() => expansionOf(null)),
      "InvalidArgument",
    );
    assert.equal(
      code(() => expansionOf({ required_bytes: "0", limit_bytes: "0" })),
      "InvalidArgument",
    );
    assert.deepEqual(expansionOf({ required_bytes: "0", limit_bytes: String(8 * MiB) }), { sizeBytes: 0, limitBytes: 8 * MiB });
    assert.deepEqual(expansionOf({ required_bytes: String(MiB + 1), limit_bytes: "0" }), { sizeBytes: 2 * MiB, limitBytes: 0 });
    assert.equal(
      code(() => expansionOf({ required_bytes: "9223372036854775807", limit_bytes: "0" })),
      "OutOfRange",
    );
  });
  test("max_entries: negative refused, past the cap clamped", () => {
    assert.equal(
      code(() => maxEntriesOf(-1)),
      "InvalidArgument",
    );
    assert.equal(maxEntriesOf(2 ** 31 - 1), MAX_PAGE_ENTRIES);
    assert.equal(maxEntriesOf(0), 0);
  });
});
