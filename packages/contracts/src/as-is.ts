/**
 * A fast "is this value already what the schema would return?" check, compiled from a zod schema
 * (docs/journal.md, "Replay speed"). Reading the event log validates every record against
 * `JournalEvent`; zod's `safeParse` builds a new object for every object and array it passes
 * (stripping unknown keys), which made it a large share of a replay's CPU. A record a journal
 * wrote has no unknown keys and needs no transform, so the value JSON.parse returned can be kept
 * as it is: `asIsCheck(schema)(value)` is true only if `schema.safeParse(value)` succeeds and
 * returns a value deep-equal to `value`. When it is false the caller parses with zod as before,
 * so zod stays the only judge of what is valid, and its error is what a report shows.
 *
 * Compiled once per schema by walking zod's definitions. Only these node types are checked here,
 * each as zod's own parser does (zod 4, `zod/v4/core/schemas.js`): string, number, boolean,
 * literal, enum, optional, object (stripped, strict or loose: any key outside the shape makes the
 * check false, since zod would drop or refuse it), array, record of string keys, and a
 * discriminated union of objects whose discriminator is a literal. A node's checks (refinements,
 * regexes, lengths, integer and range checks) are zod's own check objects, run on the value.
 * Anything else (a transform, a pipe, a default, a lazy, a coercion, …) is checked by the zod
 * sub-schema itself (`safeParse`, the output compared with the value), so what this check does
 * not know it never guesses. `as-is.test.ts` compares the verdict with zod's on valid and mutated
 * events.
 *
 * Only for values JSON.parse made (plain objects, arrays, strings, finite and infinite numbers,
 * booleans, null): a class instance, a getter or a symbol key is outside what it was tested on.
 */
import type { z } from "zod";

/** True only if the schema would accept the value and return it unchanged (deep-equal). */
export type AsIsCheck = (value: unknown) => boolean;

interface Check {
  _zod: { def: { check: string; when?: (payload: Payload) => boolean }; check(payload: Payload): unknown };
}
interface Payload {
  value: unknown;
  issues: unknown[];
}
interface Def {
  type: string;
  checks?: Check[];
  coerce?: boolean;
  shape?: Record<string, Node>;
  catchall?: Node;
  innerType?: Node;
  element?: Node;
  keyType?: Node;
  valueType?: Node;
  options?: Node[];
  discriminator?: string;
  unionFallback?: boolean;
  values?: unknown[];
  mode?: string;
}
interface Node {
  _zod: { def: Def; traits: Set<string>; values?: Set<unknown>; optin?: string; optout?: string };
  safeParse(value: unknown): { success: boolean; data?: unknown };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Structural equality of JSON values (plain objects: the same own keys). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return Number.isNaN(a) && Number.isNaN(b);
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (const k of ka) {
    if (!Object.hasOwn(b, k) || !jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}

/** A node's checks, run as zod runs them on a value that passed its type (none failed so far). */
function withChecks(node: Node, typed: AsIsCheck): AsIsCheck {
  // A string format (z.uuid(), z.email(), …) is a check itself, run before the others (zod's $ZodType.init).
  const checks = [...(node._zod.traits.has("$ZodCheck") ? [node as unknown as Check] : []), ...(node._zod.def.checks ?? [])];
  if (checks.length === 0) return typed;
  return (value) => {
    if (!typed(value)) return false;
    const payload: Payload = { value, issues: [] };
    for (const ch of checks) {
      const when = ch._zod.def.when;
      if (when && !when(payload)) continue;
      const result = ch._zod.check(payload);
      // An async check: zod's safeParse throws on it; the caller's zod parse will.
      if (result instanceof Promise || payload.issues.length > 0 || payload.value !== value) return false;
    }
    return true;
  };
}

/** What zod itself says, for a node this compiler does not check on its own. */
function byZod(node: Node): AsIsCheck {
  return (value) => {
    const r = node.safeParse(value);
    return r.success && jsonEqual(r.data, value);
  };
}

/** Whether absence of an object's key is accepted with nothing put in its place (`.optional()`, not a default). */
const omittable = (node: Node) => node._zod.optin === "optional" && node._zod.optout === "optional";

/** A node's check, compiled once however often the schema uses it (a recursive schema is a lazy one: left to zod). */
function compile(node: Node, seen: Map<Node, AsIsCheck>): AsIsCheck {
  let out = seen.get(node);
  if (!out) {
    out = compileNode(node, seen);
    seen.set(node, out);
  }
  return out;
}

function compileNode(node: Node, seen: Map<Node, AsIsCheck>): AsIsCheck {
  let out: AsIsCheck = byZod(node);
  const def = node._zod.def;
  if (def.coerce) return out;
  switch (def.type) {
    case "string":
      out = withChecks(node, (v) => typeof v === "string");
      break;
    case "number":
      out = withChecks(node, (v) => typeof v === "number" && Number.isFinite(v));
      break;
    case "boolean":
      out = withChecks(node, (v) => typeof v === "boolean");
      break;
    case "literal":
    case "enum": {
      const values = node._zod.values;
      if (values) out = withChecks(node, (v) => values.has(v));
      break;
    }
    case "optional": {
      const inner = def.innerType;
      if (!inner || inner._zod.optin === "defaulted") break;
      const check = compile(inner, seen);
      // .exactOptional(): a key may be absent, but not present and undefined.
      const exact = node._zod.traits.has("$ZodExactOptional");
      out = withChecks(node, (v) => (v === undefined && !exact) || check(v));
      break;
    }
    case "array": {
      if (!def.element) break;
      const check = compile(def.element, seen);
      out = withChecks(node, (v) => Array.isArray(v) && v.every((x) => check(x)));
      break;
    }
    case "record": {
      // Only string keys that zod takes as they are (z.string() with no checks) and whose values it checks.
      const keyDef = def.keyType?._zod.def;
      if (!def.valueType || keyDef?.type !== "string" || keyDef.coerce || (keyDef.checks ?? []).length > 0 || def.keyType?._zod.values) break;
      const check = compile(def.valueType, seen);
      out = withChecks(node, (v) => {
        if (!isObject(v) || Object.getPrototypeOf(v) !== Object.prototype) return false;
        for (const key in v) if (key === "__proto__" || !Object.hasOwn(v, key) || !check(v[key])) return false;
        return true;
      });
      break;
    }
    case "object": {
      const shape = def.shape;
      if (!shape || Object.getOwnPropertySymbols(shape).length > 0) break;
      const fields = Object.entries(shape).map(([key, field]) => ({ key, check: compile(field, seen), optional: omittable(field) }));
      if (fields.some((f) => f.key === "__proto__")) break;
      const keys = new Set(fields.map((f) => f.key));
      out = withChecks(node, (v) => {
        if (!isObject(v)) return false;
        for (const f of fields) {
          // zod asks `key in input`, and reads `input[key]`
          if (!(f.key in v)) {
            if (!f.optional) return false;
          } else if (!f.check(v[f.key])) return false;
        }
        // Any other key: zod drops it (or refuses it, in a strict object) — not the value as it is.
        for (const key in v) if (!keys.has(key)) return false;
        return true;
      });
      break;
    }
    case "union": {
      const disc = def.discriminator;
      if (disc === undefined || def.unionFallback || !def.options) break;
      const byValue = new Map<unknown, AsIsCheck>();
      let plain = true;
      for (const option of def.options) {
        const tag = option._zod.def.type === "object" ? option._zod.def.shape?.[disc] : undefined;
        if (tag?._zod.def.type !== "literal" || !tag._zod.values) plain = false;
        else
          for (const value of tag._zod.values) {
            if (byValue.has(value)) plain = false;
            byValue.set(value, compile(option, seen));
          }
      }
      if (!plain) break;
      out = withChecks(node, (v) => {
        if (!isObject(v)) return false;
        return byValue.get(v[disc])?.(v) === true;
      });
      break;
    }
  }
  return out;
}

/** The as-is check of a zod schema (see above). */
export function asIsCheck(schema: z.ZodType): AsIsCheck {
  return compile(schema as unknown as Node, new Map());
}
