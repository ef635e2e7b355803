/** Which server binary the tests run: NATS_SERVER_BIN (another nats-server than the system's) before the PATH. */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { binaryEnv, findBinary } from "./local-servers.js";

describe("findBinary", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "csi-findbinary-"));
  const saved = process.env.NATS_SERVER_BIN;
  afterEach(() => {
    if (saved === undefined) delete process.env.NATS_SERVER_BIN;
    else process.env.NATS_SERVER_BIN = saved;
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("names the variables after the binaries", () => {
    assert.equal(binaryEnv("nats-server"), "NATS_SERVER_BIN");
    assert.equal(binaryEnv("redis-server"), "REDIS_SERVER_BIN");
  });
  it("takes the executable NATS_SERVER_BIN names", () => {
    const bin = path.join(dir, "nats-server-other");
    writeFileSync(bin, "#!/bin/sh\n");
    chmodSync(bin, 0o755);
    process.env.NATS_SERVER_BIN = bin;
    assert.equal(findBinary("nats-server"), bin);
  });
  it("refuses a NATS_SERVER_BIN that is missing, not executable or a directory, naming the variable", () => {
    const plain = path.join(dir, "not-executable");
    writeFileSync(plain, "");
    chmodSync(plain, 0o644);
    for (const bad of [path.join(dir, "missing"), dir, plain]) {
      process.env.NATS_SERVER_BIN = bad;
      assert.throws(() => findBinary("nats-server"), new RegExp(`NATS_SERVER_BIN=${bad}: not an executable file`));
    }
  });
  it("looks on the PATH and in Debian's locations without it", () => {
    delete process.env.NATS_SERVER_BIN;
    assert.match(findBinary("nats-server"), /\/nats-server$/);
  });
});
