/**
 * The replicated servers placed on the hosts (docs/chaos.md, "Hosts, not processes"):
 *
 *   host a   NATS n1   Redis primary (redis-1)   sentinel-1
 *   host b   NATS n2   Redis replica (redis-2)   sentinel-2
 *   host c   NATS n3                             sentinel-3
 *
 * One 3-node JetStream cluster (cluster `csi`, streams at 3 replicas, every write fsynced before
 * its ack: testkit's launcher adds `sync_interval: always`), each node listening on its host's
 * address; its routes ping every second and give up after 3 missed pongs, so a cut link shows in
 * /routez within seconds (the default, 2 minutes × 2, would hide a partition for 4 minutes).
 * Sentinel quorum 2: any two hosts that hear each other can fail the primary over. Returned as
 * HaServers, so the chaos run's checks and waits (streams healed, the stream's copies) work as
 * with `--ha`.
 */
import path from "node:path";
import { type LocalServer, SENTINEL_CONF, startServer, writeConfigDurable } from "@csi/testkit";
import {
  formedJetStream,
  HA_DOWN_AFTER_MS,
  HA_MASTER_NAME,
  HA_NATS_CLUSTER,
  type HaServers,
  redisReplicaInSync,
  serversView,
  untilSeen,
  withRedis,
} from "../ha-servers.js";
import { SentinelEvents } from "../ha-watch.js";
import type { Host } from "./netns.js";

export const NATS_PORT = 4222;
const ROUTE_PORT = 6222;
export const REDIS_PORT = 6379;
export const SENTINEL_PORT = 26379;
/** Route pings: a cut link is seen after about ROUTE_PING_S × ROUTE_PING_MAX seconds. */
export const ROUTE_PING_S = 1;
export const ROUTE_PING_MAX = 3;
const FAILOVER_TIMEOUT_MS = 3000;

export interface HostServers extends HaServers {
  /** The hosts, in the order of `nats` (n1 on a, …). */
  hosts: Host[];
  /** Sentinels' addresses with the host's own first (REDIS_SENTINELS of a service on it). */
  sentinelsFrom(host: Host): string;
}

const placeOf = (h: Host) => ({ host: h.addr, wrap: h.wrap });
/** Redis and Sentinel on a host's address are reached from other hosts: not loopback, so protected mode would refuse them. */
const OPEN = ["--protected-mode", "no"];

async function startNatsNode(host: Host, i: number, hosts: Host[], dir: string): Promise<LocalServer> {
  const conf = path.join(dir, `n${i + 1}.hosts.conf`);
  const routes = hosts.filter((o) => o !== host).map((o) => `"nats://${o.addr}:${ROUTE_PORT}"`);
  writeConfigDurable(
    conf,
    [
      `server_name: n${i + 1}`,
      `cluster { name: ${HA_NATS_CLUSTER}, listen: "${host.addr}:${ROUTE_PORT}", routes: [${routes.join(", ")}], ping_interval: "${ROUTE_PING_S}s", ping_max: ${ROUTE_PING_MAX} }`,
      "",
    ].join("\n"),
  );
  return startServer("nats", path.join(dir, `n${i + 1}`), NATS_PORT, ["-c", conf], { at: placeOf(host) });
}

/** Starts the NATS cluster across the hosts; resolves once a stream at 3 replicas can be placed (a meta group formed short started afresh). */
const startNats = (hosts: Host[], dir: string, started: LocalServer[]): Promise<LocalServer[]> =>
  formedJetStream(() => Promise.all(hosts.map((h, i) => startNatsNode(h, i, hosts, dir))), started);

async function startRedis(hosts: Host[], dir: string, started: LocalServer[]): Promise<{ redis: LocalServer[]; sentinels: LocalServer[] }> {
  const [a, b] = hosts as [Host, Host, Host];
  const primary = await startServer("redis", path.join(dir, "redis-1"), REDIS_PORT, OPEN, { at: placeOf(a) });
  started.push(primary);
  const replica = await startServer("redis", path.join(dir, "redis-2"), REDIS_PORT, [...OPEN, "--replicaof", a.addr, String(REDIS_PORT)], { at: placeOf(b) });
  started.push(replica);
  await redisReplicaInSync(replica);
  const sentinels: LocalServer[] = [];
  for (const [i, h] of hosts.entries()) {
    const sdir = path.join(dir, `sentinel-${i + 1}`);
    const conf = [
      `sentinel monitor ${HA_MASTER_NAME} ${a.addr} ${REDIS_PORT} 2`,
      `sentinel down-after-milliseconds ${HA_MASTER_NAME} ${HA_DOWN_AFTER_MS}`,
      `sentinel failover-timeout ${HA_MASTER_NAME} ${FAILOVER_TIMEOUT_MS}`,
      `sentinel parallel-syncs ${HA_MASTER_NAME} 1`,
    ];
    writeConfigDurable(path.join(sdir, SENTINEL_CONF), `${conf.join("\n")}\n`);
    const s = await startServer("sentinel", sdir, SENTINEL_PORT, OPEN, { at: placeOf(h) });
    started.push(s);
    sentinels.push(s);
  }
  await untilSeen("the sentinels to know the replica and each other", async () => ({
    done: await sentinelsAgree(sentinels, 1),
    seen: await sentinelsView(sentinels),
  }));
  return { redis: [primary, replica], sentinels };
}

/** Each sentinel's view of the master (SENTINEL MASTER: ip, port, num-slaves, num-other-sentinels…). */
const viewsOf = (sentinels: LocalServer[]) =>
  Promise.all(
    sentinels.map((s) =>
      withRedis(s.url, async (r) => {
        const flat = (await r.call("SENTINEL", "MASTER", HA_MASTER_NAME)) as string[];
        return Object.fromEntries(Array.from({ length: flat.length / 2 }, (_, i) => [flat[2 * i], flat[2 * i + 1]])) as Record<string, string>;
      }),
    ),
  );

/** What the sentinels say of the master, in a line (a wait's progress). */
async function sentinelsView(sentinels: LocalServer[]): Promise<string> {
  const views = await viewsOf(sentinels);
  return views
    .map((v, i) => `sentinel-${i + 1}: master ${v.ip}:${v.port}, ${v["num-slaves"]} replica(s), ${v["num-other-sentinels"]} other sentinel(s)`)
    .join("; ");
}

/** Every sentinel names the same master and knows `replicas` replicas of it and the other sentinels. */
export async function sentinelsAgree(sentinels: LocalServer[], replicas: number): Promise<boolean> {
  const views = await viewsOf(sentinels);
  const masters = new Set(views.map((v) => `${v.ip}:${v.port}`));
  return masters.size === 1 && views.every((v) => Number(v["num-slaves"]) >= replicas && Number(v["num-other-sentinels"]) >= sentinels.length - 1);
}

export async function startHostServers(hosts: Host[], dir: string): Promise<HostServers> {
  const started: LocalServer[] = [];
  try {
    const nats = await startNats(hosts, dir, started);
    const { redis, sentinels } = await startRedis(hosts, dir, started);
    const events = new SentinelEvents();
    await events.watch(sentinels).catch((err: unknown) => {
      events.close();
      throw err;
    });
    return hostServersOf(hosts, nats, redis, sentinels, events);
  } catch (err) {
    await Promise.all(started.map((s) => s.stop()));
    throw err;
  }
}

function hostServersOf(hosts: Host[], nats: LocalServer[], redis: LocalServer[], sentinels: LocalServer[], sentinelEvents: SentinelEvents): HostServers {
  const addr = (s: LocalServer) => new URL(s.url).host;
  const sentinelAddrs = sentinels.map(addr).join(",");
  const natsUrl = nats.map((n) => n.url).join(",");
  const redisPrimary = async () => {
    for (const s of sentinels) {
      const got = await withRedis(s.url, (r) => r.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", HA_MASTER_NAME)).catch(() => undefined);
      const found = Array.isArray(got) ? redis.find((x) => addr(x) === `${got[0]}:${got[1]}`) : undefined;
      if (found) return found;
    }
    throw new Error("no sentinel names a master");
  };
  return {
    hosts,
    nats,
    natsUrl,
    redis,
    sentinels,
    sentinelAddrs,
    masterName: HA_MASTER_NAME,
    env: { NATS_URL: natsUrl, REDIS_SENTINELS: sentinelAddrs, REDIS_MASTER_NAME: HA_MASTER_NAME, STREAM_REPLICAS: String(nats.length) },
    sentinelsFrom: (host) => {
      const i = hosts.indexOf(host);
      return [sentinels[i], ...sentinels.filter((_, j) => j !== i)].flatMap((s) => (s ? [addr(s)] : [])).join(",");
    },
    ...serversView({ nats, redis, sentinels, sentinelEvents, redisPrimary }),
  };
}
