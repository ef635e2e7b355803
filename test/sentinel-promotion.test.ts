/**
 * A Sentinel failover's new master reached before the sentinels announce it (SentinelSafeRedis with
 * SentinelPromotions, packages/runtime/src/sentinel-promotion.ts), on a real Redis primary, its
 * replica and a sentinel: a planned failover (SENTINEL FAILOVER) while the client is connected to
 * the old primary, which stays a master until the sentinel has seen the promotion — about a second
 * later, at its next INFO of the replica. Proven when the client's own connection answers from the
 * new master before this test has heard `+switch-master`; a client following `+switch-master` alone
 * (ioredis' failover detector) stays on the old master until then. Which comes first is a race with
 * the sentinel's INFO timer (our reconnect takes milliseconds, the timer up to a second), so up to
 * three failovers are tried, each proven or not by the order of what was heard.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { SentinelSafeRedis } from "@csi/runtime";
import { type LocalServer, SENTINEL_CONF, startServer, tempDir, writeConfigDurable } from "@csi/testkit";
import { Redis } from "ioredis";
import { redisReplicaInSync, untilSeen, withRedis } from "../scripts/lib/ha-servers.js";

const MASTER = "promo";
let dir: string;
let redis: LocalServer[] = [];
let sentinel: LocalServer;

before(async () => {
  dir = await tempDir("csi-sentinel-promotion-");
  const a = await startServer("redis", path.join(dir, "a"));
  const b = await startServer("redis", path.join(dir, "b"), undefined, ["--replicaof", "127.0.0.1", String(a.port)]);
  redis = [a, b];
  await redisReplicaInSync(b);
  const sdir = path.join(dir, "sentinel");
  const conf = [
    `sentinel monitor ${MASTER} 127.0.0.1 ${a.port} 1`,
    `sentinel down-after-milliseconds ${MASTER} 5000`,
    `sentinel failover-timeout ${MASTER} 3000`,
  ];
  writeConfigDurable(path.join(sdir, SENTINEL_CONF), `${conf.join("\n")}\n`);
  sentinel = await startServer("sentinel", sdir);
});

after(async () => {
  await sentinel?.kill();
  await Promise.all(redis.map((r) => r.kill()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

const field = (info: string, k: string) => new RegExp(`^${k}:(.*)$`, "m").exec(info)?.[1]?.trim();

/** The sentinel's master now, and once it lists the other server as a replica in sync with it (a failover can pick it). */
async function settled(): Promise<{ master: LocalServer; replica: LocalServer }> {
  let found: { master: LocalServer; replica: LocalServer } | undefined;
  await untilSeen("the sentinel's master and its replica in sync", async () => {
    const addr = await withRedis(sentinel.url, (r) => r.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER));
    const master = redis.find((s) => Array.isArray(addr) && Number(addr[1]) === s.port);
    const replica = redis.find((s) => s !== master);
    if (!master || !replica) return { done: false, seen: `master ${JSON.stringify(addr)}` };
    const info = await withRedis(replica.url, (r) => r.info("replication"));
    const listed = await withRedis(sentinel.url, (r) => r.call("SENTINEL", "REPLICAS", MASTER));
    const flags = (Array.isArray(listed) ? listed : []).map((x) => (Array.isArray(x) ? x : [])).find((x) => x[x.indexOf("port") + 1] === String(replica.port));
    const ok = flags?.[flags.indexOf("flags") + 1] === "slave" && flags?.[flags.indexOf("master-link-status") + 1] === "ok";
    found = { master, replica };
    return {
      done: field(info, "master_port") === String(master.port) && field(info, "master_link_status") === "up" && ok,
      seen: `master :${master.port}; replica :${replica.port} ${field(info, "role")} of :${field(info, "master_port")} link ${field(info, "master_link_status")}; sentinel lists it ${JSON.stringify(flags?.slice(0, 40))}`,
    };
  });
  return found as { master: LocalServer; replica: LocalServer };
}

test("a planned failover: the client writes to the new master before the sentinels announce the switch", { timeout: 300_000 }, async () => {
  const client = new SentinelSafeRedis("redis://127.0.0.1:1", {
    sentinels: [{ host: "127.0.0.1", port: sentinel.port }],
    name: MASTER,
    role: "master",
    failoverDetector: true,
    retryStrategy: () => 20,
    maxRetriesPerRequest: null,
  });
  client.on("error", () => {});
  const heard = new Redis(sentinel.url);
  const events: string[] = [];
  heard.on("message", (channel: string) => events.push(channel));
  await heard.subscribe("+failover-state-wait-promotion", "+switch-master");
  const outcomes: string[] = [];
  try {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const { master, replica } = await settled();
      assert.equal(field(await client.info("server"), "tcp_port"), String(master.port), "the client is on the master the sentinel names");
      events.length = 0;
      await withRedis(sentinel.url, (r) => r.call("SENTINEL", "FAILOVER", MASTER));
      let outcome: string | undefined;
      await untilSeen(
        `failover ${attempt}: the client on the new master, or the switch announced`,
        async () => {
          const port = field(await client.info("server"), "tcp_port");
          const switched = events.includes("+switch-master");
          if (port === String(replica.port)) outcome = switched ? "after the switch" : "before the switch";
          else if (switched) outcome = "after the switch";
          return { done: outcome !== undefined, seen: `client on :${port}; heard ${events.join(", ") || "nothing"}` };
        },
        undefined,
        5,
      );
      assert.ok(events.includes("+failover-state-wait-promotion") || outcome === "after the switch", "the promotion was announced");
      outcomes.push(outcome as string);
      await client.set(`k${attempt}`, "v");
      if (outcome === "before the switch") break;
      await untilSeen("the switch announced", async () => ({ done: events.includes("+switch-master"), seen: events.join(", ") }));
    }
    assert.ok(outcomes.includes("before the switch"), `the client reached the new master only after +switch-master in every try: ${outcomes.join("; ")}`);
  } finally {
    client.disconnect();
    heard.disconnect();
  }
});
