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
import { keysFor, RedisStore } from "@csi/journal/redis";
import { CSICTL_BIN, ROOT, runStack, tempDir, withoutServerEnv } from "@csi/testkit";
import { Redis } from "ioredis";
import { parse as parseYaml } from "yaml";

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
    // The global options in every subcommand's help, as kubectl shows its global flags.
    runs.slice(1).forEach((r, i) => {
      assert.match(r.stdout, /^Global Options:$/m, `csictl ${(commands[i + 1] as string[]).join(" ")} --help`);
      assert.match(r.stdout, /-o, --output <format>/);
      assert.match(r.stdout, /--cluster <id>/);
    });
  });

  test("user errors exit 2 with one line and no stack trace, before anything is sent", async () => {
    const cases: [string[], RegExp][] = [
      [["volum"], /unknown command 'volum' \(Did you mean volume\?\)/],
      [["volume", "list", "--bogus"], /unknown option '--bogus'/],
      [["volume", "create", "pvc-x"], /required option '--size <size>' not specified/],
      [["volume", "create", "pvc-x", "--size", "3 parsecs"], /not a size: "3 parsecs"/],
      [["volume", "create", "pvc-x", "--size", "8Mi", "--mode", "everyone"], /--mode <mode>' argument 'everyone' is invalid/],
      [["history", "0001-0005-local-0000000000000001-nope"], /malformed|bad|length/],
      [["call", "Controller.NoSuchMethod"], /Controller has no method "NoSuchMethod"/],
      [["call", "Controller.ListVolumes", "{oops"], /the request is not JSON/],
      [["--timeout", "soon", "nodes"], /--timeout must be a positive number/],
      [["--cluster", "atlantis", "rebuild"], /unknown cluster "atlantis"; known: local/],
      [["log", "purge-foreign", "--seq", "12x"], /--seq must be a stream sequence above 0, got "12x"/],
      [["-o", "table", "nodes"], /'-o, --output <format>' argument 'table' is invalid/],
      [["--json", "-o", "yaml", "nodes"], /--json is -o json: not with -o yaml/],
      [["-o", "name", "verify"], /-o name: verify prints no object names/],
      [["volume", "create", "--size", "1Mi"], /no names: give them as arguments, or one a line with -f FILE/],
      [["volume", "create", "csictl-dup", "csictl-b", "csictl-dup", "--size", "1Mi"], /argument 3: "csictl-dup" is given twice \(first at argument 1\)/],
      [["volume", "create", "-f", "/nonexistent/names", "--size", "1Mi"], /cannot read \/nonexistent\/names: ENOENT/],
      [["volume", "create", "a", "b", "--size", "1Mi", "--concurrency", "0"], /--concurrency must be 1 to 256/],
      [["call", "Identity.Probe", "[]"], /the request is not a csi.v1.ProbeRequest: .* JSON object, not an array/],
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
    const created = await json<{ requestId: string; volume: { volumeId: string; capacityBytes: string } }>(
      "volume",
      "create",
      "csictl-rt",
      "--size",
      "4Mi",
      "--request-id",
      "rt-create",
    );
    const id = created.volume.volumeId;
    assert.equal(created.requestId, "rt-create");
    assert.equal(created.volume.capacityBytes, String(4 * MiB));
    const again = await json<typeof created>("volume", "create", "csictl-rt", "--size", "4Mi");
    assert.equal(again.volume.volumeId, id, "create is idempotent by name");
    const got = await json<{ volume: { volumeId: string }; status: { publishedNodeIds: string[] } }>("volume", "get", id);
    assert.equal(got.volume.volumeId, id);
    assert.deepEqual(got.status.publishedNodeIds, []);
    const listed = await json<{ items: { volume: { volumeId: string } }[] }>("volume", "list");
    assert.ok(listed.items.some((e) => e.volume.volumeId === id));
    const grown = await json<{ capacityBytes: string }>("volume", "expand", id, "--size", "8Mi");
    assert.equal(grown.capacityBytes, String(8 * MiB));
    const human = await csictl(["volume", "get", id]);
    assert.equal(human.code, 0);
    assert.match(human.stdout, /^ID\s+0001-/m);
    assert.match(human.stdout, /^SIZE\s+8 MiB \(8388608 bytes\)$/m);
    const deleted = await json<{ requestId: string; deleted: boolean }>("volume", "delete", id, "--request-id", "rt-delete");
    assert.deepEqual(deleted, { volumeId: id, deleted: true, requestId: "rt-delete" });
    assertOneLine(await csictl(["volume", "get", id]), 1, /^csictl: NOT_FOUND: /);
  });

  test("history of a volume id: every step in order with its request id, the node's device reports with the node as actor", async () => {
    const step = async (requestId: string, ...args: string[]) => json(...args, "--request-id", requestId);
    const { volume } = await json<{ volume: { volumeId: string } }>(
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
    const id = volume.volumeId;
    await step("h-expand", "volume", "expand", id, "--size", "12Mi");
    const snap = await json<{ snapshot: { snapshotId: string } }>("snapshot", "create", "csictl-hist-snap", "--source", id, "--request-id", "h-snap");
    const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" }, mount: { fs_type: "ext4" } };
    const pub = await step(
      "h-publish",
      "call",
      "Controller.ControllerPublishVolume",
      JSON.stringify({ volume_id: id, node_id: stack.nodeId, volume_capability: cap }),
    );
    const staging = path.join(path.dirname(runDir), "staging", "hist");
    await mkdir(staging, { recursive: true });
    const publishContext = (pub as { publishContext: Record<string, string> }).publishContext;
    const stageReq = { volume_id: id, staging_target_path: staging, volume_capability: cap, publish_context: publishContext };
    await step("h-stage", "call", "Node.NodeStageVolume", JSON.stringify(stageReq));
    await step("h-unstage", "call", "Node.NodeUnstageVolume", JSON.stringify({ volume_id: id, staging_target_path: staging }));
    await step("h-unpublish", "call", "Controller.ControllerUnpublishVolume", JSON.stringify({ volume_id: id, node_id: stack.nodeId }));
    await step("h-snapdel", "snapshot", "delete", snap.snapshot.snapshotId);
    await step("h-delete", "volume", "delete", id);

    type Row = { seq: number; type: string; requestId: string; actor: string; change: string };
    // The node's reports reach the log through the report queue: wait for the last one (bounded).
    let rows: Row[] = [];
    for (let i = 0; i < 50; i++) {
      rows = ((await json<{ items: { events: Row[] }[] }>("history", id)).items[0]?.events ?? []) as Row[];
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
      ["NameReleased", "h-delete"],
      ["VolumeDeleted", "h-delete"],
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
    const byName = (await json<{ items: { events: Row[] }[] }>("history", "csictl-hist")).items;
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
    const { volume } = await json<{ volume: { volumeId: string } }>("volume", "create", "csictl-rebuild", "--size", "4Mi");
    await json("snapshot", "create", "csictl-rebuild-snap", "--source", volume.volumeId);
    const before = await dump();
    assert.ok(before.size > 0);
    await redis.flushall();
    const rebuilt = await json<{ cluster: string; replayedTo: number; volumes: number; snapshots: number }>("rebuild");
    assert.equal(rebuilt.cluster, "local");
    assert.deepEqual(await dump(), before, "every projection key as it was");
    assert.equal(rebuilt.snapshots, 1);
    const listed = await json<{ items: { volume: { volumeId: string } }[] }>("volume", "list");
    assert.equal(rebuilt.volumes, listed.items.length);
    assert.ok(
      listed.items.some((e) => e.volume.volumeId === volume.volumeId),
      "the volume is listed again",
    );

    type Cluster = { cluster: string; replicas: number; logSeq: number; applied: number; lag: number; projection: string };
    const [fresh] = (await json<{ items: Cluster[] }>("clusters")).items;
    assert.deepEqual(
      { ...fresh, journals: undefined },
      { cluster: "local", replicas: 1, logSeq: rebuilt.replayedTo, applied: rebuilt.replayedTo, lag: 0, projection: "complete", ok: true, journals: undefined },
    );
    // Three events (NameReserved, VolumeReserved, VolumeCreated) the watermark has not passed: no catch-up runs.
    await json("volume", "create", "csictl-lag", "--size", "4Mi");
    const [lagging] = (await json<{ items: Cluster[] }>("clusters")).items;
    assert.equal(lagging?.lag, 3);
    assert.equal(lagging?.logSeq, rebuilt.replayedTo + 3);
    const human = await csictl(["clusters"]);
    assert.match(human.stdout, /^local\s+1\s+\d+\s+\d+\s+3\s+complete\s/m);
  });

  test("nodes: the stack's node-agent is healthy, 1/1", async () => {
    const r = await json<{ healthy: number; expected: number; items: { nodeId: string; healthy: boolean; ageMs: number }[] }>("nodes");
    assert.equal(r.expected, 1);
    assert.equal(r.healthy, 1);
    assert.equal(r.items[0]?.nodeId, stack.nodeId);
    assert.ok((r.items[0]?.ageMs ?? Number.POSITIVE_INFINITY) < 60_000);
    const human = await csictl(["nodes"]);
    assert.equal(human.code, 0);
    assert.match(human.stderr, /^1\/1 healthy/m);
  });
});

describe("replay, verify, gc on a running stack", () => {
  type Cluster = { logSeq: number };
  const logSeq = async () => ((await json<{ items: Cluster[] }>("clusters")).items[0] as Cluster).logSeq;
  type Replay = { upTo: { seq: number }; items: { uuid: string; status: string; volume?: { sizeBytes: number } }[] };

  test("replay --at a sequence between create and expand shows the earlier size, for the volume and for the cluster", async () => {
    const { volume } = await json<{ volume: { volumeId: string } }>("volume", "create", "csictl-replay", "--size", "4Mi");
    const id = volume.volumeId;
    const afterCreate = await logSeq();
    await json("volume", "expand", id, "--size", "8Mi");
    const then = await json<Replay>("replay", "--at", String(afterCreate), id);
    assert.equal(then.upTo.seq, afterCreate);
    assert.deepEqual(
      then.items.map((e) => [e.status, e.volume?.sizeBytes]),
      [["ready", 4 * MiB]],
    );
    const now = await json<Replay>("replay", "--at", String(await logSeq()), id);
    assert.equal(now.items[0]?.volume?.sizeBytes, 8 * MiB);
    assert.deepEqual((await json<Replay>("replay", "--at", "2000-01-01T00:00:00Z", id)).items, [], "before it existed");
    const byTime = await json<Replay>("replay", "--at", new Date().toISOString());
    assert.equal(byTime.items.find((e) => e.volume?.sizeBytes === 8 * MiB && id.endsWith(e.uuid))?.status, "ready", "the cluster by time");

    const cluster = await csictl(["replay", "--at", String(afterCreate)]);
    assert.equal(cluster.code, 0, cluster.stderr);
    assert.match(cluster.stderr, new RegExp(`^cluster local at sequence ${afterCreate}: (1 live aggregate|\\d+ live aggregates)$`, "m"));
    assert.match(cluster.stdout, /^KIND\s+ID\s+NAME\s+STATUS\s+SIZE\s+NODES\s+SEQ$/m);
    assert.match(cluster.stdout, new RegExp(`^volume\\s+${id}\\s+csictl-replay\\s+ready\\s+4 MiB\\s`, "m"));
    assertOneLine(await csictl(["replay", "--at", "yesterday", id]), 2, /--at must be a stream sequence or an ISO time/);
    assertOneLine(await csictl(["replay", id]), 2, /required option '--at <point>'/);
    // A live volume's request name names it (issue 37).
    assert.deepEqual((await json<Replay>("replay", "--at", String(afterCreate), "csictl-replay")).items, then.items);
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
    assert.match(human.stderr, /^1 found$/m);
    assert.doesNotMatch(human.stdout, /found/, "the summary is a note, on stderr");

    type Gc = { apply: boolean; actions: { type: string; imageName: string; outcome: string }[] };
    // Made just now: younger than the grace (--older-than, 15 min by default), kept; --older-than 0 plans its removal.
    const young = await json<Gc>("gc", "--older-than", "1h");
    assert.deepEqual([young.apply, young.actions.map((a) => [a.type, a.imageName, a.outcome])], [false, [["removeLeakedImage", image, "skipped"]]]);
    const dry = await json<Gc>("gc", "--older-than", "0");
    assert.deepEqual([dry.apply, dry.actions.map((a) => [a.type, a.imageName, a.outcome])], [false, [["removeLeakedImage", image, "planned"]]]);
    const dryHuman = await csictl(["gc", "--older-than", "0"]);
    assert.equal(dryHuman.code, 0);
    assert.match(dryHuman.stdout, new RegExp(`^removeLeakedImage\\s+default/${image}\\s+volume ${image.slice(8)}\\s+planned\\s+-$`, "m"));
    assert.match(dryHuman.stderr, /1 planned \(dry run: nothing touched; --apply to act\)/);
    await access(file); // a dry run leaves it

    const applied = await csictl(["gc", "--apply", "--older-than", "0", "--request-id", "gc-cli"]);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, new RegExp(`^removeLeakedImage\\s+default/${image}\\s+volume ${image.slice(8)}\\s+done\\s+\\d+$`, "m"));
    assert.match(applied.stderr, /request gc-cli, older than 0s: 1 done/);
    await assert.rejects(access(file), "removed");

    const clean = await csictl(["verify"]);
    assert.equal(clean.code, 0, clean.stdout);
    assert.match(clean.stderr, /^clean$/m);
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

/** csictl with `input` on its stdin. */
function csictlWithInput(args: string[], input: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: ROOT, env: { ...withoutServerEnv(process.env), RUN_DIR: runDir }, encoding: "utf8", maxBuffer: 16 * MiB },
      (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end(input);
  });
}

/** csictl whose reader of stdout (or stderr) has gone away before it writes: its exit status and what it still said on the other stream. */
function csictlClosed(args: string[], closed: "stdout" | "stderr"): Promise<{ code: number | null; signal: string | null; other: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: { ...withoutServerEnv(process.env), RUN_DIR: runDir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child[closed].destroy(); // the read end closed at once: csictl's first write gets EPIPE
    let other = "";
    child[closed === "stdout" ? "stderr" : "stdout"].on("data", (b: Buffer) => (other += b.toString()));
    child.once("close", (code, signal) => resolve({ code, signal, other }));
  });
}

const ISO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

describe("issue 23: csictl behaves like kubectl", () => {
  /** A volume id of this cluster that no volume has. */
  const unknownId = (like: string) => `${like.slice(0, -36)}${randomUUID()}`;
  let someId = "";
  before(async () => {
    const created = await csictl(["volume", "create", "csictl-23", "--size", "4Mi"]);
    someId = /^ID\s+(\S+)$/m.exec(created.stdout)?.[1] ?? "";
    assert.ok(someId, created.stdout + created.stderr);
  });

  test("row 2: call takes proto3 JSON (lowerCamelCase and proto names) and refuses unknown fields at any depth, sending nothing", async () => {
    const camel = await csictl([
      "call",
      "Controller.ControllerModifyVolume",
      JSON.stringify({ volume_id: someId, mutableParameters: { readIOPS: "900" } }),
      "--request-id",
      "m-camel",
    ]);
    assert.equal(camel.code, 0, camel.stderr);
    const events = async () =>
      (await json<{ items: { events: { requestId: string; type: string; change: string }[] }[] }>("history", someId)).items[0]?.events ?? [];
    assert.deepEqual(
      (await events()).filter((e) => e.requestId === "m-camel").map((e) => [e.type, e.change]),
      [["VolumeModified", "limits → readIOPS=900"]],
      "the camelCase field reached the driver",
    );
    const unknown = await csictl([
      "call",
      "Controller.ControllerModifyVolume",
      JSON.stringify({ volumeId: someId, mutableParameters: { readIOPS: "100" }, bogus: 1 }),
      "--request-id",
      "m-bogus",
    ]);
    assertOneLine(unknown, 2, /the request is not a csi.v1.ControllerModifyVolumeRequest: .*key "bogus" is unknown/);
    assert.ok(!(await events()).some((e) => e.requestId === "m-bogus"), "nothing was sent");
    const nested = { name: "csictl-nested-unknown", volumeCapabilities: [{ accessMode: { mode: "SINGLE_NODE_WRITER", oops: true }, mount: {} }] };
    assertOneLine(
      await csictl(["call", "Controller.CreateVolume", JSON.stringify(nested)]),
      2,
      /csi.v1.VolumeCapability.AccessMode from JSON: key "oops" is unknown/,
    );
    assertOneLine(await csictl(["history", "csictl-nested-unknown"]), 1, /NOT_FOUND: no events/);
    // The answer is proto3 JSON too: lowerCamelCase names, int64 as a string.
    const got = JSON.parse((await csictl(["call", "Controller.ControllerGetVolume", JSON.stringify({ volumeId: someId })])).stdout);
    assert.equal(got.volume.volumeId, someId);
    assert.equal(got.volume.capacityBytes, String(4 * MiB));
  });

  test("row 3: a reader that goes away ends csictl quietly with 141 (as SIGPIPE does), on stdout and on stderr", async () => {
    const out = await csictlClosed(["volume", "list"], "stdout");
    assert.deepEqual(out, { code: 141, signal: null, other: "" }, "no stack trace, no 'Unhandled error event'");
    const err = await csictlClosed(["volume", "get", "not-an-id"], "stderr");
    assert.deepEqual(err, { code: 141, signal: null, other: "" });
  });

  test("row 5: an unknown --cluster is a usage error (exit 2, nothing sent) for every command", async () => {
    assertOneLine(await csictl(["--cluster", "nope", "volume", "create", "csictl-nope", "--size", "1Mi"]), 2, /unknown cluster "nope"; known: local/);
    assertOneLine(await csictl(["history", "csictl-nope"]), 1, /NOT_FOUND: no events/);
    for (const args of [["volume", "list"], ["volume", "get", someId], ["snapshot", "list"], ["nodes"], ["clusters"], ["verify"]]) {
      assertOneLine(await csictl(["--cluster", "nope", ...args]), 2, /unknown cluster "nope"/);
    }
    // A known cluster that the id does not belong to: also refused before anything is sent.
    const other = `${someId.slice(0, 5)}0005-other${someId.slice(15)}`;
    assertOneLine(await csictl(["--cluster", "local", "volume", "delete", other]), 2, /is of cluster other, not local/);
  });

  test("row 6: CONDITION shows only what the driver said: ListVolumes reports one for every volume (issue 37)", async () => {
    const human = await csictl(["volume", "list"]);
    assert.match(human.stdout, new RegExp(`^${someId}\\s+4 MiB\\s+local\\s+default\\s+-\\s+normal$`, "m"));
    const entry = (
      await json<{ items: { volume: { volumeId: string }; status?: { volumeCondition?: { abnormal: boolean; message: string } } }[] }>("volume", "list")
    ).items.find((e) => e.volume.volumeId === someId);
    assert.equal(entry?.status?.volumeCondition?.abnormal, false, "the driver reported a normal condition");
    assert.equal(entry?.status?.volumeCondition?.message, "image present", "its image looked for in the pool");
  });

  test("row 7: notes go to stderr; stdout holds only the table", async () => {
    const nodes = await csictl(["nodes"]);
    assert.deepEqual(nodes.stdout.trimEnd().split("\n").length, 2, `header and one node:\n${nodes.stdout}`);
    assert.match(nodes.stderr, /^1\/1 healthy/);
    const page = await csictl(["volume", "list", "--max-entries", "1"]);
    assert.equal(page.code, 0, page.stderr);
    assert.equal(page.stdout.trimEnd().split("\n").length, 2, page.stdout);
    assert.match(page.stderr, /^more: --starting-token \S+$/m);
    const replay = await csictl(["replay", "--at", "3"]);
    assert.doesNotMatch(replay.stdout, /^cluster /m);
    assert.match(replay.stderr, /^cluster local at sequence 3: (1 live aggregate|\d+ live aggregates)$/m);
    const gc = await csictl(["gc"]);
    assert.equal(gc.stdout, "", "nothing to collect: an empty stdout");
    assert.match(gc.stderr, /^cluster local, request csictl-\S+: nothing to collect$/m);
    const json = await csictl(["-o", "json", "nodes"]);
    assert.equal(json.stderr, "", "no notes with a format for programs");
  });

  test("row 8: deleting what does not exist is NotFound (exit 1) unless --ignore-not-found; the same for snapshots", async () => {
    const gone = unknownId(someId);
    assertOneLine(await csictl(["volume", "delete", gone]), 1, new RegExp(`^csictl: NOT_FOUND: volume ${gone} not found`));
    const ignored = await csictl(["volume", "delete", gone, "--ignore-not-found"]);
    assert.equal(ignored.code, 0, ignored.stderr);
    assert.equal(ignored.stdout, "");
    assert.deepEqual(await json("volume", "delete", gone, "--ignore-not-found"), { volumeId: gone, deleted: false, notFound: true });
    assertOneLine(await csictl(["snapshot", "delete", gone]), 1, /^csictl: NOT_FOUND: snapshot .* not found/);
    assert.equal((await csictl(["snapshot", "delete", gone, "--ignore-not-found"])).code, 0);
    // What exists is deleted, once: the second delete finds nothing.
    const snap = await json<{ snapshot: { snapshotId: string } }>("snapshot", "create", "csictl-23-snap", "--source", someId);
    assert.equal((await csictl(["snapshot", "delete", snap.snapshot.snapshotId])).code, 0);
    assertOneLine(await csictl(["snapshot", "delete", snap.snapshot.snapshotId]), 1, /NOT_FOUND/);
  });

  test("row 10: replay names the sequence asked, also for an id that has no event", async () => {
    const r = await csictl(["replay", "--at", "5", unknownId(someId)]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /^cluster local at sequence 5: [0-9a-f-]{36}: it did not exist yet at that point$/m);
    assert.equal((await json<{ at: number }>("replay", "--at", "5", unknownId(someId))).at, 5);
  });

  test("-o json|yaml|wide|name, --no-headers: one shape per kind, RFC 3339 times", async () => {
    const asJson = await csictl(["-o", "json", "volume", "get", someId]);
    assert.equal((await csictl(["--json", "volume", "get", someId])).stdout, asJson.stdout, "--json is -o json");
    const asYaml = await csictl(["-o", "yaml", "volume", "get", someId]);
    assert.deepEqual(parseYaml(asYaml.stdout), JSON.parse(asJson.stdout));
    // An item of the list has the shape get prints (what is in it is what each RPC said: ListVolumes checks no image).
    const listed = await json<{ items: { volume: { volumeId: string }; status: Record<string, unknown> }[] }>("volume", "list");
    const item = listed.items.find((e) => e.volume.volumeId === someId);
    const got = JSON.parse(asJson.stdout) as { volume: unknown; status: Record<string, unknown> };
    assert.deepEqual(item?.volume, got.volume);
    assert.deepEqual(Object.keys(item?.status ?? {}), ["publishedNodeIds", "volumeCondition"]);
    assert.deepEqual(Object.keys(got.status), ["publishedNodeIds", "volumeCondition"]);
    const names = (await csictl(["-o", "name", "volume", "list"])).stdout.trimEnd().split("\n");
    assert.ok(names.includes(someId));
    assert.ok(names.every((n) => /^0001-0005-local-/.test(n)));
    const wide = await csictl(["-o", "wide", "volume", "list"]);
    assert.match(wide.stdout, /^VOLUME ID\s+SIZE\s+CLUSTER\s+POOL\s+PUBLISHED ON\s+CONDITION\s+IMAGE\s+SOURCE\s+MESSAGE$/m);
    const bare = await csictl(["--no-headers", "volume", "list"]);
    assert.doesNotMatch(bare.stdout, /VOLUME ID/);
    assert.match(bare.stdout, new RegExp(`^${someId}\\s`, "m"));
    const snap = await json<{ snapshot: { creationTime: string; snapshotId: string } }>("snapshot", "create", "csictl-23-time", "--source", someId);
    assert.match(snap.snapshot.creationTime, ISO_TIME);
    const node = (await json<{ items: { lastHeartbeat: string }[] }>("nodes")).items[0];
    assert.match(node?.lastHeartbeat ?? "", ISO_TIME);
    assert.equal((await csictl(["-o", "name", "nodes"])).stdout, `${stack.nodeId}\n`);
  });

  test("bulk: names from stdin and -f FILE over one process; a result per name; exit 1 if any failed", async () => {
    await json("volume", "create", "csictl-bulk-taken", "--size", "1Mi"); // smaller than the batch asks: ALREADY_EXISTS
    const names = Array.from({ length: 20 }, (_, i) => `csictl-bulk-${i}`);
    const r = await csictlWithInput(
      ["-o", "json", "volume", "create", "-f", "-", "--size", "2Mi", "--concurrency", "8"],
      `# a comment\n${names.join("\n")}\n\ncsictl-bulk-taken\n`,
    );
    assert.equal(r.code, 1, r.stderr);
    type Item = { name: string; volume?: { volumeId: string }; error?: string };
    const { items } = JSON.parse(r.stdout) as { items: Item[] };
    assert.deepEqual(
      items.map((i) => i.name),
      [...names, "csictl-bulk-taken"],
      "in input order",
    );
    assert.ok(items.slice(0, 20).every((i) => i.volume && !i.error));
    assert.match(items[20]?.error ?? "", /^ALREADY_EXISTS: /);
    const listed = (await csictl(["-o", "name", "volume", "list"])).stdout.split("\n");
    for (const i of items.slice(0, 20)) assert.ok(listed.includes(i.volume?.volumeId ?? "?"), i.name);
    const file = path.join(path.dirname(runDir), "names.txt");
    await writeFile(file, "csictl-bulk-0\ncsictl-bulk-file\n");
    const table = await csictl(["volume", "create", "-f", file, "--size", "2Mi"]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^NAME\s+VOLUME ID\s+RESULT$/m);
    assert.match(table.stdout, /^csictl-bulk-file\s+0001-\S+\s+created$/m);
    assert.match(table.stdout, /^csictl-bulk-0\s+0001-\S+\s+exists \(already there\)$/m, "made by the first run");
    assert.match(table.stderr, /^1 created, 1 already there, 0 failed$/m);
  });
});

describe("completion", () => {
  /** What bash completes for the words typed (the last one being completed). */
  async function complete(shellScript: string, words: string[]): Promise<string[]> {
    const file = path.join(await tempDir("csictl-completion-"), "csictl.bash");
    cleanups.push(() => rm(path.dirname(file), { recursive: true, force: true }));
    await writeFile(file, shellScript);
    const words_ = words.map((w) => `'${w}'`).join(" ");
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        "bash",
        ["-c", `source ${file}; COMP_WORDS=(${words_}); COMP_CWORD=${words.length - 1}; _csictl; printf '%s\\n' "\${COMPREPLY[@]}"`],
        (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout)),
      ),
    );
    return out.split("\n").filter(Boolean).sort();
  }

  test("csictl completion bash completes commands, options (global ones too) and choices", async () => {
    const r = await csictl(["completion", "bash"]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(await complete(r.stdout, ["csictl", "volume", "cr"]), ["create"]);
    assert.deepEqual(await complete(r.stdout, ["csictl", "--cluster", "local", "sn"]), ["snapshot"], "an option's value is skipped");
    assert.deepEqual(await complete(r.stdout, ["csictl", "-o", ""]), ["json", "name", "wide", "yaml"]);
    assert.deepEqual(await complete(r.stdout, ["csictl", "volume", "create", "--mode", "multi-node-m"]), ["multi-node-multi-writer"]);
    const options = await complete(r.stdout, ["csictl", "volume", "delete", "--"]);
    for (const o of ["--ignore-not-found", "--request-id", "--output", "--no-headers", "--help"]) assert.ok(options.includes(o), o);
    assert.ok(!options.includes("--size"), "only the command's own and the global options");
    const zsh = await csictl(["completion", "zsh"]);
    assert.equal(zsh.code, 0);
    assert.match(zsh.stdout, /bashcompinit/);
    assertOneLine(await csictl(["completion", "fish"]), 2, /value 'fish' is invalid for argument 'shell'. Allowed choices are bash, zsh/);
  });
});
