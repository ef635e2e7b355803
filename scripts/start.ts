/**
 * `npm start`: the whole system on this machine.
 *
 *  - NATS_URL / REDIS_URL unset → start our own nats-server (JetStream) and redis-server on free
 *    ports with data under ./.data/ (stopped on exit); set → use those servers.
 *  - Starts the journal, the controller (unix://$PWD/run/csi-controller.sock) and one node-agent
 *    (unix://$PWD/run/csi-node.sock, node id = hostname), logs (pino JSON) on stdout.
 *  - Ctrl-C / SIGTERM stops everything cleanly; the sockets are removed.
 */
import { mkdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type LocalServer, startServer } from "./lib/local-servers.js";
import { ROOT, type ServiceProcess, spawnService } from "./lib/processes.js";

const dataDir = path.resolve(process.env.DATA_DIR ?? path.join(ROOT, ".data"));
const runDir = path.resolve(process.env.RUN_DIR ?? path.join(ROOT, "run"));
mkdirSync(runDir, { recursive: true });
const say = (msg: string, extra: Record<string, unknown> = {}) =>
  process.stdout.write(`${JSON.stringify({ level: 30, time: Date.now(), service: "start", msg, ...extra })}\n`);

const servers: LocalServer[] = [];
const procs: ServiceProcess[] = [];
let stopping = false;

async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    say("stopping the stack");
    await Promise.all(procs.map((p) => p.stop()));
    await Promise.all(servers.map((s) => s.stop()));
    say("stopped");
  }
  process.exit(code);
}
process.once("SIGINT", () => void stopAll(0));
process.once("SIGTERM", () => void stopAll(0));

try {
  let natsUrl = process.env.NATS_URL;
  let redisUrl = process.env.REDIS_URL;
  if (!natsUrl) {
    const s = await startServer("nats", path.join(dataDir, "nats"));
    servers.push(s);
    natsUrl = s.url;
    say("started embedded nats-server", { url: natsUrl });
  }
  if (!redisUrl) {
    const s = await startServer("redis", path.join(dataDir, "redis"));
    servers.push(s);
    redisUrl = s.url;
    say("started embedded redis-server", { url: redisUrl });
  }
  const env = { NATS_URL: natsUrl, REDIS_URL: redisUrl, DATA_DIR: dataDir, LOG_LEVEL: process.env.LOG_LEVEL ?? "info" };
  const print = (line: string) => process.stdout.write(`${line}\n`);
  const controllerEndpoint = `unix://${path.join(runDir, "csi-controller.sock")}`;
  const nodeEndpoint = `unix://${path.join(runDir, "csi-node.sock")}`;
  const nodeId = process.env.NODE_ID ?? os.hostname();
  // The journal first: the controller's Probe wants a journal to answer.
  procs.push(await spawnService("journal", env, { onLine: print }));
  procs.push(
    ...(await Promise.all([
      spawnService("controller", env, { args: ["--endpoint", controllerEndpoint], onLine: print }),
      spawnService("node-agent", env, { args: ["--endpoint", nodeEndpoint, "--nodeid", nodeId], onLine: print }),
    ])),
  );
  for (const p of procs) p.exited.then((code) => stopping || (say("a service exited; stopping", { code }), void stopAll(1)));
  say("csi stack ready", { controller: controllerEndpoint, node: nodeEndpoint, nats: natsUrl, redis: redisUrl, nodeId });
} catch (err) {
  say("could not start the stack", { err: String((err as Error)?.stack ?? err) });
  await stopAll(1);
}
