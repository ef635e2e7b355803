/**
 * The image, for real, without a Docker engine (there is none here): `npm run build`, then the
 * Dockerfile's final stage replayed into an empty directory — its WORKDIR, ENV and COPY lines (from
 * the build context, which .dockerignore filters, from the manifests stage, replayed the same way, or
 * from the build stage, which is this tree after the build) and its `npm ci --omit=dev` (npm's cache first, `--prefer-offline`) — and in there
 * each service's `node services/<name>/dist/main.js --version` and `--help`, csictl's, and the CMD
 * run with plain node: no tsx (it is not even installed there), no export conditions, the image's
 * NODE_ENV; then the journal, the controller and a node-agent started from it on real servers, and
 * a volume created and deleted through the controller's CSI socket. test/deploy.test.ts checks the
 * same Dockerfile and the deployment files statically.
 *
 * Slow by nature: the build runs once, in `before` (a whole build from nothing takes minutes on two
 * busy cores; an up-to-date tree, seconds), and the install about twenty seconds.
 */
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { CONTROLLER_SETTINGS } from "@csi/controller/testing";
import { JOURNAL_SETTINGS } from "@csi/journal";
import { NODE_AGENT_SETTINGS } from "@csi/node-agent/testing";
import { csiClient, envNames } from "@csi/runtime";
import {
  CSICTL_BIN,
  CSICTL_DIST,
  type DockerStage,
  dockerCopy,
  endProcess,
  execForm,
  parseDockerfile,
  ROOT,
  runsBuild,
  type ServiceName,
  type ServiceProcess,
  serviceMain,
  spawnService,
  startTestServers,
  workdir,
  writeClustersFile,
} from "@csi/testkit";

const rel = (p: string) => path.relative(ROOT, p);
const SETTINGS: Record<ServiceName, Parameters<typeof envNames>[0]> = {
  journal: JOURNAL_SETTINGS,
  controller: CONTROLLER_SETTINGS,
  "node-agent": NODE_AGENT_SETTINGS,
};
const versionOf = (dir: string) => (JSON.parse(readFileSync(path.join(ROOT, dir, "package.json"), "utf8")) as { version: string }).version;

/** .dockerignore's patterns as tests on a context path (the forms it uses: `name`, `dir/name`, `**` + `/name`). */
function dockerignored(): (p: string) => boolean {
  const res = readFileSync(path.join(ROOT, ".dockerignore"), "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => {
      const body = l
        .replace(/\/$/, "")
        .replace(/[.+^${}()|[\]\\]/g, "\\$&")
        .replace(/\*\*\//g, "(?:.*/)?")
        .replace(/\*/g, "[^/]*");
      return new RegExp(`^${body}(?:/.*)?$`);
    });
  return (p) => res.some((re) => re.test(path.posix.normalize(p)));
}

/**
 * `env` with this process's node first on the PATH: npm (`#!/usr/bin/env node`) and what it runs
 * then use the Node the tests run on, not whichever node the machine has first (the image's
 * `npm ci --engine-strict` refuses any other line).
 */
const thisNodeFirst = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
  ...env,
  PATH: [path.dirname(process.execPath), env.PATH].filter(Boolean).join(path.delimiter),
});

/** The run of a plain node in the replayed image: its status and output. */
interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** A stage replayed: the directory standing for its WORKDIR, its environment and CMD. */
interface Replayed {
  dir: string;
  env: Record<string, string>;
  cmd: string[];
}

/**
 * Replays a stage into a new directory under `into` (standing for its WORKDIR): ENV collected,
 * COPY done (from the context, minus .dockerignore, or from another stage, replayed the same way),
 * `npm ci` run; other RUN steps (apt-get, mkdir of volume mount points, npm's cache cleaning, the
 * image's check of its own runtime tools: a python3 import and a `command -v` loop, which only read)
 * touch nothing node resolves and are checked to be only those (`npm run e2e` runs them for real). A stage that runs
 * `npm run build` is not replayed: it is this tree after `npm run build`.
 */
function replayStage(stages: DockerStage[], stage: DockerStage, into: string, done = new Map<DockerStage, Replayed>()): Replayed {
  const known = done.get(stage);
  if (known) return known;
  const home = workdir(stage);
  if (runsBuild(stage)) {
    const built = { dir: ROOT, env: {}, cmd: [] };
    done.set(stage, built);
    return built;
  }
  const out: Replayed = { dir: mkdtempSync(path.join(into, `${stage.name ?? "final"}-`)), env: {}, cmd: [] };
  const inStage = (p: string, dir: string) => {
    const abs = path.posix.resolve(dir, p);
    assert.ok(abs === home || abs.startsWith(`${home}/`), `${p}: only paths under the WORKDIR ${home} are replayed`);
    return path.join(out.dir, path.posix.relative(home, abs));
  };
  const ignored = dockerignored();
  let dir = "/";
  for (const ins of stage.instructions) {
    if (ins.op === "WORKDIR") dir = path.posix.resolve(dir, ins.args);
    else if (ins.op === "ENV") for (const m of ins.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S*)/g)) out.env[m[1] as string] = m[2] as string;
    else if (ins.op === "CMD") out.cmd = execForm(ins) ?? [];
    else if (ins.op === "COPY") {
      const copy = dockerCopy(ins);
      const from = copy.from === undefined ? undefined : stages.find((s) => s.name === copy.from);
      assert.ok(copy.from === undefined || (from && from !== stage), `line ${ins.line}: --from=${copy.from} is not another stage`);
      const base = from ? replayStage(stages, from, into, done).dir : ROOT;
      for (const src of copy.sources) {
        const origin = from ? path.posix.relative(workdir(from), src) : path.posix.normalize(src);
        assert.ok(!origin.startsWith(".."), `line ${ins.line}: ${src} is outside the ${copy.from} stage's WORKDIR`);
        if (!from) assert.ok(!ignored(origin), `line ${ins.line}: ${src} is not in the build context (.dockerignore)`);
        const file = path.join(base, origin);
        assert.ok(existsSync(file), `line ${ins.line}: ${src} does not exist ${from ? `in stage ${copy.from}` : "in the context"}`);
        const dest = inStage(copy.dest, dir);
        // Docker: a file into a directory (dest ending in /) keeps its name; a directory's contents go into dest.
        const target = copy.dest.endsWith("/") && statSync(file).isFile() ? path.join(dest, path.basename(file)) : dest;
        mkdirSync(path.dirname(target), { recursive: true });
        cpSync(file, target, { recursive: true });
      }
    } else if (ins.op === "RUN") {
      for (const step of ins.args.split("&&").map((x) => x.trim())) {
        if (/^npm ci\b/.test(step)) {
          const args = step.split(/\s+/).slice(1);
          // Not the npm_* variables of an `npm test` around us (npm_config_local_prefix names this tree).
          const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|INIT_CWD$)/i.test(k)));
          execFileSync("npm", [...args, "--prefer-offline"], {
            cwd: inStage(".", dir),
            env: thisNodeFirst({ ...clean, ...out.env }),
            stdio: "pipe",
            timeout: 600_000,
          });
        } else
          assert.match(
            step,
            /^(apt-get |rm -rf \/var\/lib\/apt\/lists|mkdir -p \/(csi|var\/lib\/csi)|npm cache clean)|^\/usr\/bin\/python3 -c "import [a-z, ]+"$|^for t in [\w. -]+; do command -v "\$t" >\/dev\/null \|\| \{ echo "the image lacks \$t" >&2; exit 1; \}; done$/,
            `line ${ins.line}: ${step} is not replayed`,
          );
      }
    }
  }
  done.set(stage, out);
  return out;
}

describe("the image's final stage, replayed after npm run build, runs the compiled services with plain node", () => {
  let scratch: string;
  let app: string;
  let image: Replayed;
  /** Plain node in the replayed image: no NODE_OPTIONS, the image's env. */
  const node = (args: string[]) =>
    new Promise<Run>((resolve) => {
      const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, ...image.env };
      execFile(process.execPath, args, { cwd: app, env, encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
      );
    });

  before(
    async () => {
      execFileSync("npm", ["run", "build"], { cwd: ROOT, env: thisNodeFirst(process.env), stdio: "pipe", timeout: 1_200_000 });
      scratch = await mkdtemp(path.join(os.tmpdir(), "csi-image-"));
      const stages = parseDockerfile(readFileSync(path.join(ROOT, "Dockerfile"), "utf8"));
      image = replayStage(stages, stages.at(-1) as DockerStage, scratch);
      app = image.dir;
    },
    { timeout: 1_800_000 },
  );
  after(async () => {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  test("the install has production dependencies only: no tsx, no typescript; no sources, only dist", () => {
    for (const dev of ["tsx", "typescript", "@biomejs/biome", "esbuild"]) assert.ok(!existsSync(path.join(app, "node_modules", dev)), `${dev} is installed`);
    assert.ok(existsSync(path.join(app, "node_modules", "@grpc/grpc-js")), "a production dependency is installed");
    for (const s of ["journal", "controller", "node-agent"] as const) {
      assert.ok(existsSync(path.join(app, rel(serviceMain(s, "dist")))), `${s}'s main`);
      assert.ok(!existsSync(path.join(app, rel(serviceMain(s, "source")))), `${s}'s sources are not in the image`);
    }
  });

  for (const s of ["journal", "controller", "node-agent"] as const) {
    test(`${s}: --version prints its package's version, --help its settings table; both exit 0`, async () => {
      const main = rel(serviceMain(s, "dist"));
      const v = await node([main, "--version"]);
      assert.equal(v.code, 0, v.stderr);
      assert.equal(v.stdout, `${versionOf(`services/${s}`)}\n`);
      const h = await node([main, "--help"]);
      assert.equal(h.code, 0, h.stderr);
      assert.match(h.stdout, new RegExp(`^csi-${s} ${versionOf(`services/${s}`)}: `));
      for (const name of envNames(SETTINGS[s])) assert.match(h.stdout, new RegExp(`^${name} `, "m"), `${name} in ${s} --help`);
      // Anything else is still a usage error, before anything starts.
      const bad = await node([main, "--no-such-flag"]);
      assert.equal(bad.code, 2, bad.stderr);
    });
  }

  test("csictl: the compiled main and the bin (which, with no tsx installed, runs dist) answer --version and --help", async () => {
    for (const file of [rel(CSICTL_DIST), rel(CSICTL_BIN)]) {
      const v = await node([file, "--version"]);
      assert.equal(v.code, 0, `${file}: ${v.stderr}`);
      assert.equal(v.stdout, `${versionOf("tools/csictl")}\n`);
      const h = await node([file, "--help"]);
      assert.equal(h.code, 0, `${file}: ${h.stderr}`);
      assert.match(h.stdout, /^Usage: csictl /);
    }
  });

  test("the image's CMD runs (with --version)", async () => {
    assert.equal(image.cmd[0], "node");
    const r = await node([...image.cmd.slice(1), "--version"]);
    assert.equal(r.code, 0, r.stderr);
  });

  test("the services run from it for real: journal, controller and node-agent ready, a volume created and deleted through CSI", async (t) => {
    const servers = await startTestServers();
    const procs: ServiceProcess[] = [];
    t.after(async () => {
      for (const p of procs.reverse()) await endProcess(p);
      await servers.dispose();
    });
    const clustersFile = await writeClustersFile(servers.dir, [{ clusterID: "c1", pools: ["default"] }]);
    const common = { ...image.env, NATS_URL: servers.nats.url, CLUSTERS_FILE: clustersFile, DATA_DIR: servers.dir };
    const start = async (s: ServiceName, env: Record<string, string>) => {
      const p = await spawnService(s, { ...common, ...env }, { built: app, readyTimeoutMs: 60_000 });
      procs.push(p);
      return p;
    };
    await start("journal", { REDIS_URL: servers.redis.url, CLUSTER_ID: "c1" });
    const socket = path.join(servers.dir, "csi-controller.sock");
    await start("controller", { CSI_ENDPOINT: `unix://${socket}` });
    await start("node-agent", {
      CSI_ENDPOINT: `unix://${path.join(servers.dir, "csi-node.sock")}`,
      NODE_ID: "image-node",
      NODE_STATE_DIR: path.join(servers.dir, "node"),
    });
    const c = csiClient(`unix://${socket}`, "Controller");
    try {
      const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] } };
      const v = (await c.CreateVolume({ name: "image-vol", volume_capabilities: [cap], capacity_range: { required_bytes: String(8 * 1024 * 1024) } })).volume;
      assert.ok(v?.volume_id, "a volume id");
      await c.DeleteVolume({ volume_id: v.volume_id });
    } finally {
      c.close();
    }
  });
});
