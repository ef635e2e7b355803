/**
 * csictl end to end: the bin run as a child process (as `npx csictl` runs it) against a real
 * `npm start` stack, found through the stack's run/stack.json. Help on every command, usage
 * errors (exit 2, one line, no stack trace), unreachable servers (exit 3), the volume round trip,
 * a volume's history with its node's device reports, --follow, FLUSHALL + rebuild restoring the
 * projection key by key, clusters (replicas, lag) and nodes (healthy/expected), replay --at
 * between two steps, verify / gc (dry run, --apply) of a planted leaked image.
 *
 * The journal's periodic catch-up is off (CATCHUP_EVERY_MS=0), so the projection's watermark
 * moves only with a rebuild and the lag `clusters` shows is exact.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { access, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { keysFor, RedisStore } from "@csi/journal/operator";
import { CSICTL_BIN, ROOT, runStack, tempDir, withoutServerEnv } from "@csi/testkit";
import { Redis } from "ioredis";

const BIN = CSICTL_BIN;
const MiB = 1024 * 1024;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let runDir = "";
const cleanups: (() => Promise<void>)[] = [];

/** csictl with `args`, finding the stack on its own (RUN_DIR names the stack's run directory, as for npm start). */
function csictl(args: string[], env: NodeJS.ProcessEnv = { RUN_DIR: runDir }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: ROOT, env: { ...withoutServerEnv(process.env), ...env }, encoding: "utf8" }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** csictl --json that must succeed: its parsed output. */
async function json<T = Record<string, unknown>>(...args: string[]): Promise<T> {
  const r = await csictl(["--json", ...args]);
  assert.equal(r.code, 0, `csictl ${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

/** A failure as csictl must report it: the exit status, and one line on stderr without a stack trace. */
function assertOneLine(r: Run, code: number, message: RegExp) {
  assert.equal(r.code, code, `exit ${r.code}, stderr: ${r.stderr}`);
  assert.equal(r.stdout, "");
  const lines = r.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `one line, got:\n${r.stderr}`);
  assert.match(lines[0] as string, /^csictl: /);
  assert.match(lines[0] as string, message);
  assert.doesNotMatch(r.stderr, /\n\s+at |Error:/, "no stack trace");
}

let stack: { natsUrl: string; redisUrl: string; nodeId: string; clustersFile: string; dataDir: string };

before(async () => {
  const s = await runStack(cleanups, { CATCHUP_EVERY_MS: "0" });
  runDir = s.runDir;
  stack = JSON.parse(await readFile(path.join(runDir, "stack.json"), "utf8"));
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe("the command line", () => {
  test("--help of every command exits 0 and shows its usage", async () => {
    const commands = [
      [],
      ["volume"],
      ["volume", "create"],
      ["volume", "get"],
      ["volume", "list"],
      ["volume", "expand"],
      ["volume", "delete"],
      ["snapshot"],
      ["snapshot", "create"],
      ["snapshot", "list"],
      ["snapshot", "delete"],
      ["call"],
      ["history"],
      ["rebuild"],
      ["clusters"],
      ["nodes"],
      ["log"],
      ["log", "export"],
      ["log", "import"],
      ["log", "purge-foreign"],
    ];
    const runs = await Promise.all(commands.map((c) => csictl([...c, "--help"])));
    runs.forEach((r, i) => {
      const name = ["csictl", ...(commands[i] as string[])].join(" ");
      assert.equal(r.code, 0, `${name} --help: ${r.stderr}`);
      assert.ok(r.stdout.startsWith(`Usage: ${name} `), `${name} --help:\n${r.stdout}`);
    });
    assert.match(runs[0]?.stdout ?? "", /Exit status: 0 ok, 1 .*, 2 usage, 3 /);
  });

  test("user errors exit 2 with one line and no stack trace, before anything is sent", async () => {
    const cases: [string[], RegExp][] = [
      [["volum"], /unknown command 'volum' \(Did you mean volume\?\)/],
      [["volume", "list", "--bogus"], /unknown option '--bogus'/],
      [["volume", "create", "pvc-x"], /required option '--size <size>' not specified/],
      [["volume", "create", "pvc-x", "--size", "3 parsecs"], /not a size: "3 parsecs"/],
      [["volume", "create", "pvc-x", "--size", "8Mi", "--mode", "everyone"], /--mode <mode>' argument 'everyone' is invalid/],
      [["volume", "get", "not-an-id"], /not a volume id: too short/],
      [["history", "0001-0005-local-0000000000000001-nope"], /malformed|bad|length/],
      [["call", "Controller.NoSuchMethod"], /Controller has no method "NoSuchMethod"/],
      [["call", "Controller.ListVolumes", "{oops"], /the request is not JSON/],
      [["--timeout", "soon", "nodes"], /--timeout must be a positive number/],
      [["--cluster", "atlantis", "rebuild"], /unknown cluster "atlantis"; known: local/],
      [["log", "purge-foreign", "--seq", "12x"], /--seq must be a stream sequence above 0, got "12x"/],
    ];
    const runs = await Promise.all(cases.map(([args]) => csictl(args)));
    runs.forEach((r, i) => {
      assertOneLine(r, 2, (cases[i] as [string[], RegExp])[1]);
    });
  });

  test("no stack to find, or a server that does not answer: exit 3 with one line naming it", async () => {
    const empty = await tempDir("csictl-nostack-");
    cleanups.push(() => rm(empty, { recursive: true, force: true }));
    assertOneLine(
      await csictl(["volume", "list"], { RUN_DIR: empty }),
      3,
      /no controller endpoint to connect to: no .*stack\.json \(is `npm start` running\?\); or pass --endpoint/,
    );
    assertOneLine(await csictl(["--nats", "nats://127.0.0.1:1", "nodes"], { RUN_DIR: empty }), 3, /cannot reach NATS at nats:\/\/127\.0\.0\.1:1/);
    assertOneLine(await csictl(["--endpoint", `unix://${empty}/none.sock`, "volume", "list"], { RUN_DIR: empty }), 3, /cannot reach the CSI endpoint/);
  });
});

describe("volumes, history, rebuild, clusters, nodes on a running stack", () => {
  test("volume create / get / list / expand / delete round trip (--json)", async () => {
    const created = await json<{ requestId: string; volume: { volume_id: string; capacity_bytes: string } }>(
      "volume",
      "create",
      "csictl-rt",
      "--size",
      "4Mi",
      "--request-id",
      "rt-create",
    );
    const id = created.volume.volume_id;
    assert.equal(created.requestId, "rt-create");
    assert.equal(created.volume.capacity_bytes, String(4 * MiB));
    const again = await json<typeof created>("volume", "create", "csictl-rt", "--size", "4Mi");
    assert.equal(again.volume.volume_id, id, "create is idempotent by name");
    const got = await json<{ volume: { volume_id: string }; status: { published_node_ids: string[] } }>("volume", "get", id);
    assert.equal(got.volume.volume_id, id);
    assert.deepEqual(got.status.published_node_ids, []);
    const listed = await json<{ entries: { volume: { volume_id: string } }[] }>("volume", "list");
    assert.ok(listed.entries.some((e) => e.volume.volume_id === id));
    const grown = await json<{ capacity_bytes: string }>("volume", "expand", id, "--size", "8Mi");
    assert.equal(grown.capacity_bytes, String(8 * MiB));
    const human = await csictl(["volume", "get", id]);
    assert.equal(human.code, 0);
    assert.match(human.stdout, /^ID\s+0001-/m);
    assert.match(human.stdout, /^SIZE\s+8 MiB \(8388608 bytes\)$/m);
    const deleted = await json<{ requestId: string; deleted: string }>("volume", "delete", id, "--request-id", "rt-delete");
    assert.deepEqual(deleted, { requestId: "rt-delete", deleted: id });
    assert.equal((await csictl(["volume", "delete", id])).code, 0, "delete is idempotent");
    assertOneLine(await csictl(["volume", "get", id]), 1, /^csictl: NOT_FOUND: /);
  });

  test("history of a volume id: every step in order with its request id, the node's device reports with the node as actor", async () => {
    const step = async (requestId: string, ...args: string[]) => json(...args, "--request-id", requestId);
    const { volume } = await json<{ volume: { volume_id: string } }>(
      "volume",
      "create",
      "csictl-hist",
      "--size",
      "8Mi",
      "--fs",
      "ext4",
      "--request-id",
      "h-create",
    );
    const id = volume.volume_id;
    await step("h-expand", "volume", "expand", id, "--size", "12Mi");
    const snap = await json<{ snapshot: { snapshot_id: string } }>("snapshot", "create", "csictl-hist-snap", "--source", id, "--request-id", "h-snap");
    const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" }, mount: { fs_type: "ext4" } };
    const pub = await step(
      "h-publish",
      "call",
      "Controller.ControllerPublishVolume",
      JSON.stringify({ volume_id: id, node_id: stack.nodeId, volume_capability: cap }),
    );
    const staging = path.join(path.dirname(runDir), "staging", "hist");
    await mkdir(staging, { recursive: true });
    const publishContext = (pub as { publish_context: Record<string, string> }).publish_context;
    const stageReq = { volume_id: id, staging_target_path: staging, volume_capability: cap, publish_context: publishContext };
    await step("h-stage", "call", "Node.NodeStageVolume", JSON.stringify(stageReq));
    await step("h-unstage", "call", "Node.NodeUnstageVolume", JSON.stringify({ volume_id: id, staging_target_path: staging }));
    await step("h-unpublish", "call", "Controller.ControllerUnpublishVolume", JSON.stringify({ volume_id: id, node_id: stack.nodeId }));
    await step("h-snapdel", "snapshot", "delete", snap.snapshot.snapshot_id);
    await step("h-delete", "volume", "delete", id);

    type Row = { seq: number; type: string; requestId: string; actor: string; change: string };
    // The node's reports reach the log through the report queue: wait for the last one (bounded).
    let rows: Row[] = [];
    for (let i = 0; i < 50; i++) {
      rows = ((await json<{ events: Row[] }[]>("history", id))[0]?.events ?? []) as Row[];
      if (rows.some((r) => r.type === "DeviceStateReported" && /^detached/.test(r.change))) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const seqs = rows.map((r) => r.seq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      "in log order",
    );
    const journalSteps = rows.filter((r) => r.type !== "DeviceStateReported").map((r) => [r.type, r.requestId]);
    assert.deepEqual(journalSteps, [
      ["NameReserved", "h-create"],
      ["VolumeReserved", "h-create"],
      ["VolumeCreated", "h-create"],
      ["VolumeExpanded", "h-expand"],
      ["VolumeClaimed", "h-publish"],
      ["VolumeUnclaimed", "h-unpublish"],
      ["VolumeDeleted", "h-delete"],
      ["NameReleased", "h-delete"],
    ]);
    const reports = rows.filter((r) => r.type === "DeviceStateReported");
    assert.deepEqual(
      reports.map((r) => [r.change.split(" ")[0], r.requestId]),
      [
        ["attached", "h-stage"],
        ["staged", "h-stage"],
        ["unstaged", "h-unstage"],
        ["detached", "h-unstage"],
      ],
    );
    assert.ok(
      reports.every((r) => r.actor === `node ${stack.nodeId} (grpc)`),
      JSON.stringify(reports),
    );
    const stagedAt = rows.findIndex((r) => /^staged/.test(r.change));
    assert.ok(stagedAt > rows.findIndex((r) => r.type === "VolumeClaimed") && stagedAt < rows.findIndex((r) => r.type === "VolumeUnclaimed"));
    // By request name: the same story; as a table for people.
    const byName = await json<{ events: Row[] }[]>("history", "csictl-hist");
    assert.deepEqual(
      byName[0]?.events.map((r) => r.seq),
      seqs,
    );
    const table = await csictl(["history", id]);
    assert.match(table.stdout, /^SEQ\s+TIME\s+EVENT\s+REQUEST\s+ACTOR\s+CHANGE$/m);
    assert.match(table.stdout, /VolumeExpanded\s+h-expand\s+journal \S+\s+size → 12 MiB/);
    assertOneLine(await csictl(["history", "never-named-this"]), 1, /NOT_FOUND: no events of "never-named-this"/);
  });

  test("history --follow prints new events of a name as they land, until Ctrl-C", async () => {
    const child: ChildProcess = spawn(process.execPath, [BIN, "--json", "history", "csictl-follow", "--follow"], {
      cwd: ROOT,
      env: { ...withoutServerEnv(process.env), RUN_DIR: runDir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout?.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr?.on("data", (b: Buffer) => (err += b.toString()));
    const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
    cleanups.push(async () => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    const until = async (ok: () => boolean, what: string) => {
      for (let i = 0; i < 100 && !ok(); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(ok(), `${what}; stdout:\n${out}\nstderr:\n${err}`);
    };
    await until(() => err.includes("Ctrl-C to stop"), "following");
    await json("volume", "create", "csictl-follow", "--size", "4Mi", "--request-id", "f-create");
    const types = () =>
      out
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { type: string }).type);
    await until(() => types().includes("VolumeCreated"), "the create's events are shown");
    assert.deepEqual(types(), ["NameReserved", "VolumeReserved", "VolumeCreated"]);
    child.kill("SIGINT");
    assert.equal(await exited, 0);
  });

  test("FLUSHALL, then rebuild: the projection is back key by key; clusters shows the replica and the lag", async () => {
    const redis = new Redis(stack.redisUrl);
    cleanups.push(async () => redis.disconnect());
    const store = new RedisStore(redis, keysFor("local", "default"));
    const dump = async () => store.dumpProjection(await store.projectionKeys());
    const { volume } = await json<{ volume: { volume_id: string } }>("volume", "create", "csictl-rebuild", "--size", "4Mi");
    await json("snapshot", "create", "csictl-rebuild-snap", "--source", volume.volume_id);
    const before = await dump();
    assert.ok(before.size > 0);
    await redis.flushall();
    const rebuilt = await json<{ cluster: string; replayedTo: number; volumes: number; snapshots: number }>("rebuild");
    assert.equal(rebuilt.cluster, "local");
    assert.deepEqual(await dump(), before, "every projection key as it was");
    assert.equal(rebuilt.snapshots, 1);
    const listed = await json<{ entries: { volume: { volume_id: string } }[] }>("volume", "list");
    assert.equal(rebuilt.volumes, listed.entries.length);
    assert.ok(
      listed.entries.some((e) => e.volume.volume_id === volume.volume_id),
      "the volume is listed again",
    );

    type Cluster = { cluster: string; replicas: number; logSeq: number; applied: number; lag: number; projection: string };
    const [fresh] = await json<Cluster[]>("clusters");
    assert.deepEqual(
      { ...fresh, journals: undefined },
      { cluster: "local", replicas: 1, logSeq: rebuilt.replayedTo, applied: rebuilt.replayedTo, lag: 0, projection: "complete", ok: true, journals: undefined },
    );
    // Three events (NameReserved, VolumeReserved, VolumeCreated) the watermark has not passed: no catch-up runs.
    await json("volume", "create", "csictl-lag", "--size", "4Mi");
    const [lagging] = await json<Cluster[]>("clusters");
    assert.equal(lagging?.lag, 3);
    assert.equal(lagging?.logSeq, rebuilt.replayedTo + 3);
    const human = await csictl(["clusters"]);
    assert.match(human.stdout, /^local\s+1\s+\d+\s+\d+\s+3\s+complete\s/m);
  });

  test("nodes: the stack's node-agent is healthy, 1/1", async () => {
    const r = await json<{ healthy: number; expected: number; nodes: { nodeId: string; healthy: boolean; ageMs: number }[] }>("nodes");
    assert.equal(r.expected, 1);
    assert.equal(r.healthy, 1);
    assert.equal(r.nodes[0]?.nodeId, stack.nodeId);
    assert.ok((r.nodes[0]?.ageMs ?? Number.POSITIVE_INFINITY) < 60_000);
    const human = await csictl(["nodes"]);
    assert.equal(human.code, 0);
    assert.match(human.stdout, /^1\/1 healthy/m);
  });
});

describe("replay, verify, gc on a running stack", () => {
  type Cluster = { logSeq: number };
  const logSeq = async () => ((await json<Cluster[]>("clusters"))[0] as Cluster).logSeq;
  type Replay = { upTo: { seq: number }; entries: { uuid: string; status: string; volume?: { sizeBytes: number } }[] };

  test("replay --at a sequence between create and expand shows the earlier size, for the volume and for the cluster", async () => {
    const { volume } = await json<{ volume: { volume_id: string } }>("volume", "create", "csictl-replay", "--size", "4Mi");
    const id = volume.volume_id;
    const afterCreate = await logSeq();
    await json("volume", "expand", id, "--size", "8Mi");
    const then = await json<Replay>("replay", "--at", String(afterCreate), id);
    assert.equal(then.upTo.seq, afterCreate);
    assert.deepEqual(
      then.entries.map((e) => [e.status, e.volume?.sizeBytes]),
      [["ready", 4 * MiB]],
    );
    const now = await json<Replay>("replay", "--at", String(await logSeq()), id);
    assert.equal(now.entries[0]?.volume?.sizeBytes, 8 * MiB);
    assert.deepEqual((await json<Replay>("replay", "--at", "2000-01-01T00:00:00Z", id)).entries, [], "before it existed");
    const byTime = await json<Replay>("replay", "--at", new Date().toISOString());
    assert.equal(byTime.entries.find((e) => e.volume?.sizeBytes === 8 * MiB && id.endsWith(e.uuid))?.status, "ready", "the cluster by time");

    const cluster = await csictl(["replay", "--at", String(afterCreate)]);
    assert.equal(cluster.code, 0, cluster.stderr);
    assert.match(cluster.stdout, new RegExp(`^cluster local at sequence ${afterCreate} \\(.*\\): \\d+ live aggregates$`, "m"));
    assert.match(cluster.stdout, /^KIND\s+ID\s+NAME\s+STATUS\s+SIZE\s+NODES\s+SEQ$/m);
    assert.match(cluster.stdout, new RegExp(`^volume\\s+${id}\\s+csictl-replay\\s+ready\\s+4 MiB\\s`, "m"));
    assertOneLine(await csictl(["replay", "--at", "yesterday", id]), 2, /--at must be a stream sequence or an ISO time/);
    assertOneLine(await csictl(["replay", id]), 2, /required option '--at <point>'/);
    assertOneLine(await csictl(["replay", "--at", "1", "csictl-replay"]), 2, /not a request name/);
  });

  test("verify finds a planted leaked image (exit 1); gc lists it and leaves it; gc --apply removes it; verify is clean (exit 0)", async () => {
    const poolDir = path.join(stack.dataDir, "pools", "local", "default");
    const image = `csi-vol-${randomUUID()}`;
    const file = path.join(poolDir, `${image}.img`);
    await writeFile(file, Buffer.alloc(4096));
    cleanups.push(() => rm(file, { force: true }));
    type Verify = { ok: boolean; counts: Record<string, number>; findings: { type: string; imageName?: string }[] };
    const found = await csictl(["--json", "verify"]);
    assert.equal(found.code, 1, found.stderr);
    const v = JSON.parse(found.stdout) as Verify;
    assert.equal(v.ok, false);
    assert.deepEqual(v.counts, { leakedImages: 1, orphanedReservations: 0, missingImages: 0, projectionDrift: 0, staleClaims: 0, foreignRecords: 0 });
    assert.deepEqual(
      v.findings.map((f) => [f.type, f.imageName]),
      [["leakedImage", image]],
    );
    const human = await csictl(["verify"]);
    assert.equal(human.code, 1);
    assert.match(human.stdout, new RegExp(`^leakedImage\\s+default/${image}\\s+4 KiB, no reservation owns it$`, "m"));
    assert.match(human.stdout, /^LEAKED IMAGES\s+1$/m);
    assert.match(human.stdout, /^1 found$/m);

    type Gc = { apply: boolean; actions: { type: string; imageName: string; outcome: string }[] };
    const dry = await json<Gc>("gc", "--older-than", "1h");
    assert.deepEqual([dry.apply, dry.actions.map((a) => [a.type, a.imageName, a.outcome])], [false, [["removeLeakedImage", image, "planned"]]]);
    const dryHuman = await csictl(["gc"]);
    assert.equal(dryHuman.code, 0);
    assert.match(dryHuman.stdout, new RegExp(`^removeLeakedImage\\s+default/${image}\\s+volume ${image.slice(8)}\\s+planned\\s+-$`, "m"));
    assert.match(dryHuman.stdout, /1 planned \(dry run: nothing touched; --apply to act\)/);
    await access(file); // a dry run leaves it

    const applied = await csictl(["gc", "--apply", "--request-id", "gc-cli"]);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, new RegExp(`^removeLeakedImage\\s+default/${image}\\s+volume ${image.slice(8)}\\s+done\\s+\\d+$`, "m"));
    assert.match(applied.stdout, /request gc-cli: 1 done/);
    await assert.rejects(access(file), "removed");

    const clean = await csictl(["verify"]);
    assert.equal(clean.code, 0, clean.stdout);
    assert.match(clean.stdout, /^clean$/m);
    assertOneLine(await csictl(["gc", "--older-than", "soon"]), 2, /not a duration: "soon"/);
  });

  test("--help of replay, verify and gc exits 0", async () => {
    for (const c of ["replay", "verify", "gc"]) {
      const r = await csictl([c, "--help"]);
      assert.equal(r.code, 0);
      assert.ok(r.stdout.startsWith(`Usage: csictl ${c} `), r.stdout);
    }
  });
});
