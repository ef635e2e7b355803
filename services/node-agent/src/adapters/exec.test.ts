import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DriverError } from "@csi/contracts";
import { CommandError, isTransient, run, withRetry } from "./exec.js";

describe("run", () => {
  it("captures stdout and stderr", async () => {
    const res = await run("sh", ["-c", 'echo out; echo err >&2; echo "$0"', "arg0"]);
    assert.deepEqual(res, { stdout: "out\narg0\n", stderr: "err\n", code: 0 });
  });

  it("passes arguments as they are, never through a shell", async () => {
    const res = await run("echo", ["$(id)", "a;b", "*", "'q'"]);
    assert.equal(res.stdout, "$(id) a;b * 'q'\n");
  });

  it("turns a non-zero exit into a DriverError naming the command, exit code and stderr", async () => {
    await assert.rejects(run("sh", ["-c", "echo 'something broke' >&2; exit 3"]), (err: unknown) => {
      assert.ok(err instanceof CommandError && err instanceof DriverError);
      assert.equal(err.code, "Internal");
      assert.equal(err.exitCode, 3);
      assert.match(err.message, /^sh -c .* failed \(exit 3\): something broke$/);
      return true;
    });
  });

  it("accepts the exit codes the caller expects", async () => {
    const res = await run("sh", ["-c", "exit 2"], { okCodes: [2] });
    assert.equal(res.code, 2);
  });

  it("reports a busy failure as Unavailable", async () => {
    await assert.rejects(run("sh", ["-c", "echo 'umount: /x: target is busy.' >&2; exit 32"]), { code: "Unavailable" });
  });

  it("reports a missing tool as FailedPrecondition", async () => {
    await assert.rejects(run("no-such-tool-here", ["x"]), (err: unknown) => {
      assert.ok(err instanceof CommandError);
      assert.equal(err.code, "FailedPrecondition");
      assert.match(err.message, /no-such-tool-here is not installed/);
      return true;
    });
  });

  it("kills a command that runs past its timeout", async () => {
    const t0 = Date.now();
    await assert.rejects(run("sleep", ["5"], { timeoutMs: 100 }), (err: unknown) => {
      assert.ok(err instanceof CommandError);
      assert.equal(err.code, "DeadlineExceeded");
      assert.match(err.message, /^sleep 5 timed out after 100 ms$/);
      return true;
    });
    assert.ok(Date.now() - t0 < 2000);
  });

  it("runs in the C locale", async () => {
    const res = await run("sh", ["-c", "echo $LC_ALL"]);
    assert.equal(res.stdout, "C\n");
  });
});

describe("isTransient", () => {
  const cases: [string, unknown, boolean][] = [
    ["busy device (stderr)", new CommandError("Internal", "x", ["x"], 1, "losetup: /dev/loop0: Device or resource busy"), true],
    ["busy target (stderr)", new CommandError("Internal", "x", ["x"], 32, "umount: /mnt: target is busy."), true],
    ["temporarily unavailable", new CommandError("Internal", "x", ["x"], 1, "Resource temporarily unavailable"), true],
    ["errno EBUSY", Object.assign(new Error("rmdir failed"), { code: "EBUSY" }), true],
    ["not found", new CommandError("Internal", "x", ["x"], 1, "No such file or directory"), false],
    ["bad superblock", new CommandError("Internal", "x", ["x"], 32, "wrong fs type, bad option, bad superblock"), false],
    ["a DriverError", new DriverError("InvalidArgument", "bad flag"), false],
    ["not an error", "busy", false],
  ];
  for (const [name, err, want] of cases) it(`${name} → ${want}`, () => assert.equal(isTransient(err), want));
});

describe("withRetry", () => {
  const busy = () => new CommandError("Unavailable", "busy", ["umount", "/x"], 32, "umount: /x: target is busy.");

  it("retries transient failures with 100 ms then 200 ms backoff, and throws the last one", async () => {
    const at: number[] = [];
    const t0 = Date.now();
    await assert.rejects(
      withRetry(async () => {
        at.push(Date.now() - t0);
        throw busy();
      }),
      { code: "Unavailable" },
    );
    assert.equal(at.length, 3);
    const [a = 0, b = 0, c = 0] = at;
    assert.ok(b - a >= 95 && b - a < 180, `first delay ${b - a} ms`);
    assert.ok(c - b >= 195 && c - b < 350, `second delay ${c - b} ms`);
  });

  it("returns as soon as an attempt succeeds", async () => {
    let calls = 0;
    const v = await withRetry(
      async () => {
        calls++;
        if (calls < 2) throw busy();
        return "ok";
      },
      { firstDelayMs: 1 },
    );
    assert.equal(v, "ok");
    assert.equal(calls, 2);
  });

  it("fails at once on a permanent failure", async () => {
    let calls = 0;
    await assert.rejects(
      withRetry(async () => {
        calls++;
        throw new DriverError("InvalidArgument", "no");
      }),
      { code: "InvalidArgument" },
    );
    assert.equal(calls, 1);
  });

  it("retries a real command that fails transiently", async () => {
    let calls = 0;
    const res = await withRetry(() => run("sh", ["-c", calls++ === 0 ? "echo 'Device or resource busy' >&2; exit 1" : "echo done"]), { firstDelayMs: 1 });
    assert.equal(res.stdout, "done\n");
    assert.equal(calls, 2);
  });
});
