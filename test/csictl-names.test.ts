/**
 * csictl on a running `npm start` stack, issue 37: a volume named the ways people name it (request
 * name, uuid, a unique prefix, the PVC's namespace/name) by `volume get/expand/delete`, `replay`
 * and `history`, ambiguity and absence said plainly; `--param` on the create commands; the words
 * and exit codes of the low items (--fs and --limit checked by csictl, an expand that cannot
 * shrink, READY yes/no, log purge-foreign's summary on stderr).
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { runCsictl, runStack } from "@csi/testkit";

const MiB = 1024 * 1024;
const cleanups: (() => Promise<void>)[] = [];
let runDir = "";
before(async () => {
  runDir = (await runStack(cleanups, { CATCHUP_EVERY_MS: "0" })).runDir;
  await readFile(path.join(runDir, "stack.json"), "utf8");
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

const csictl = (...args: string[]) => runCsictl(args, { RUN_DIR: runDir }, { timeoutMs: 120_000 });
async function json<T>(...args: string[]): Promise<T> {
  const r = await csictl("--json", ...args);
  assert.equal(r.code, 0, `csictl ${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}
type Volume = { volume: { volumeId: string; capacityBytes: string; volumeContext: Record<string, string> } };
const uuidOf = (id: string) => id.slice(-36);

describe("volume arguments: the id, the request name, the uuid, a unique prefix, namespace/pvc", () => {
  let id = "";
  before(async () => {
    id = (await json<Volume>("volume", "create", "csictl-named", "--size", "4Mi")).volume.volumeId;
  });

  test("volume get by each, the same volume", async () => {
    for (const arg of [id, "csictl-named", uuidOf(id), uuidOf(id).slice(0, 13), id.slice(0, 50)]) {
      assert.equal((await json<Volume>("volume", "get", arg)).volume.volumeId, id, arg);
    }
  });

  test("namespace/pvc, as the log recorded it (external-provisioner's --extra-create-metadata)", async () => {
    const parameters = { "csi.storage.k8s.io/pvc/name": "data-db-0", "csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pv/name": "pvc-k8s-0" };
    const created = JSON.parse(
      (
        await csictl(
          "call",
          "Controller.CreateVolume",
          JSON.stringify({
            name: "pvc-k8s-0",
            capacity_range: { required_bytes: String(MiB) },
            volume_capabilities: [{ access_mode: { mode: "SINGLE_NODE_WRITER" }, mount: {} }],
            parameters,
          }),
        )
      ).stdout,
    ) as { volume: { volumeId: string } };
    assert.equal((await json<Volume>("volume", "get", "shop/data-db-0")).volume.volumeId, created.volume.volumeId);
    const r = await csictl("history", "shop/data-db-0");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /VolumeReserved\s.*pvc shop\/data-db-0/);
  });

  test("expand, replay and history by name or prefix; delete by name", async () => {
    const grown = await json<{ volumeId: string; capacityBytes: string }>("volume", "expand", "csictl-named", "--size", "8Mi");
    assert.deepEqual([grown.volumeId, grown.capacityBytes], [id, String(8 * MiB)]);
    const replayed = await json<{ items: { uuid: string }[] }>("replay", "--at", new Date().toISOString(), "csictl-named");
    assert.deepEqual(
      replayed.items.map((e) => e.uuid),
      [uuidOf(id)],
    );
    const byPrefix = await json<{ items: { uuids: string[] }[] }>("history", uuidOf(id).slice(0, 8));
    assert.deepEqual(byPrefix.items[0]?.uuids, [uuidOf(id)]);
    const deleted = await json<{ volumeId: string; deleted: boolean }>("volume", "delete", "csictl-named");
    assert.deepEqual([deleted.volumeId, deleted.deleted], [id, true]);
    // Gone: no live volume has that name any more; history still finds it in the log.
    const gone = await csictl("volume", "get", "csictl-named");
    assert.equal(gone.code, 1, gone.stderr);
    assert.match(gone.stderr, /^csictl: NOT_FOUND: no volume is named "csictl-named" \(a volume id, or a live volume's request name/);
    assert.equal((await csictl("volume", "delete", "csictl-named", "--ignore-not-found")).code, 0);
    assert.equal((await csictl("history", "csictl-named")).code, 0);
  });

  test("a prefix several volumes share is a usage error (2) that lists them; a name nothing has is NotFound (1)", async () => {
    await json("volume", "create", "csictl-named-2", "--size", "1Mi");
    await json("volume", "create", "csictl-named-3", "--size", "1Mi");
    const shared = id.slice(0, 32); // version, cluster and pool: every volume of the pool
    const r = await csictl("volume", "get", shared);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`^csictl: "${shared}" names \\d+ volumes: 0001-\\S+ \\(\\S+\\), .*; give more of the id\\n$`));
    const none = await csictl("volume", "expand", "no-such-volume", "--size", "8Mi");
    assert.equal(none.code, 1, none.stderr);
    assert.match(none.stderr, /NOT_FOUND: no volume is named "no-such-volume"/);
    assert.equal((await csictl("replay", "--at", "1", "no-such-volume")).code, 1);
  });
});

describe("options and words", () => {
  test("--param k=v on volume create and snapshot create", async () => {
    const v = await json<Volume>("volume", "create", "csictl-param", "--size", "2Mi", "--param", "tier=gold", "--param", "zone=a");
    assert.equal(v.volume.volumeContext.tier, "gold");
    assert.equal(v.volume.volumeContext.zone, "a");
    const snap = await csictl("snapshot", "create", "csictl-param-snap", "--source", v.volume.volumeId, "--param", "keep=7d");
    assert.equal(snap.code, 0, snap.stderr);
    assert.match(snap.stdout, /^READY\s+yes$/m, "yes / no, as snapshot list says");
    const bad = await csictl("volume", "create", "csictl-param-bad", "--size", "2Mi", "--param", "novalue");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--param takes key=value, got "novalue"/);
  });

  test("--fs and --limit are checked by csictl (2), before anything is sent", async () => {
    const fs = await csictl("volume", "create", "csictl-btrfs", "--size", "2Mi", "--fs", "btrfs");
    assert.equal(fs.code, 2);
    assert.match(fs.stderr, /'--fs <type>' argument 'btrfs' is invalid. Allowed choices are ext4, xfs/);
    const limit = await csictl("volume", "create", "csictl-limit", "--size", "8Mi", "--limit", "4Mi");
    assert.equal(limit.code, 2);
    assert.match(limit.stderr, /--limit 4Mi is below --size 8Mi/);
    assert.equal((await csictl("history", "csictl-limit")).code, 1, "nothing was sent");
  });

  test("volume expand to a smaller size says that nothing changed", async () => {
    const { volume } = await json<Volume>("volume", "create", "csictl-shrink", "--size", "8Mi");
    const r = await csictl("volume", "expand", volume.volumeId, "--size", "4Mi");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /is 8 MiB already, more than the 4 MiB asked: a volume never shrinks, nothing changed/);
    assert.match(r.stdout, /^SIZE\s+8 MiB/m);
  });

  test("log purge-foreign: the summary on stderr, stdout only the table (none here), --no-headers honoured", async () => {
    const r = await csictl("--no-headers", "log", "purge-foreign");
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "");
    assert.match(r.stderr, /^cluster local, request csictl-\S+: 0 to remove \(dry run: nothing touched; --apply to act\); no foreign records$/m);
  });

  test("help shows defaults unquoted and no empty list default", async () => {
    const r = await csictl("log", "purge-foreign", "--help");
    assert.match(r.stdout, /\(default: 30000\)/);
    assert.doesNotMatch(r.stdout, /default: \[\]|default: "30000"/);
  });
});
