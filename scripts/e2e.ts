/**
 * `npm run e2e`: the driver under real orchestrators, on this machine (docs/deploy.md, "The
 * end-to-end run"). It installs what it needs from Debian's archive (scripts/lib/e2e/install.ts),
 * starts a Docker engine of its own (engine.ts), makes the base images locally (images.ts), builds
 * our image from the Dockerfile as a user does, runs the repository's docker-compose.yml with a CSI
 * round trip through ./run/*.sock (compose.ts), then Docker Swarm with our managed plugin and a
 * cluster volume (swarm.ts). Afterwards nothing of ours is left (leftovers.ts), `csictl verify` was
 * clean, and what it changed on the host is put back. Prints the time and disk it took.
 *
 * Skipped, exit 0, saying why, where the machine cannot run a Docker engine (not root, not Linux
 * x86_64, no Debian apt, no overlayfs, cgroups or loop devices). Any failure exits 1.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { ROOT } from "@csi/testkit";
import { COMPOSE_NODE_ID, compose, composeUp, KUBELET, roundTrip, sharedKubeletDir, verifyClean } from "./lib/e2e/compose.js";
import { type Engine, type HostState, hostChanges, hostState, restoreHost, STATE, startEngine } from "./lib/e2e/engine.js";
import { baseImages, standInNames } from "./lib/e2e/images.js";
import { forkyDocker, installHostPackages } from "./lib/e2e/install.js";
import { engineLeftovers, type MachineMarks, machineMarks, newMarks } from "./lib/e2e/leftovers.js";
import { CACHE, say, sh } from "./lib/e2e/sh.js";
import { leaveSwarm, swarmFlow } from "./lib/e2e/swarm.js";

const VERSION = (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string }).version;
const IMAGE = `csi-event-driver:${VERSION}`;

function whyNoEngine(): string | undefined {
  if (process.platform !== "linux" || process.arch !== "x64") return `needs Linux x86_64 (this is ${process.platform} ${process.arch})`;
  if (process.getuid?.() !== 0) return "needs root (a Docker engine, loop devices, mounts)";
  if (!existsSync("/usr/bin/apt-get")) return "needs Debian's apt-get (the engine comes from Debian's archive)";
  if (!readFileSync("/proc/filesystems", "utf8").includes("overlay")) return "needs overlayfs (the engine's storage driver)";
  if (!existsSync("/sys/fs/cgroup")) return "needs a cgroup filesystem at /sys/fs/cgroup";
  if (!existsSync("/dev/loop-control")) return "needs /dev/loop-control (loop devices for the file pool)";
  return undefined;
}

/** Bytes used on the file system of the cache now. */
const diskUsed = async () => Number((await sh("df", ["--output=used", "-B1", path.dirname(CACHE)])).stdout.trim().split("\n")[1]);

async function phases(engine: Engine, peak: () => Promise<void>): Promise<void> {
  await baseImages(engine);
  await peak();
  say(`building ${IMAGE} from the Dockerfile (BuildKit)`);
  await engine.docker(["build", "-t", IMAGE, "."], { cwd: ROOT, timeoutMs: 900_000 });
  await peak();
  await composeUp(engine);
  await roundTrip(engine);
  const dropPluginState = await swarmFlow(engine, IMAGE);
  await peak();
  try {
    await verifyClean(engine);
  } finally {
    await leaveSwarm(engine);
    await dropPluginState();
  }
}

/** Everything of ours taken out of the engine (the cached base images aside); what is still there is a problem. */
async function emptyEngine(engine: Engine): Promise<string[]> {
  await leaveSwarm(engine);
  await compose(engine, ["down", "--volumes", "--rmi", "local", "--remove-orphans", "--timeout", "30"], { allowFail: true, timeoutMs: 300_000 });
  await engine.docker(["rmi", IMAGE, ...Object.values(standInNames())], { allowFail: true });
  await engine.docker(["image", "prune", "--force"], { allowFail: true });
  return engineLeftovers(engine);
}

async function run(): Promise<number> {
  const started = Date.now();
  await installHostPackages();
  const forky = await forkyDocker();
  const host: HostState = await hostState();
  const roots = [CACHE, STATE, KUBELET];
  const marks: MachineMarks = await machineMarks(roots);
  const baseline = await diskUsed();
  let peakBytes = 0;
  const peak = async () => {
    peakBytes = Math.max(peakBytes, (await diskUsed()) - baseline);
  };
  const undoKubelet = await sharedKubeletDir();
  const problems: string[] = [];
  let engine: Engine | undefined;
  let failure: unknown;
  try {
    engine = await startEngine(forky);
    await phases(engine, peak);
  } catch (err) {
    failure = err;
  } finally {
    // Each step runs whatever the one before it did; what fails is reported, not thrown.
    const step = async (what: string, f: () => Promise<string[]>) => {
      problems.push(...(await f().catch((e: Error) => [`${what}: ${e.message}`])));
    };
    const none = (f: () => Promise<void>) => async (): Promise<string[]> => {
      await f();
      return [];
    };
    if (engine) await step("emptying the engine", () => emptyEngine(engine as Engine));
    await step(
      "stopping dockerd",
      none(async () => engine?.stop()),
    );
    await step("the kubelet directory", none(undoKubelet));
    await step(
      "restoring the host",
      none(() => restoreHost(host)),
    );
    await step("comparing the host", async () => [...hostChanges(host, await hostState()), ...newMarks(marks, await machineMarks(roots))]);
  }
  const cache = Number((await sh("du", ["-sb", CACHE])).stdout.split("\t")[0]);
  const gb = (b: number) => `${(b / 1e9).toFixed(2)} GB`;
  say(`${((Date.now() - started) / 1000).toFixed(0)} s in all; disk: ${gb(peakBytes)} at most over the start, the cache (${CACHE}) ${gb(cache)}`);
  if (failure) console.error(`e2e: FAILED: ${failure instanceof Error ? failure.message : String(failure)}`);
  for (const p of problems) console.error(`e2e: left behind: ${p}`);
  return failure || problems.length > 0 ? 1 : 0;
}

const why = whyNoEngine();
if (why) {
  console.log(`e2e: skipped: ${why}`);
  process.exit(0);
}
say(`node ${COMPOSE_NODE_ID} (compose) and e2e-swarm (the plugin); cache ${CACHE}`);
process.exit(await run());
