/**
 * SentinelSafeRedis (packages/runtime/src/redis-client.ts): a client that ended without being
 * asked to connects again; one closed by us stays closed. The end is made here the plain way (a
 * retry strategy that gives up while the server is down), the state ioredis's Sentinel failover
 * race leaves a client in; a plain ioredis client stays ended, this one comes back.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { REVIVE_MS, SentinelSafeRedis } from "@csi/runtime";
import { type LocalServer, startServer, tempDir } from "@csi/testkit";
import { Redis } from "ioredis";

let dir: string;
let server: LocalServer;

before(async () => {
  dir = await tempDir("csi-redis-client-");
  server = await startServer("redis", path.join(dir, "redis"));
});

after(async () => {
  await server?.kill();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Options under which a client ends for good once the server is gone. */
const givesUp = { retryStrategy: () => null, maxRetriesPerRequest: 0, lazyConnect: true };

test("a client that ended on its own connects again when the server is back; a plain ioredis client does not", async () => {
  const revived: number[] = [];
  const safe = new SentinelSafeRedis(server.url, givesUp, () => revived.push(Date.now()));
  const plain = new Redis(server.url, givesUp);
  for (const c of [safe, plain]) c.on("error", () => {});
  try {
    await Promise.all([safe.connect(), plain.connect()]);
    assert.equal(await safe.ping(), "PONG");
    const ended = [once(safe, "end"), once(plain, "end")];
    await server.kill();
    await Promise.all(ended);
    await server.restart();
    // The safe client is ready again (it tries every REVIVE_MS until the server answers).
    if (safe.status !== "ready") await once(safe, "ready");
    assert.equal(await safe.ping(), "PONG");
    assert.ok(safe.revivals >= 1 && revived.length === safe.revivals, `revivals ${safe.revivals}`);
    assert.equal(plain.status, "end", "ioredis alone stays ended");
  } finally {
    safe.disconnect();
    plain.disconnect();
  }
});

test("quit and disconnect of ours end it for good", async () => {
  for (const close of [(c: SentinelSafeRedis) => c.quit(), (c: SentinelSafeRedis) => c.disconnect()]) {
    const c = new SentinelSafeRedis(server.url, { lazyConnect: true });
    c.on("error", () => {});
    await c.connect();
    const ended = once(c, "end");
    await close(c);
    await ended;
    // A revival would start within REVIVE_MS: wait well past it (a slow machine can only delay a
    // revival past the wait, so this check can pass wrongly but never fail wrongly).
    await new Promise((r) => setTimeout(r, 4 * REVIVE_MS));
    assert.equal(c.status, "end");
    assert.equal(c.revivals, 0);
  }
});
