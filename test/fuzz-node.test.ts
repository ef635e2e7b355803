/**
 * The node half of the fuzz suite: generated hostile requests for every Node RPC, over real
 * gRPC, against a real node-agent process (tools/testkit/src/node-stack.ts) with real volumes staged
 * and published on loop devices, and hostile node work over NATS.
 *
 * Inputs: oversized, control-character, NUL and unicode volume ids; relative, `..`, symlinked,
 * /proc, /sys, /dev, over-long and control-character paths; a foreign tmpfs (mounted here) and
 * regular files, non-empty directories and symlinks at targets; unknown enums, unsupported
 * filesystems and hostile mount flags; another image's name in the publish context; missing
 * fields; secrets in every request that has them.
 *
 * Every call must answer within a bound with a code its RPC documents (docs/node-agent.md),
 * never INTERNAL or UNKNOWN, with a short message free of control characters; the cases whose
 * answer the spec fixes (an unknown volume, a path that is not valid) get exactly that code.
 * The sandbox is built so that no generated call may legitimately change anything, so
 * afterwards: the sandbox tree, the mounts under the test's directory and at every path tried
 * outside it, and the loop devices are as before, and no log line holds a secret.
 *
 * Seeded (FUZZ_SEED, printed), so a failure can be replayed: FUZZ_SEED=<n> npm test -- fuzz-node
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, mkdir, readdir, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { hasControlCharacter, readMounts } from "@csi/node-agent/testing";
import { blockCap, FS_MIN_BYTES, loopsUnder, MiB, mountCap, mountsLeftUnder, NodeStack, type PublishedVolume, whyNoDevices } from "@csi/testkit";
import { seeded } from "../scripts/lib/random.js";

const skip = whyNoDevices();
const SEED = Number(process.env.FUZZ_SEED ?? 20_261_122);
const CALLS = 260;
const CALL_BOUND_MS = 15_000;
const [OK, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, INTERNAL] = [0, 2, 3, 4, 5, 6, 9, 13];

/** The codes each RPC documents (docs/node-agent.md); anything else is a failure. */
const DOCUMENTED: Record<string, readonly number[]> = {
  NodeStageVolume: [OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION],
  NodeUnstageVolume: [OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION],
  NodePublishVolume: [OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION],
  NodeUnpublishVolume: [OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION],
  NodeExpandVolume: [OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION],
  NodeGetVolumeStats: [OK, INVALID_ARGUMENT, NOT_FOUND],
  NodeGetInfo: [OK],
  NodeGetCapabilities: [OK],
};

/** A generated value with what the spec makes of it. */
interface Gen<T> {
  value: T;
  /** A volume id: a volume this node has ("staged"), one in its pool never staged ("pool"), or none ("none"). */
  volume?: "staged" | "pool" | "none";
  /** A path: its text or what is there makes it invalid (INVALID_ARGUMENT), or it is valid. A capability: set but without access mode or type. */
  invalid?: boolean;
}

let s: NodeStack;
let sandbox = "";
let blk: PublishedVolume & { staging: string; target: string };
let fsv: PublishedVolume & { staging: string; target: string };
let spare: PublishedVolume;
const secrets: string[] = [];
/** Absolute paths outside the test's directory that calls name: none of them may appear, vanish or get a mount. */
const OUTSIDE = ["/etc", "/etc/hostname", "/nonexistent-fuzz-dir/x", "/nonexistent-fuzz-dir"] as const;
const outside = new Set<string>(OUTSIDE);

async function sandboxTree(dir: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  for (const name of (await readdir(path.join(dir, rel))).sort()) {
    const p = path.join(rel, name);
    const st = await lstat(path.join(dir, p));
    const kind = st.isSymbolicLink() ? "link" : st.isDirectory() ? "dir" : st.isFile() ? `file:${st.size}` : "other";
    out.push(`${p} ${kind} ${(st.mode & 0o7777).toString(8)}`);
    if (st.isDirectory()) out.push(...(await sandboxTree(dir, p)));
  }
  return out;
}

async function machine() {
  const mounts = await readMounts();
  return {
    tree: await sandboxTree(sandbox),
    mounts: (await mountsLeftUnder(s.root)).map((m) => `${m.mountPoint} ${m.fsType} ${m.source}`).sort(),
    outsideMounts: mounts
      .filter((m) => outside.has(m.mountPoint))
      .map((m) => `${m.mountPoint} ${m.fsType}`)
      .sort(),
    outsideExisting: [...outside].filter((p) => existsSync(p)).sort(),
    loops: (await loopsUnder(s.root)).map((l) => `${l.device} ${l.backingFile}`).sort(),
  };
}

describe("fuzz: hostile Node requests over gRPC and NATS", { skip }, () => {
  before(async () => {
    s = await NodeStack.start({ agentEnv: { LOG_LEVEL: "debug", NODE_OP_TIMEOUT_MS: "10000" } });
    sandbox = s.kubelet("fuzz", "x").replace(/\/x$/, "");
    // A block volume and a filesystem volume, staged and published; one more in the pool, never staged.
    const staged = async (name: string, cap: object, size: number) => {
      const v = await s.createAndPublish(name, cap, size);
      const staging = path.join(sandbox, `staging-${name}`);
      const target = path.join(sandbox, `target-${name}`);
      await mkdir(staging);
      await s.node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: cap, publish_context: v.ctx });
      await s.node.NodePublishVolume({ volume_id: v.id, staging_target_path: staging, target_path: target, volume_capability: cap });
      return { ...v, staging, target };
    };
    blk = await staged("fuzz-blk", blockCap(), 8 * MiB);
    fsv = await staged("fuzz-fs", mountCap(), FS_MIN_BYTES);
    spare = await s.createAndPublish("fuzz-spare", blockCap(), 8 * MiB);
    // What hostile paths find there.
    await mkdir(path.join(sandbox, "empty"));
    await mkdir(path.join(sandbox, "full"));
    await writeFile(path.join(sandbox, "full", "data"), "kept");
    await writeFile(path.join(sandbox, "file"), "a regular file");
    await writeFile(path.join(sandbox, "empty-file"), "");
    await mkdir(path.join(sandbox, "tmpfs"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "fuzz-foreign", path.join(sandbox, "tmpfs")]);
    await writeFile(path.join(sandbox, "tmpfs", "precious"), "not the agent's");
    await symlink("/etc", path.join(sandbox, "link-etc"));
    await symlink(path.join(sandbox, "empty"), path.join(sandbox, "link-in"));
  });

  after(async () => {
    await s?.stop(); // unmounts the foreign tmpfs and everything else under the test's directory
  });

  test(`${CALLS} generated calls (seed ${SEED}): documented codes, in time, nothing touched, no secret logged`, async () => {
    console.log(`# fuzz-node seed ${SEED} (FUZZ_SEED=${SEED} to replay)`);
    const r = seeded(SEED);
    const ghost = () => `0001-0002-c1-0000000000000001-${randomUUID()}`;

    const volumeIds = (): Gen<string>[] => [
      { value: blk.id, volume: "staged" },
      { value: fsv.id, volume: "staged" },
      { value: spare.id, volume: "pool" },
      { value: ghost(), volume: "none" },
      { value: "some-vol-id", volume: "none" },
      { value: `${blk.id}\u0000`, volume: "none" },
      { value: "x".repeat(r.pick([129, 4096, 100_000])), volume: "none" },
      { value: `vol-\u202e\u0007\n\u001b[31m-${"é".repeat(50)}`, volume: "none" },
      { value: "../../../etc/passwd", volume: "none" },
      { value: "0001-0002-c1-ffffffffffffffff-00000000-0000-0000-0000-000000000000", volume: "none" },
    ];
    /** Paths a staging/target field gets; `invalid` when the text or what is there makes it INVALID_ARGUMENT. */
    const paths = (): Gen<string>[] => [
      { value: path.join(sandbox, `new-${Math.floor(r.next() * 1e9)}`), invalid: false },
      { value: path.join(sandbox, "empty"), invalid: false },
      { value: path.join(sandbox, "full"), invalid: false },
      { value: path.join(sandbox, "file"), invalid: false },
      { value: path.join(sandbox, "empty-file"), invalid: false },
      { value: path.join(sandbox, "tmpfs"), invalid: false },
      { value: path.join(sandbox, "no", "parent", "here"), invalid: false },
      { value: path.join(sandbox, "link-etc"), invalid: true },
      { value: path.join(sandbox, "link-etc", "fuzz"), invalid: true },
      { value: path.join(sandbox, "link-in"), invalid: true },
      { value: path.join(sandbox, "file", "below-a-file"), invalid: true },
      { value: `${sandbox}/../../etc`, invalid: true },
      { value: "some/path", invalid: true },
      { value: "/", invalid: true },
      { value: "/proc/self/cwd/fuzz", invalid: true },
      { value: "/proc/fuzz/a/b/c", invalid: true },
      { value: "/sys/kernel/fuzz", invalid: true },
      { value: "/dev/shm/fuzz", invalid: true },
      { value: `/${"a".repeat(r.pick([1025, 4096, 70_000]))}`, invalid: true },
      { value: `${sandbox}/${"b".repeat(256)}`, invalid: true },
      { value: `${sandbox}/ctl-\u0001\u001b[2J\n`, invalid: true },
      { value: `${sandbox}/nul\u0000x`, invalid: true },
      { value: path.join(sandbox, "ünï-\u202e-😀"), invalid: false },
      ...OUTSIDE.slice(0, 3).map((p) => ({ value: p, invalid: false })),
    ];
    const capabilities = (): Gen<object | undefined>[] => [
      { value: mountCap() },
      { value: blockCap() },
      { value: undefined },
      { value: {}, invalid: true },
      { value: { mount: {} }, invalid: true },
      { value: { access_mode: { mode: 99 }, mount: {} }, invalid: true },
      { value: { access_mode: { mode: "SINGLE_NODE_WRITER" } }, invalid: true },
      { value: mountCap("SINGLE_NODE_WRITER", "btrfs") },
      { value: mountCap("SINGLE_NODE_WRITER", "\u0000ext4".padEnd(5000, "x")) },
      {
        value: {
          access_mode: { mode: "SINGLE_NODE_WRITER" },
          mount: { fs_type: "", mount_flags: [r.pick(["--bind", "a,b", "x y", "o".repeat(5000), "ro\u0000"])] },
        },
      },
      { value: mountCap("MULTI_NODE_MULTI_WRITER") },
    ];
    const contexts = (v: string): Record<string, string>[] => {
      const own = [blk, fsv, spare].find((x) => x.id === v)?.ctx ?? {};
      return [{}, own, { ...own, imageName: spare.ctx.imageName as string }, { imageName: "../../etc/passwd" }, { readOnly: "true" }, { k: "v".repeat(5000) }];
    };
    const secret = () => {
      const x = `s3cr3t-${randomUUID()}`;
      secrets.push(x);
      return { password: x, token: x };
    };
    const maybe = <T>(g: Gen<T>): Gen<T | undefined> => (r.chance(0.08) ? { value: undefined } : g);
    /** Keep the sandbox's own volumes untouched: never their recorded staging path or target (except where reading). */
    const notOurs = (g: Gen<string>) =>
      g.value === blk.staging || g.value === fsv.staging || g.value === blk.target || g.value === fsv.target ? paths()[0]! : g;

    const before = await machine();
    const wrong: string[] = [];
    const n = s.node;
    for (let i = 0; i < CALLS; i++) {
      const rpc = r.pick(Object.keys(DOCUMENTED));
      const vol = maybe(r.pick(volumeIds()));
      const volumeId = vol.value;
      let p1: Gen<string | undefined> = maybe(notOurs(r.pick(paths())));
      // The volume in the pool would stage for real at a valid path: give it only paths that are not valid.
      if (rpc === "NodeStageVolume" && vol.volume === "pool" && p1.value !== undefined) p1 = r.pick(paths().filter((g) => g.invalid));
      const p2 = maybe(notOurs(r.pick(paths())));
      const cap = r.pick(capabilities());
      const ctx = r.pick(contexts(volumeId ?? ""));
      const req: Record<string, unknown> = {
        volume_id: volumeId,
        volume_capability: cap.value,
        publish_context: ctx,
        secrets: secret(),
        readonly: r.chance(0.3),
      };
      /** The code the spec fixes for this call, when it fixes one. */
      let want: number | undefined;
      const missing = volumeId === undefined || volumeId === "";
      // A capability without access mode or type counts as a missing required field (rpc/node.ts, argsOf); unstage, unpublish and stats have none.
      const capBad = cap.value === undefined || cap.invalid === true;
      switch (rpc) {
        case "NodeStageVolume":
          Object.assign(req, { staging_target_path: p1.value });
          if (missing || p1.value === undefined || p1.value === "" || capBad) want = INVALID_ARGUMENT;
          else if (vol.volume === "none") want = NOT_FOUND;
          else if (p1.invalid) want = INVALID_ARGUMENT;
          break;
        case "NodePublishVolume":
          Object.assign(req, { target_path: p1.value, staging_target_path: r.chance(0.5) ? p2.value : blk.staging });
          if (missing || p1.value === undefined || p1.value === "" || capBad) want = INVALID_ARGUMENT;
          else if (vol.volume === "none") want = NOT_FOUND;
          else if (p1.invalid || (p2.invalid && req.staging_target_path === p2.value)) want = INVALID_ARGUMENT;
          break;
        case "NodeUnpublishVolume":
          Object.assign(req, { target_path: p1.value });
          if (missing || p1.value === undefined || p1.value === "") want = INVALID_ARGUMENT;
          else if (p1.invalid) want = INVALID_ARGUMENT;
          break;
        case "NodeUnstageVolume":
          Object.assign(req, { staging_target_path: p1.value });
          if (missing || p1.value === undefined || p1.value === "") want = INVALID_ARGUMENT;
          else if (p1.invalid) want = INVALID_ARGUMENT;
          else if (vol.volume === "staged") want = NOT_FOUND; // never its own staging path: staged elsewhere
          break;
        case "NodeExpandVolume":
        case "NodeGetVolumeStats": {
          // Reading calls may also name where the volumes really are.
          const at = r.chance(0.3) ? r.pick([blk.staging, blk.target, fsv.target]) : p1.value;
          Object.assign(req, { volume_path: at });
          // NodeExpandVolume has an optional capability (a malformed one is refused first); NodeGetVolumeStats has none.
          if (missing || at === undefined || at === "" || (rpc === "NodeExpandVolume" && cap.invalid)) want = INVALID_ARGUMENT;
          else if (vol.volume !== "staged") want = NOT_FOUND;
          break;
        }
      }
      const call = (n as unknown as Record<string, (q: unknown) => Promise<unknown>>)[rpc] as (q: unknown) => Promise<unknown>;
      const started = Date.now();
      const got = await Promise.race([
        call(req).then(
          () => ({ code: OK, details: "" }),
          (e: { code: number; details?: string }) => ({ code: e.code, details: String(e.details ?? "") }),
        ),
        new Promise<{ code: number; details: string }>((res) => setTimeout(() => res({ code: -1, details: "no answer" }), CALL_BOUND_MS).unref()),
      ]);
      const shown = `#${i} ${rpc} ${JSON.stringify(req, (_k, v) => (typeof v === "string" && v.length > 80 ? `${v.slice(0, 80)}…(${v.length})` : v))}`;
      if (got.code === -1) wrong.push(`${shown}: no answer within ${CALL_BOUND_MS} ms`);
      else if (got.code === INTERNAL || got.code === UNKNOWN || got.code === DEADLINE_EXCEEDED) wrong.push(`${shown}: ${got.code} ${got.details}`);
      else if (!DOCUMENTED[rpc]?.includes(got.code)) wrong.push(`${shown}: undocumented code ${got.code} (${got.details})`);
      else if (want !== undefined && got.code !== want) wrong.push(`${shown}: got ${got.code} (${got.details}), want ${want}`);
      if (got.details.length > 512 || hasControlCharacter(got.details))
        wrong.push(`${shown}: message too long or with control characters: ${JSON.stringify(got.details.slice(0, 200))}`);
      if (Date.now() - started > CALL_BOUND_MS) wrong.push(`${shown}: took ${Date.now() - started} ms`);
      if (wrong.length > 10) break;
    }

    // Hostile node work over NATS: an unknown volume at a file and at the foreign tmpfs, a known one at a path it is not at.
    const capability = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
    for (const [volumeId, target] of [
      [ghost(), path.join(sandbox, "file")],
      [ghost(), path.join(sandbox, "tmpfs")],
      [blk.id, path.join(sandbox, "full")],
      [blk.id, "/proc/fuzz/x"],
    ] as const) {
      await s.work({ id: randomUUID(), op: "unpublish", volumeId, stagingPath: target, targetPath: target, capability });
      await s.work({ id: randomUUID(), op: "unstage", volumeId, stagingPath: target, capability });
    }

    assert.deepEqual(wrong, [], "every call answers a documented code in time");
    assert.deepEqual(await machine(), before, "nothing outside the agent's own directories was created, removed, mounted or unmounted");
    // Requests were logged (at debug), so the secret check below sees them.
    await s.agent.untilLog((l) => l.includes('"msg":"request"'), "its requests");
    const leaked = s.agent.logs.filter((l) => secrets.some((x) => l.includes(x)));
    assert.deepEqual(leaked, [], "no secret in any log line");
  });
});
