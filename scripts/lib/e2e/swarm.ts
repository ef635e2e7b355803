/**
 * The Swarm phase: a one-node swarm, our managed plugin (deploy/swarm/make-plugin.sh from the image
 * just built, `docker plugin create`, settings, enable) talking to the compose stack's NATS and
 * journals and attaching the images in the compose stack's pool volume, a cluster volume
 * (`docker volume create --driver … --type mount`), a service with `--mount type=cluster` whose
 * task writes a file and reads it back (its log line is awaited), then the service and the volume
 * removed (Swarm retries DeleteVolume until the node has let go: it never sends NodeUnstageVolume,
 * the controller queues the unstage itself on ControllerUnpublishVolume; docs/controller.md).
 * The CSI calls Swarm made are counted from the plugin mux's request log. `leaveSwarm` takes down
 * whatever is left, the swarm included, once the run has checked the compose stack.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { loopsUnder, ROOT } from "@csi/testkit";
import { until } from "../ha-servers.js";
import { PROJECT } from "./compose.js";
import { type Engine, STATE } from "./engine.js";
import { CACHE, say, sh } from "./sh.js";

export const PLUGIN = "csi-event-driver:e2e";
const VOLUME = "e2e-swarm-vol";
const SERVICE = "e2e-swarm-writer";
const WRITTEN = "written-by-a-swarm-task";

/** The host directory of the compose stack's pool volume (the journals' image files). */
const poolsDir = async (engine: Engine) => (await engine.docker(["volume", "inspect", "-f", "{{.Mountpoint}}", `${PROJECT}_pools`])).stdout.trim();

/** The plugin made from `image`, set to the compose stack's NATS and pool volume, enabled. */
async function enablePlugin(engine: Engine, image: string, stateDir: string): Promise<void> {
  const dir = await mkdtemp(path.join(CACHE, ".plugin-"));
  try {
    await sh("bash", [path.join(ROOT, "deploy/swarm/make-plugin.sh"), image, dir], { env: engine.env, timeoutMs: 300_000 });
    await engine.docker(["plugin", "create", PLUGIN, dir], { timeoutMs: 300_000 });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const nats = (await engine.docker(["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", `${PROJECT}-nats-1`])).stdout
    .trim()
    .split(" ")[0];
  const pools = await poolsDir(engine);
  const settings = [`NATS_URL=nats://${nats}:4222`, "NODE_ID=e2e-swarm", "LOG_LEVEL=debug", `pools.source=${pools}`, `state.source=${stateDir}`];
  await engine.docker(["plugin", "set", PLUGIN, ...settings]);
  await engine.docker(["plugin", "enable", PLUGIN], { timeoutMs: 120_000 });
  say(`plugin ${PLUGIN} enabled (${settings.join(" ")})`);
}

/** The volume's STATUS column in `docker volume ls --cluster` ("pending creation", "created", "in use (1 node)"), "" once it is gone. */
async function volumeStatus(engine: Engine): Promise<string> {
  // --format is not applied to --cluster listings: the table is read by its header's STATUS column.
  const [header = "", ...rows] = (await engine.docker(["volume", "ls", "--cluster"])).stdout.split("\n");
  const row = rows.find((r) => r.split(/\s+/)[0] === VOLUME);
  return row ? row.slice(header.indexOf("STATUS")).trim() : "";
}

async function serviceWritesAndReads(engine: Engine, image: string): Promise<void> {
  const script = `echo ${WRITTEN} > /data/hello && cat /data/hello && exec sleep infinity`;
  await engine.docker(
    ["service", "create", "--detach", "--no-resolve-image", "--name", SERVICE, "--restart-condition", "none"].concat([
      "--mount",
      `type=cluster,src=${VOLUME},dst=/data`,
      image,
      "sh",
      "-c",
      script,
    ]),
  );
  await until(
    `service ${SERVICE}'s task printing what it wrote to the cluster volume`,
    async () => {
      const logs = await engine.docker(["service", "logs", "--raw", SERVICE], { allowFail: true });
      if (logs.stdout.includes(WRITTEN)) return true;
      const state = (await engine.docker(["service", "ps", "--no-trunc", "--format", "{{.CurrentState}} {{.Error}}", SERVICE])).stdout.trim();
      if (/^(Failed|Rejected|Complete|Shutdown)/m.test(state)) throw new Error(`the task ended: ${state}`);
      return false;
    },
    180_000,
  );
  say(`service ${SERVICE}: its task wrote and read /data/hello on ${VOLUME} (${await volumeStatus(engine)})`);
}

/** The service removed, then the volume (refused while in use; Swarm unpublishes it, then deletes it). */
async function removeAll(engine: Engine, pools: string): Promise<void> {
  await engine.docker(["service", "rm", SERVICE], { allowFail: true });
  await until(`docker volume rm ${VOLUME} accepted`, async () => (await engine.docker(["volume", "rm", VOLUME], { allowFail: true })).code === 0, 180_000);
  await until(`${VOLUME} gone from the swarm (DeleteVolume done)`, async () => (await volumeStatus(engine)) === "", 180_000);
  // Swarm never sends NodeUnstageVolume: the node lets go on the controller's queued unstage (docs/controller.md).
  await until(`the plugin's node letting go of ${VOLUME}'s loop device`, async () => (await loopsUnder(pools)).length === 0, 60_000);
  say("service and cluster volume removed; the node let go (no loop device on the pool)");
}

/** The CSI methods the plugin mux was called with, counted from its debug log (which dockerd keeps). */
async function callsMade(): Promise<string> {
  const log = await readFile(path.join(STATE, "dockerd.log"), "utf8").catch(() => "");
  const counts = new Map<string, number>();
  for (const m of log.matchAll(/\\"service\\":\\"plugin-mux\\"[^\n]*?\\"method\\":\\"([A-Za-z.]+)\\"[^\n]*?\\"msg\\":\\"request\\"/g))
    counts.set(m[1] as string, (counts.get(m[1] as string) ?? 0) + 1);
  return [...counts].map(([k, n]) => `${k} ×${n}`).join(", ");
}

/** Returns the removal of the plugin's state directory, for after leaveSwarm. */
export async function swarmFlow(engine: Engine, image: string): Promise<() => Promise<void>> {
  await engine.docker(["swarm", "init", "--advertise-addr", "127.0.0.1"]);
  const stateDir = await mkdtemp(path.join(CACHE, ".swarm-node-"));
  try {
    await enablePlugin(engine, image, stateDir);
    await engine.docker([
      "volume",
      "create",
      "--driver",
      PLUGIN,
      "--type",
      "mount",
      "--sharing",
      "none",
      "--scope",
      "single",
      "--required-bytes",
      "32M",
      VOLUME,
    ]);
    await until(`${VOLUME} created by the plugin`, async () => (await volumeStatus(engine)) === "created", 120_000);
    await serviceWritesAndReads(engine, image);
    await removeAll(engine, await poolsDir(engine));
    say(`the CSI calls Swarm made: ${await callsMade()}`);
  } catch (err) {
    await rm(stateDir, { recursive: true, force: true });
    throw err;
  }
  // The plugin and the swarm stay until leaveSwarm: the plugin's node reports what it holds to
  // csictl verify, and leaving the swarm now would cut the compose containers' DNS.
  return () => rm(stateDir, { recursive: true, force: true });
}

/** Whatever is left of the Swarm phase taken down: service, volume (forced), plugin, the swarm itself. */
export async function leaveSwarm(engine: Engine): Promise<void> {
  await engine.docker(["service", "rm", SERVICE], { allowFail: true });
  await engine.docker(["volume", "rm", "--force", VOLUME], { allowFail: true });
  await engine.docker(["plugin", "disable", "--force", PLUGIN], { allowFail: true, timeoutMs: 120_000 });
  await engine.docker(["plugin", "rm", "--force", PLUGIN], { allowFail: true });
  await engine.docker(["swarm", "leave", "--force"], { allowFail: true, timeoutMs: 120_000 });
}
