/**
 * Test harness: a real nats-server (JetStream) and a real redis-server per test file, on free
 * ports with temporary data directories, disposed of afterwards; the journal's Redis function
 * library is loaded into the redis-server at start.
 *
 *   const env = await startTestServers();   // in before()
 *   await env.nats.kill(); await env.nats.restart();
 *   await env.restartStopped();             // in a test's finally: whatever it killed runs again
 *   await env.dispose();                    // in after()
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type LocalServer, startServer } from "./local-servers.js";
import { loadJournalFunctionsAt } from "./redis-functions.js";

export { freePort, startServer } from "./local-servers.js";
export type { LocalServer };

export interface TestServers {
  nats: LocalServer;
  redis: LocalServer;
  dir: string;
  /** Restarts whichever server is down (a test that kills one calls this in its `finally`). */
  restartStopped(): Promise<void>;
  /** Stops both servers (their data stays). */
  stopServers(): Promise<void>;
  /** Stops both servers, then removes `dir`. */
  dispose(): Promise<void>;
}

export async function tempDir(prefix = "csi-test-"): Promise<string> {
  return mkdtemp(path.join(os.tmpdir(), prefix));
}

/** `natsConfig`: extra nats-server configuration (e.g. `max_payload: 65536`), written to a file passed with -c. */
export async function startTestServers(opts: { natsConfig?: string } = {}): Promise<TestServers> {
  const dir = await tempDir();
  const natsArgs: string[] = [];
  if (opts.natsConfig) {
    await writeFile(path.join(dir, "nats.conf"), opts.natsConfig);
    natsArgs.push("-c", path.join(dir, "nats.conf"));
  }
  const [nats, redis] = await Promise.all([startServer("nats", path.join(dir, "nats"), undefined, natsArgs), startServer("redis", path.join(dir, "redis"))]);
  // As an admin would before the journals start (a journal on an open Redis would load it itself).
  await loadJournalFunctionsAt(redis.url);
  const stopServers = async () => {
    await Promise.all([nats.stop(), redis.stop()]);
  };
  return {
    nats,
    redis,
    dir,
    restartStopped: async () => {
      for (const s of [nats, redis]) if (!s.running) await s.restart();
    },
    stopServers,
    dispose: async () => {
      await stopServers();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
