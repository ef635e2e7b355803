/**
 * csictl's words on a running `npm start` stack: a bulk re-create says which names were there
 * already; `replay --at` past the end of the log says so; `history -f` rows stand in the columns
 * of the table above them; rebuild's progress never prints an unknown time left; an output that is
 * there already is a usage error (2) for `auth init` as for `log export`.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { csictlAt, runStack, spawnCsictl } from "@csi/testkit";

const cleanups: (() => Promise<void>)[] = [];
let runDir = "";
let at: ReturnType<typeof csictlAt>;
before(async () => {
  runDir = (await runStack(cleanups, { CATCHUP_EVERY_MS: "0" })).runDir;
  at = csictlAt(runDir);
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
});
const csictl = (...args: string[]) => at.csictl(...args);
const json = <T>(...args: string[]) => at.json<T>(...args);

describe("words", () => {
  test("a bulk re-create: the names that were there say exists, the new ones created", async () => {
    const first = await csictl("volume", "create", "bulk-a", "bulk-b", "--size", "1Mi");
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stderr, /^2 created, 0 failed$/m);
    const again = await csictl("volume", "create", "bulk-a", "bulk-b", "bulk-c", "--size", "1Mi");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^bulk-a\s+\S+\s+exists \(already there\)$/m);
    assert.match(again.stdout, /^bulk-b\s+\S+\s+exists \(already there\)$/m);
    assert.match(again.stdout, /^bulk-c\s+\S+\s+created$/m);
    assert.match(again.stderr, /^1 created, 2 already there, 0 failed$/m);
    const j = await json<{ items: { name: string; result: string }[] }>("volume", "create", "bulk-a", "bulk-d", "--size", "1Mi");
    assert.deepEqual(
      j.items.map((i) => [i.name, i.result]),
      [
        ["bulk-a", "exists"],
        ["bulk-d", "created"],
      ],
    );
  });

  test("replay --at past the end of the log says so on stderr (exit 0)", async () => {
    const past = await csictl("replay", "--at", "999999");
    assert.equal(past.code, 0, past.stderr);
    assert.match(past.stderr, /^sequence 999999 is past the end of the log \(its last sequence is \d+\): this is the state now$/m);
    const later = await csictl("replay", "--at", "2999-01-01T00:00:00Z");
    assert.equal(later.code, 0, later.stderr);
    assert.match(later.stderr, /^2999-01-01T00:00:00Z is past the log's last event \(sequence \d+, at \S+\): this is the state now$/m);
    const within = await csictl("replay", "--at", "1");
    assert.equal(within.code, 0, within.stderr);
    assert.doesNotMatch(within.stderr, /past/);
  });

  test("rebuild's progress never prints an unknown time left", async () => {
    const r = await csictl("rebuild");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /rebuild local \[/);
    assert.doesNotMatch(r.stderr, /NF|NaN|Infinity|NULL/);
  });

  test("an output that is there already: auth init and log export both exit 2", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "csictl-exists-"));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const init = ["auth", "init", "--out", path.join(dir, "auth"), "--nodes", "n1"];
    assert.equal((await csictl(...init)).code, 0);
    const again = await csictl(...init);
    assert.equal(again.code, 2, again.stderr);
    assert.match(again.stderr, /auth\.conf exists: pass --force/);
    const backup = path.join(dir, "log.jsonl");
    const key = path.join(dir, "key");
    await writeFile(key, "k".repeat(40), { mode: 0o600 });
    assert.equal((await csictl("log", "export", backup, "--key-file", key)).code, 0);
    const exists = await csictl("log", "export", backup, "--key-file", key);
    assert.equal(exists.code, 2, exists.stderr);
    assert.match(exists.stderr, /log\.jsonl exists: a backup never replaces a file/);
  });
});

describe("history --follow as a table", () => {
  test("a followed row starts every column where the table's header does", async () => {
    await json("volume", "create", "csictl-follow-table", "--size", "4Mi", "--request-id", "f");
    const f = spawnCsictl(["history", "csictl-follow-table", "--follow"], runDir);
    cleanups.push(async () => {
      if (f.child.exitCode === null) f.child.kill("SIGKILL");
    });
    await f.until((o) => o.err.includes("Ctrl-C to stop"));
    await json("volume", "expand", "csictl-follow-table", "--size", "8Mi", "--request-id", "a-much-longer-request-id-than-f");
    await f.until((o) => o.out.includes("VolumeExpanded"));
    f.child.kill("SIGINT");
    assert.equal(await f.exited, 0);
    const out = f.seen.out;
    const lines = out.trimEnd().split("\n");
    const header = lines[0] as string;
    const followed = lines.find((l) => l.includes("VolumeExpanded")) as string;
    const created = lines.find((l) => l.includes("VolumeCreated")) as string;
    for (const col of ["TIME", "EVENT", "REQUEST"]) {
      const at = header.indexOf(col);
      assert.notEqual(followed[at - 1], undefined);
      assert.equal(followed[at - 1], " ", `${col} starts at ${at} in the followed row too:\n${out}`);
      assert.notEqual(followed[at], " ", `${col} starts at ${at} in the followed row too:\n${out}`);
      assert.equal(created[at - 1], " ");
    }
    assert.equal(followed.indexOf("VolumeExpanded"), header.indexOf("EVENT"), out);
  });
});
