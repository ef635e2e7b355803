import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { z } from "zod";
import { ConfigError, envNames, flagNames, loadConfig, schemaDefault, settingsTable } from "./config.js";

const Schema = z.object({
  url: z.string().default("nats://x"),
  port: z.coerce.number().int().min(1).default(7),
  password: z.string().min(8).optional(),
  endpoint: z.string().default("unix:///a.sock"),
});
const SETTINGS = {
  url: { env: "URL", help: "where the server is" },
  port: { env: "PORT", help: "its port" },
  password: { env: "PASSWORD", secret: true, help: "the password" },
  endpoint: { env: "CSI_ENDPOINT", flag: "endpoint", help: "the CSI socket" },
} as const;

describe("loadConfig", () => {
  it("given env and flags, when loaded, then a flag wins over its env variable and defaults fill the rest", () => {
    const cfg = loadConfig(Schema, SETTINGS, ["--endpoint", "unix:///b.sock"], { CSI_ENDPOINT: "unix:///c.sock", PORT: "9" });
    assert.deepEqual(cfg, { url: "nats://x", port: 9, endpoint: "unix:///b.sock" });
  });

  it("given several bad values, when loaded, then one line per problem names the variable, and a secret is not echoed", () => {
    const err = (() => {
      try {
        loadConfig(Schema, SETTINGS, [], { PORT: "zero", PASSWORD: "short" });
      } catch (e) {
        return e;
      }
    })();
    assert.ok(err instanceof ConfigError);
    assert.equal(err.problems.length, 2);
    assert.match(err.problems[0] ?? "", /^PORT: .*\(got "zero"\)$/);
    assert.match(err.problems[1] ?? "", /^PASSWORD: /);
    assert.doesNotMatch(err.message, /short/);
  });

  it("given an unknown flag, when loaded, then a ConfigError says so", () => {
    assert.throws(
      () => loadConfig(Schema, SETTINGS, ["--nope", "1"], {}),
      (e: unknown) => e instanceof ConfigError && /nope/.test(e.message),
    );
  });

  it("lists the env names and flags a table accepts", () => {
    assert.deepEqual(envNames(SETTINGS), ["URL", "PORT", "PASSWORD", "CSI_ENDPOINT"]);
    assert.deepEqual(flagNames(SETTINGS), ["--endpoint"]);
  });
});

describe("--help's settings table", () => {
  it("finds a default through optional, pipes (transforms) and refinements, before the transform; none is undefined", () => {
    assert.equal(schemaDefault(z.string().default("a")), "a");
    assert.equal(
      schemaDefault(
        z
          .enum(["0", "1"])
          .default("0")
          .transform((v) => v === "1"),
      ),
      "0",
    );
    assert.equal(
      schemaDefault(
        z
          .string()
          .default("x")
          .superRefine(() => {}),
      ),
      "x",
    );
    assert.equal(schemaDefault(z.coerce.number().int().min(1).default(7)), 7);
    assert.equal(schemaDefault(z.string().default(() => "computed")), "computed");
    assert.equal(schemaDefault(z.string().optional()), undefined);
    assert.equal(
      schemaDefault(
        z
          .string()
          .optional()
          .transform((v) => v ?? "later"),
      ),
      undefined,
    );
  });

  it("has a row per setting: variable, flag, default (unset when none), meaning; a secret says so", () => {
    const lines = settingsTable(Schema, SETTINGS).split("\n");
    assert.equal(lines.length, 5);
    assert.match(lines[0] ?? "", /^VARIABLE +FLAG +DEFAULT +MEANING$/);
    assert.match(lines[1] ?? "", /^URL +- +nats:\/\/x +where the server is$/);
    assert.match(lines[2] ?? "", /^PORT +- +7 +its port$/);
    assert.match(lines[3] ?? "", /^PASSWORD +- +unset +the password \(secret: never printed\)$/);
    assert.match(lines[4] ?? "", /^CSI_ENDPOINT +--endpoint +unix:\/\/\/a\.sock +the CSI socket$/);
    // Columns line up: every MEANING starts where the header's does.
    const at = (lines[0] ?? "").indexOf("MEANING");
    for (const l of lines.slice(1)) assert.match(l.slice(at), /^[a-z]/, l);
  });
});
