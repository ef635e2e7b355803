import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { z } from "zod";
import { ConfigError, envNames, flagNames, loadConfig } from "./config.js";

const Schema = z.object({
  url: z.string().default("nats://x"),
  port: z.coerce.number().int().min(1).default(7),
  password: z.string().min(8).optional(),
  endpoint: z.string().default("unix:///a.sock"),
});
const SETTINGS = {
  url: { env: "URL" },
  port: { env: "PORT" },
  password: { env: "PASSWORD", secret: true },
  endpoint: { env: "CSI_ENDPOINT", flag: "endpoint" },
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
