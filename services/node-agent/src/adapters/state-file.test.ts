import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { StateFile } from "./state-file.js";

const State = z.object({
  version: z.literal(1),
  staged: z.record(z.string(), z.object({ device: z.string(), fsType: z.string() })),
});
type State = z.infer<typeof State>;

const sample: State = { version: 1, staged: { "vol-1": { device: "/dev/loop3", fsType: "ext4" } } };

describe("StateFile", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "node-agent-state-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("loads undefined before the first save", async () => {
    assert.equal(await new StateFile(path.join(dir, "none.json"), State).load(), undefined);
  });

  it("round-trips a value, creating the directory, and leaves no temporary file", async () => {
    const file = path.join(dir, "sub", "state.json");
    const sf = new StateFile(file, State);
    await sf.save(sample);
    assert.deepEqual(await sf.load(), sample);
    assert.deepEqual(await new StateFile(file, State).load(), sample);
    assert.deepEqual(await readdir(path.dirname(file)), ["state.json"]);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
  });

  it("replaces the previous value; concurrent saves land in call order", async () => {
    const file = path.join(dir, "order.json");
    const sf = new StateFile(file, State);
    const saves = [];
    for (let i = 0; i < 20; i++) saves.push(sf.save({ version: 1, staged: { [`vol-${i}`]: { device: `/dev/loop${i}`, fsType: "xfs" } } }));
    await Promise.all(saves);
    assert.deepEqual(Object.keys((await sf.load())?.staged ?? {}), ["vol-19"]);
    assert.deepEqual(await readdir(dir).then((fs) => fs.filter((f) => f.startsWith("order.json"))), ["order.json"]);
  });

  it("reports a file that is not JSON as a clear Internal error", async () => {
    const file = path.join(dir, "broken.json");
    await writeFile(file, '{"version": 1, "sta');
    await assert.rejects(new StateFile(file, State).load(), (err: unknown) => {
      assert.equal((err as { code?: unknown }).code, "Internal");
      assert.match((err as Error).message, /state file .*broken\.json is corrupt \(not JSON/);
      return true;
    });
  });

  it("reports a file that does not match the schema as a clear Internal error", async () => {
    const file = path.join(dir, "wrong.json");
    await writeFile(file, JSON.stringify({ version: 2, staged: {} }));
    await assert.rejects(new StateFile(file, State).load(), (err: unknown) => {
      assert.equal((err as { code?: unknown }).code, "Internal");
      assert.match((err as Error).message, /wrong\.json is corrupt \(does not match its schema: version:/);
      return true;
    });
  });

  it("refuses to save a value that does not match the schema, keeping the old file", async () => {
    const file = path.join(dir, "guarded.json");
    const sf = new StateFile(file, State);
    await sf.save(sample);
    await assert.rejects(sf.save({ version: 3 } as unknown as State), { code: "Internal" });
    assert.deepEqual(JSON.parse(await readFile(file, "utf8")), sample);
  });

  it("removes its temporary file when the write fails, and a failed save does not block the next", async () => {
    const file = path.join(dir, "a-dir.json");
    await mkdir(path.join(file, "x"), { recursive: true }); // rename onto a non-empty directory fails
    const sf = new StateFile(file, State);
    await assert.rejects(sf.save(sample), (err: unknown) => {
      assert.equal((err as { code?: unknown }).code, "Internal");
      assert.match((err as Error).message, /cannot write state file .*a-dir\.json/);
      return true;
    });
    assert.deepEqual(
      (await readdir(dir)).filter((f) => f.includes(".tmp-")),
      [],
    );
    await rm(file, { recursive: true });
    await sf.save(sample);
    assert.deepEqual(await sf.load(), sample);
  });
});
