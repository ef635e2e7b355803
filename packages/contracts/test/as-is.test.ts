/**
 * The as-is check (src/as-is.ts) against zod itself: for each schema and value, `asIsCheck(s)(v)`
 * may be true only if `s.safeParse(v)` succeeds with a value deep-equal to `v`; and where zod
 * would return the value unchanged through node types the check knows, it is true (else the fast
 * path would never be taken). The journal's log-records.test.ts fuzzes it on events.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { z } from "zod";
import { asIsCheck, jsonEqual } from "../src/as-is.js";
import { MutableParameters } from "../src/mutable-parameters.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

/** Each value as JSON.parse makes it (the check is only for those). */
const fromJson = (text: string): unknown => JSON.parse(text);

/** `expected`: the verdict wanted; never true unless zod agrees. */
function verdicts(schema: z.ZodType, cases: [string, boolean][]) {
  const check = asIsCheck(schema);
  for (const [text, expected] of cases) {
    const v = fromJson(text);
    const r = schema.safeParse(v);
    const zodAsIs = r.success && jsonEqual(r.data, v);
    assert.equal(check(v), expected, `${text}: as-is ${!expected}, expected ${expected}`);
    if (expected) assert.ok(zodAsIs, `${text}: the check says as-is, zod does not (${r.success ? "changed" : "refused"})`);
  }
}

describe("asIsCheck: true only where zod returns the value unchanged", () => {
  test("plain types, literals, enums; numbers must be finite (JSON.parse makes Infinity of 1e400)", () => {
    verdicts(z.string(), [
      ['"x"', true],
      ["1", false],
    ]);
    verdicts(z.number().int().nonnegative(), [
      ["0", true],
      ["-0", true],
      ["1.5", false],
      ["-1", false],
      ["1e400", false],
      ["9007199254740993", false],
      ['"1"', false],
    ]);
    verdicts(z.boolean(), [
      ["true", true],
      ["null", false],
    ]);
    verdicts(z.literal(1), [
      ["1", true],
      ["2", false],
      ['"1"', false],
    ]);
    verdicts(z.enum(["a", "b"]), [
      ['"b"', true],
      ['"c"', false],
    ]);
  });

  test("a node's checks are zod's: refinements, regexes, lengths, string formats", () => {
    verdicts(
      z.string().refine((s) => s.startsWith("a")),
      [
        ['"ab"', true],
        ['"ba"', false],
      ],
    );
    verdicts(
      z
        .string()
        .min(2)
        .max(3)
        .regex(/^[a-z]+$/),
      [
        ['"ab"', true],
        ['"a"', false],
        ['"abcd"', false],
        ['"AB"', false],
      ],
    );
    verdicts(z.uuid(), [
      [`"${UUID}"`, true],
      ['"not-a-uuid"', false],
    ]);
    verdicts(z.array(z.string()).min(1), [
      ['["a"]', true],
      ["[]", false],
      ["[1]", false],
      ['{"0":"a"}', false],
    ]);
  });

  test("objects: an absent optional key is fine; an unknown key never (zod drops it, or refuses it)", () => {
    const shape = { a: z.string(), b: z.number().optional() };
    for (const schema of [z.object(shape), z.strictObject(shape), z.looseObject(shape)]) {
      verdicts(schema, [
        ['{"a":"x"}', true],
        ['{"a":"x","b":1}', true],
        ['{"b":1}', false],
        ['{"a":"x","c":1}', false],
        ['{"a":"x","__proto__":{"b":1}}', false],
        ['{"a":"x","b":null}', false],
        ['["x"]', false],
        ["null", false],
      ]);
    }
    verdicts(z.object({ a: z.string().exactOptional() }), [
      ["{}", true],
      ['{"a":"x"}', true],
    ]);
  });

  test("defaults and transforms are zod's to judge: as-is only if they change nothing", () => {
    verdicts(z.object({ a: z.string().default("d") }), [
      ['{"a":"x"}', true],
      ["{}", false],
    ]);
    verdicts(
      z.string().transform((s) => s.trim()),
      [
        ['"x"', true],
        ['" x "', false],
      ],
    );
    verdicts(MutableParameters, [
      ["{}", true],
      ['{"readIOPS":"100"}', true],
      ['{"readIOPS":"0100"}', false],
      ['{"readIOPS":"0"}', true],
      ['{"readIOPS":"x"}', false],
      ['{"readIops":"100"}', false],
    ]);
  });

  test("records of string keys: any key but __proto__ (zod leaves it out)", () => {
    verdicts(z.record(z.string(), z.string()), [
      ["{}", true],
      ['{"k":"v","constructor":"c"}', true],
      ['{"k":1}', false],
      ['{"__proto__":"v"}', false],
      ["[]", false],
    ]);
    // A key schema with checks or a fixed set of keys: left to zod.
    verdicts(z.record(z.enum(["a"]), z.string()), [
      ['{"a":"v"}', true],
      ['{"b":"v"}', false],
    ]);
  });

  test("a discriminated union picks its option by the tag; an unknown tag is not as-is", () => {
    const u = z.discriminatedUnion("kind", [z.object({ kind: z.literal("a"), x: z.string() }), z.object({ kind: z.literal("b"), y: z.number() })]);
    verdicts(u, [
      ['{"kind":"a","x":"s"}', true],
      ['{"kind":"b","y":1}', true],
      ['{"kind":"a","y":1}', false],
      ['{"kind":"c"}', false],
      ['{"x":"s"}', false],
    ]);
  });
});
