import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { DriverError } from "@csi/contracts";
import { CommandError, isTransient, run, runRetrying } from "./exec.js";

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
    await assert.rejects(run("sleep", ["120"], { timeoutMs: 100 }), (err: unknown) => {
      assert.ok(err instanceof CommandError);
      assert.equal(err.code, "DeadlineExceeded");
      assert.match(err.message, /^sleep 120 timed out after 100 ms$/);
      return true;
    });
    // Killed, not waited for: far sooner than the command's 2 minutes, however busy the machine.
    assert.ok(Date.now() - t0 < 60_000, `answered after ${Date.now() - t0} ms`);
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

describe("runRetrying", () => {
  // Each attempt appends a line to a file, so the test counts the real runs of the command.
  let dir = "";
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "node-agent-exec-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const attempts = async (file: string) => (await readFile(file, "utf8").catch(() => "")).split("\n").filter(Boolean).length;
  // Each attempt writes the time it ran at (ns).
  const failing = (file: string, stderr: string) => ["-c", `date +%s%N >> "$0"; echo '${stderr}' >&2; exit 1`, file];

  it("retries a busy command 3 times, 100 ms then 200 ms apart, and throws the last failure", async () => {
    const file = path.join(dir, "busy");
    await assert.rejects(runRetrying("sh", failing(file, "losetup: /dev/loop0: Device or resource busy")), { code: "Unavailable" });
    assert.equal(await attempts(file), 3);
    // At least the waits apart (a busy machine only adds to them; retry.test.ts asserts the exact schedule).
    const [a = 0, b = 0, c = 0] = (await readFile(file, "utf8"))
      .split("\n")
      .filter(Boolean)
      .map((l) => Number(BigInt(l) / 1_000_000n));
    assert.ok(b - a >= 100, `first wait ${b - a} ms`);
    assert.ok(c - b >= 200, `second wait ${c - b} ms`);
  });

  it("fails at once on a permanent failure", async () => {
    const file = path.join(dir, "permanent");
    await assert.rejects(runRetrying("sh", failing(file, "wrong fs type, bad option, bad superblock")), { code: "Internal" });
    assert.equal(await attempts(file), 1);
  });

  it("returns as soon as an attempt succeeds", async () => {
    const file = path.join(dir, "second");
    const script = `echo x >> "$0"; [ "$(wc -l < "$0")" -ge 2 ] && echo done && exit 0; echo 'target is busy' >&2; exit 32`;
    const res = await runRetrying("sh", ["-c", script, file]);
    assert.equal(res.stdout, "done\n");
    assert.equal(await attempts(file), 2);
  });
});
