import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError, GiB, MiB } from "@csi/contracts";
import type { CapacityRangeMsg } from "@csi/runtime";
import { capacityAnswer, createSize, expandedSize, expandSize, MAX_VOLUME_BYTES, type SizeAsk } from "./sizes.js";

const INT64_MAX = "9223372036854775807";
const range = (required: number | string, limit: number | string = 0): CapacityRangeMsg => ({ required_bytes: String(required), limit_bytes: String(limit) });

/** The answer, or the DriverError code it throws. */
const outcome = <T>(f: () => T): T | string => {
  try {
    return f();
  } catch (e) {
    if (e instanceof DriverError) return e.code;
    throw e;
  }
};

/** One test per row: `f(input)` answers `want`, or throws the DriverError code `want`. */
const rows = <I, O>(cases: [string, I, O | string][], f: (input: I) => O) => {
  for (const [name, input, want] of cases)
    test(name, () =>
      assert.deepEqual(
        outcome(() => f(input)),
        want,
      ),
    );
};

describe("createSize: CreateVolume's capacity_range → the size the journal makes", () => {
  const cases: [string, CapacityRangeMsg | null | undefined, SizeAsk | string][] = [
    ["no range: the default, 1 GiB", undefined, { sizeBytes: GiB, limitBytes: 0 }],
    ["both fields 0: the default", range(0, 0), { sizeBytes: GiB, limitBytes: 0 }],
    ["'-0' is 0: the default", range("-0"), { sizeBytes: GiB, limitBytes: 0 }],
    ["1 byte: rounded up to 1 MiB", range(1), { sizeBytes: MiB, limitBytes: 0 }],
    ["1 MiB: as asked", range(MiB), { sizeBytes: MiB, limitBytes: 0 }],
    ["1 MiB + 1: rounded up to 2 MiB", range(MiB + 1), { sizeBytes: 2 * MiB, limitBytes: 0 }],
    ["a limit alone below the default: the limit", range(0, 8 * MiB), { sizeBytes: 8 * MiB, limitBytes: 8 * MiB }],
    ["a limit alone above the default: the default", range(0, 2 * GiB), { sizeBytes: GiB, limitBytes: 2 * GiB }],
    ["a limit alone, not whole MiB: rounded up past it", range(0, MiB + 1), "OutOfRange"],
    ["required = limit: as asked", range(2 * MiB, 2 * MiB), { sizeBytes: 2 * MiB, limitBytes: 2 * MiB }],
    ["required rounded up past the limit", range(MiB + 1, MiB + 2), "OutOfRange"],
    ["required past the limit", range(3 * MiB, 2 * MiB), "OutOfRange"],
    ["the largest volume", range(MAX_VOLUME_BYTES), { sizeBytes: MAX_VOLUME_BYTES, limitBytes: 0 }],
    ["past the largest volume", range(MAX_VOLUME_BYTES + 1), "OutOfRange"],
    ["int64-max required", range(INT64_MAX), "OutOfRange"],
    ["int64-max limit limits nothing", range(MiB, INT64_MAX), { sizeBytes: MiB, limitBytes: MAX_VOLUME_BYTES }],
    ["negative required", range(-1), "InvalidArgument"],
    ["negative limit", range(MiB, -1), "InvalidArgument"],
    ["not a number", range("1Gi"), "InvalidArgument"],
  ];
  rows(cases, createSize);
});

describe("expandSize: ControllerExpandVolume's capacity_range → the size to grow to (0: none)", () => {
  const cases: [string, CapacityRangeMsg | null | undefined, SizeAsk | string][] = [
    ["no range", null, "InvalidArgument"],
    ["an empty range", range(0, 0), "InvalidArgument"],
    ["a limit alone grows nothing (never the create default)", range(0, 8 * MiB), { sizeBytes: 0, limitBytes: 8 * MiB }],
    ["1 MiB + 1: rounded up to 2 MiB", range(MiB + 1), { sizeBytes: 2 * MiB, limitBytes: 0 }],
    ["required within the limit", range(3 * MiB, 4 * MiB), { sizeBytes: 3 * MiB, limitBytes: 4 * MiB }],
    ["required rounded up past the limit", range(MiB + 1, MiB + 1), "OutOfRange"],
    ["int64-max required", range(INT64_MAX), "OutOfRange"],
    ["negative required", range(-5), "InvalidArgument"],
  ];
  rows(cases, expandSize);
});

describe("expandedSize: the size ControllerExpandVolume answers", () => {
  const cases: [string, [size: number, limit: number], number | string][] = [
    ["no limit", [4 * MiB, 0], 4 * MiB],
    ["within the limit", [4 * MiB, 8 * MiB], 4 * MiB],
    ["at the limit", [4 * MiB, 4 * MiB], 4 * MiB],
    ["a volume already past the limit (never shrunk)", [8 * MiB, 4 * MiB], "OutOfRange"],
  ];
  rows(cases, ([size, limit]) => expandedSize(size, limit));
});

test("every size sent to the journal is what it checks: a positive multiple of 1 MiB, within limitBytes (0: none)", () => {
  const counts = [0, 1, MiB - 1, MiB, MiB + 1, 5 * MiB + 7, GiB - 1, GiB, GiB + 1, MAX_VOLUME_BYTES - 1, MAX_VOLUME_BYTES];
  let checked = 0;
  for (const required of counts) {
    for (const limit of counts) {
      for (const ask of [outcome(() => createSize(range(required, limit))), outcome(() => expandSize(range(required, limit)))]) {
        if (typeof ask === "string" || ask.sizeBytes === 0) continue; // refused, or an expand that grows nothing
        assert.ok(ask.sizeBytes > 0 && ask.sizeBytes % MiB === 0 && ask.sizeBytes <= MAX_VOLUME_BYTES, `${required}/${limit} → ${ask.sizeBytes}`);
        assert.ok(ask.limitBytes === 0 || ask.limitBytes >= ask.sizeBytes, `${required}/${limit} → limit ${ask.limitBytes} < ${ask.sizeBytes}`);
        checked++;
      }
    }
  }
  assert.ok(checked > 100, `only ${checked} answers checked`);
});

test("capacityAnswer: the free bytes summed, the largest one volume can get, 1 MiB the smallest", () => {
  const pools = [
    { freeBytes: 10 * MiB, maxImageBytes: 4 * MiB },
    { freeBytes: 2 * MiB, maxImageBytes: 100 * MiB },
  ];
  assert.deepEqual(capacityAnswer(pools), {
    available_capacity: String(12 * MiB),
    maximum_volume_size: { value: String(4 * MiB) },
    minimum_volume_size: { value: String(MiB) },
  });
});
