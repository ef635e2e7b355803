/**
 * `prepareDataDir` (scripts/lib/data-dir.ts), on this machine's real file system: it makes the
 * directory (and its parents), marks it ext4's "top directory" (`chattr +T`, seen by `lsattr -d`)
 * where the file system has the flag, says truthfully whether it did, and keeps what is already in
 * a directory it prepares again.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { prepareDataDir } from "../scripts/lib/data-dir.js";

const root = mkdtempSync(path.join(os.tmpdir(), "csi-data-dir-"));
after(() => rmSync(root, { recursive: true, force: true }));

/** The flags `lsattr -d` shows for a directory (undefined where the file system has none). */
function attrs(dir: string): string | undefined {
  const r = spawnSync("lsattr", ["-d", dir], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.split(" ")[0] : undefined;
}

test("prepareDataDir makes the directory and marks it a top directory where the file system can", () => {
  const dir = path.join(root, "a", "b", ".data");
  const flagged = prepareDataDir(dir);
  assert.ok(existsSync(dir), "the directory and its parents exist");
  const flags = attrs(dir);
  if (flagged) assert.match(flags ?? "", /T/, `lsattr shows the T flag (got ${flags})`);
  else {
    // It said no: then the file system really refuses the flag.
    const again = spawnSync("chattr", ["+T", dir], { stdio: "ignore" });
    assert.notEqual(again.status, 0, "prepareDataDir said the flag could not be set, but chattr sets it");
    assert.doesNotMatch(flags ?? "", /T/);
  }
});

test("preparing an existing data directory again keeps its contents", () => {
  const dir = path.join(root, "existing");
  prepareDataDir(dir);
  writeFileSync(path.join(dir, "keep"), "x");
  prepareDataDir(dir);
  assert.equal(readFileSync(path.join(dir, "keep"), "utf8"), "x");
});
