/**
 * The replicated servers of `npm start -- --ha` and test/ha.test.ts, on loopback (docs/operations.md,
 * "Beyond one machine"):
 *
 *  - a 3-node nats-server cluster (cluster name `csi`, server names n1..n3, JetStream on each with
 *    its own store directory, routes between them on free ports); the services get the three
 *    client URLs as one comma list;
 *  - a Redis primary and one replica (AOF on both), watched by 3 Sentinels (master name `csi`,
 *    quorum 2, short timeouts: a dead primary is replaced within a few seconds).
 *
 * Each server is a LocalServer (local-servers.ts): it can be stopped, SIGKILLed and restarted on the
 * same port with the same data. `startHaServers` returns once JetStream can place a stream on all
 * three nodes and every sentinel knows the replica and the other two sentinels, so streams with 3
 * replicas can be made and a failover can happen at once.
 */
import { mkdirSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { freePort, type LocalServer, SENTINEL_CONF, startServer, writeConfigDurable } from "@csi/testkit";
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, jetstreamManager, StorageType, type StreamInfo } from "@nats-io/jetstream";
import { type ConnectionOptions, connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { natsClusterView, SentinelEvents } from "./ha-watch.js";
import { recordOf, type StreamCopy } from "./stream-copies.js";

export const HA_NATS_CLUSTER = "csi";
export const HA_MASTER_NAME = "csi";
/**
 * Sentinel's view of a dead primary: subjectively down after this, then a failover. 500 ms: with
 * 1 s the sentinels announced +switch-master 2.3 s after a primary's SIGKILL and the window was
 * 2.4 s (issue 39 asks ≤ 2 s); the rest of the failover (the sentinels' agreement, the vote, the
 * promotion seen in the replica's INFO) is Sentinel's own.
 */
export const HA_DOWN_AFTER_MS = 500;
const HA_FAILOVER_TIMEOUT_MS = 3000;
const HA_NATS_NODES = 3;
const HA_SENTINELS = 3;
/**
 * How long a wait of the harness goes on while nothing it watches changes: a safety net, not a
 * schedule. Each wait ends at the event it waits for, and is given up only once what the engine
 * reports (a cluster's routes and meta group, a replica's lag, Sentinel's events) has stood still
 * this long; while the engine makes progress it waits on. nats-server promises no time for a
 * cluster to form or a replica to catch up; on a machine at load ~20 on 2 cores a 3-node cluster
 * took more than 30 s to accept a stream at 3 replicas.
 */
export const QUIET_MS = 180_000;

export interface HaServers {
  /** n1, n2, n3. */
  nats: LocalServer[];
  /** The client URLs of the NATS nodes as one comma list (NATS_URL). */
  natsUrl: string;
  /** The Redis server started as primary, then the one started as its replica (which is which changes on a failover). */
  redis: LocalServer[];
  sentinels: LocalServer[];
  /** The sentinels' addresses, `127.0.0.1:port,…` (REDIS_SENTINELS). */
  sentinelAddrs: string;
  masterName: string;
  /** What the services need: NATS_URL, REDIS_SENTINELS, REDIS_MASTER_NAME, STREAM_REPLICAS=3. */
  env: Record<string, string>;
  /** Every server, each with a name for the stack lock ("nats-n1", "redis-1", "sentinel-2"). */
  named(): { name: string; server: LocalServer }[];
  /** The Redis server the sentinels name as master now. */
  redisPrimary(): Promise<LocalServer>;
  /** What the sentinels said last (their pub/sub events: +sdown, +switch-master, +slave…), and when. */
  sentinelEvents: SentinelEvents;
  /** The NATS node that leads a stream now (JetStream's stream info). */
  streamLeader(stream: string): Promise<LocalServer>;
  /** Resolves once the stream has a leader and every other node is a current replica of it (rejects after `quietMs` without progress). */
  streamHealed(stream: string, quietMs?: number): Promise<void>;
  /** The same for every stream of the cluster. */
  streamsHealed(quietMs?: number): Promise<void>;
  /** Resolves once the sentinels name a master other than `old` (rejects after `quietMs` in which no sentinel said anything). */
  promotedAway(old: LocalServer, quietMs?: number): Promise<void>;
  /** Stops every server: the sentinels first (no failover while stopping), then Redis, then NATS. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns true; throws with `what` and the last error after `ms` (a fixed bound: for waits outside the replicated servers). */
export async function until(what: string, probe: () => Promise<boolean>, ms = QUIET_MS): Promise<void> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      if (await probe()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`${what} not within ${ms} ms${last ? `: ${(last as Error).message ?? last}` : ""}`);
    await sleep(200);
  }
}

/** One look at what a wait waits for: whether it is there, and what was seen (a change of it is progress). */
export interface Look {
  done: boolean;
  seen: string;
}

/**
 * Looks again and again (every `everyMs`) until `look` says done. Gives up only after `quietMs` in
 * which what it saw did not change (a failed look is seen as its error), saying what it saw last:
 * while the engine makes progress (a route comes up, a replica's lag shrinks, a sentinel speaks) the
 * wait goes on.
 */
export async function untilSeen(what: string, look: () => Promise<Look>, quietMs = QUIET_MS, everyMs = 100): Promise<void> {
  let seen = "nothing yet";
  let changedAt = Date.now();
  for (;;) {
    const now = await look().catch((err: unknown): Look => ({ done: false, seen: `error: ${(err as Error)?.message ?? err}` }));
    if (now.done) return;
    if (now.seen !== seen) {
      seen = now.seen;
      changedAt = Date.now();
    }
    if (Date.now() - changedAt > quietMs) throw new Error(`${what}: nothing changed for ${quietMs} ms; last seen: ${seen}`);
    await sleep(everyMs);
  }
}

/** A flat Redis reply (`[k1, v1, k2, v2…]`) as a record. */
const pairs = (flat: unknown): Record<string, string> => {
  const a = Array.isArray(flat) ? (flat as string[]) : [];
  return Object.fromEntries(Array.from({ length: a.length / 2 }, (_, i) => [a[2 * i], a[2 * i + 1]]));
};

/** Runs `f` on a direct, single-shot connection to one Redis server or sentinel (no reconnects, no Sentinel). */
export async function withRedis<T>(url: string, f: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 });
  r.on("error", () => {});
  try {
    await r.connect();
    return await f(r);
  } finally {
    r.disconnect();
  }
}

/**
 * Lame-duck mode on the nodes (SIGUSR2, `nats-server --signal ldm`): the node hands its Raft
 * leaderships over at once, stops taking clients, waits the grace period, then closes its clients
 * over the duration (at most one a second: a handful of clients takes a few seconds) and exits.
 * nats-server takes no duration under 30 s.
 */
export const LAME_DUCK = { durationS: 30, graceMs: 1000 };

/** The configuration every node starts with: lame-duck timing, and the caller's file (an account layout) included. */
function clusterConfig(dir: string, natsConfig?: string): string {
  const conf = path.join(dir, "cluster.conf");
  const lines = [`lame_duck_duration: "${LAME_DUCK.durationS}s"`, `lame_duck_grace_period: "${LAME_DUCK.graceMs}ms"`];
  if (natsConfig) lines.push(`include ${JSON.stringify(path.relative(path.dirname(conf), path.resolve(natsConfig)))}`);
  mkdirSync(dir, { recursive: true });
  writeConfigDurable(conf, `${lines.join("\n")}\n`);
  return conf;
}

async function startNatsCluster(dir: string, extraArgs: string[]): Promise<LocalServer[]> {
  const ports = await Promise.all(Array.from({ length: HA_NATS_NODES }, async () => ({ client: await freePort(), route: await freePort() })));
  const route = (p: number) => `nats://127.0.0.1:${p}`;
  return Promise.all(
    ports.map((p, i) =>
      startServer("nats", path.join(dir, `n${i + 1}`), p.client, [
        ...extraArgs,
        ...["--name", `n${i + 1}`, "--cluster_name", HA_NATS_CLUSTER, "--cluster", route(p.route)],
        ...[
          "--routes",
          ports
            .filter((o) => o !== p)
            .map((o) => route(o.route))
            .join(","),
        ],
      ]),
    ),
  );
}

/** A Redis primary, its replica and the sentinels (each told to `started` as it runs), returned once a failover could happen. */
async function startRedisWithSentinels(
  dir: string,
  events: SentinelEvents,
  started: LocalServer[],
): Promise<{ redis: LocalServer[]; sentinels: LocalServer[] }> {
  const primary = await startServer("redis", path.join(dir, "redis-1"));
  started.push(primary);
  const replica = await startServer("redis", path.join(dir, "redis-2"), undefined, ["--replicaof", "127.0.0.1", String(primary.port)]);
  started.push(replica);
  await redisReplicaInSync(replica);
  const sentinels: LocalServer[] = [];
  for (let i = 1; i <= HA_SENTINELS; i++) {
    const sdir = path.join(dir, `sentinel-${i}`);
    const conf = [
      `sentinel monitor ${HA_MASTER_NAME} 127.0.0.1 ${primary.port} 2`,
      `sentinel down-after-milliseconds ${HA_MASTER_NAME} ${HA_DOWN_AFTER_MS}`,
      `sentinel failover-timeout ${HA_MASTER_NAME} ${HA_FAILOVER_TIMEOUT_MS}`,
      `sentinel parallel-syncs ${HA_MASTER_NAME} 1`,
    ];
    writeConfigDurable(path.join(sdir, SENTINEL_CONF), `${conf.join("\n")}\n`);
    sentinels.push(await startServer("sentinel", sdir));
    started.push(...sentinels.slice(-1));
  }
  await events.watch(sentinels);
  // A failover needs a quorum that knows the replica: wait until every sentinel sees it and the
  // others (each learns them from the master's INFO and the hello channel: +slave, +sentinel).
  await untilSeen("the sentinels to know the replica and each other", async () => {
    const views = await Promise.all(sentinels.map((s) => withRedis(s.url, async (r) => pairs(await r.call("SENTINEL", "MASTER", HA_MASTER_NAME)))));
    const known = views.map((v, i) => `sentinel-${i + 1}: ${v["num-slaves"]} replica(s), ${v["num-other-sentinels"]} other sentinel(s)`).join("; ");
    return {
      done: views.every((v) => Number(v["num-slaves"]) >= 1 && Number(v["num-other-sentinels"]) >= HA_SENTINELS - 1),
      seen: `${known}; last event: ${events.last()}`,
    };
  });
  return { redis: [primary, replica], sentinels };
}

/** Made and deleted at start: JetStream is ready once a stream at 3 replicas can be placed. */
const READY_PROBE = "CSI_HA_READY_PROBE";

/**
 * A first start whose meta group left a node out: every node routed to every other and agreeing on
 * a meta leader, but the group smaller than the cluster. nats-server 2.10.27 bootstraps its meta
 * group from the peers a node knows when JetStream starts; on a loaded machine (two CPU hogs) a
 * node whose routes came up late stayed out of it — cluster size 2, the R3 placement probe refused
 * ("no suitable peers for placement"), nothing changing for 180 s. Such a start is stopped, its
 * store directories removed and the cluster started afresh, up to BOOTSTRAP_ATTEMPTS times; a
 * start is taken as stuck once it stayed so for BOOTSTRAP_STUCK_MS (statsz, which would let the
 * leader add the node, come every few seconds).
 */
const BOOTSTRAP_STUCK_MS = 30_000;
const BOOTSTRAP_ATTEMPTS = 3;

/**
 * The 3-node NATS cluster alone (`started` is told of each node as it runs), returned once streams
 * at 3 replicas can be made. A meta leader is not enough: nats-server 2.10 elects one before it
 * knows every peer, and refuses an R3 stream until then ("no suitable peers for placement"). So the
 * wait follows what the nodes report (natsClusterView: routes, the meta leader, its peers current)
 * and, once the cluster has formed, makes (and deletes) a small in-memory R3 stream until it is
 * accepted. It gives up only when nothing the nodes report has changed for QUIET_MS; a first start
 * that left a node out of the meta group is started afresh (BOOTSTRAP_STUCK_MS).
 */
export async function startJetStreamCluster(
  dir: string,
  o: { natsConfig?: string; natsAccess?: ConnectionOptions } = {},
  started: LocalServer[] = [],
): Promise<LocalServer[]> {
  return formedJetStream(() => startNatsCluster(dir, ["-c", clusterConfig(dir, o.natsConfig)]), started, o.natsAccess);
}

/**
 * Starts a JetStream cluster with `start` (`started` is told of each node) and returns it once a
 * stream at 3 replicas can be placed; a first start that left a node out of its meta group is
 * stopped, its store directories removed, and started afresh (BOOTSTRAP_ATTEMPTS). The one-machine
 * HA servers and the three hosts (hosts/servers.ts) start their nodes each their own way.
 */
export async function formedJetStream(start: () => Promise<LocalServer[]>, started: LocalServer[], access?: ConnectionOptions): Promise<LocalServer[]> {
  for (let attempt = 1; ; attempt++) {
    const nats = await start();
    started.push(...nats);
    const stuck = await jetStreamReady(nats, access);
    if (!stuck) return nats;
    await Promise.all(nats.map((n) => n.stop()));
    if (attempt >= BOOTSTRAP_ATTEMPTS) throw new Error(`the JetStream cluster left a node out of its meta group ${attempt} times: ${stuck}`);
    process.stderr.write(`HA servers: the JetStream cluster left a node out of its meta group (${stuck}); starting it afresh\n`);
    await Promise.all(nats.map((n) => rm(n.dataDir, { recursive: true, force: true })));
  }
}

/** Waits until a stream at 3 replicas can be placed (undefined), or the meta group stays undersized (what the nodes report then). */
async function jetStreamReady(nats: LocalServer[], access?: ConnectionOptions): Promise<string | undefined> {
  const nc = await connect({ ...access, servers: nats.map((n) => n.url) });
  let undersizedSince: number | undefined;
  let stuck: string | undefined;
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5000, checkAPI: false });
    await untilSeen(
      "the JetStream cluster (a stream at 3 replicas placed)",
      async () => {
        const view = await natsClusterView(nats);
        undersizedSince = view.undersized ? (undersizedSince ?? Date.now()) : undefined;
        if (undersizedSince !== undefined && Date.now() - undersizedSince > BOOTSTRAP_STUCK_MS) stuck = view.text;
        if (stuck || !view.formed) return { done: stuck !== undefined, seen: view.text };
        const placed = await jsm.streams.add({ name: READY_PROBE, storage: StorageType.Memory, num_replicas: HA_NATS_NODES }).then(
          () => jsm.streams.delete(READY_PROBE),
          (err: Error) => err,
        );
        return placed === true
          ? { done: true, seen: view.text }
          : { done: false, seen: `${view.text}; placement: ${placed instanceof Error ? placed.message : placed}` };
      },
      QUIET_MS,
      200,
    );
    return stuck;
  } finally {
    await nc.close();
  }
}

/** A stream's place in the cluster (JetStream's stream info): its leader and the other replicas, by node. */
export interface StreamPlacement {
  leader: LocalServer | undefined;
  replicas: { server: LocalServer | undefined; current: boolean; offline: boolean; lag: number }[];
}

/** Runs `f` with JetStream's API through the nodes of a cluster started here that run, leaving out `skip` (a node frozen with SIGSTOP would hold the question). */
export async function withJetStream<T>(nats: LocalServer[], f: (jsm: JetStreamManager) => Promise<T>, skip?: LocalServer): Promise<T> {
  const c = await connect({ servers: nats.filter((n) => n.running && n !== skip).map((n) => n.url), timeout: 2000 });
  try {
    return await f(await jetstreamManager(c, { timeout: 2000 }));
  } finally {
    await c.close();
  }
}

/** A stream's place from its info, its nodes named n1, n2, n3 in the order of `nats`. */
function placementOf(nats: LocalServer[], cluster: StreamInfo["cluster"]): StreamPlacement {
  const byName = (name: string | undefined) => nats.find((_, i) => name === `n${i + 1}`);
  return {
    leader: byName(cluster?.leader),
    replicas: (cluster?.replicas ?? []).map((p) => ({ server: byName(p.name), current: p.current, offline: p.offline === true, lag: p.lag ?? 0 })),
  };
}

/** Where `stream` is now, asked through the nodes that run, leaving out `skip`. */
export const streamPlacementOf = (nats: LocalServer[], stream: string, skip?: LocalServer): Promise<StreamPlacement> =>
  withJetStream(nats, async (jsm) => placementOf(nats, (await jsm.streams.info(stream)).cluster), skip);

/** The node of a cluster started here that leads `stream` now. */
export async function streamLeaderOf(nats: LocalServer[], stream: string, skip?: LocalServer): Promise<LocalServer> {
  const found = (await streamPlacementOf(nats, stream, skip)).leader;
  if (!found) throw new Error(`stream ${stream} has no leader`);
  return found;
}

/** Whole: a leader, and every other node of the cluster a current replica (a restarted or resumed node has caught up). */
const whole = (nats: LocalServer[], p: StreamPlacement) =>
  p.leader !== undefined && p.replicas.length === nats.length - 1 && p.replicas.every((r) => r.current && !r.offline);

/**
 * A placement as a wait reports it: "leader n2; n1 current, n3 behind". The lag is left out: under
 * load it changes while a stuck replica never catches up, and would pass for progress.
 */
const placementText = (nats: LocalServer[], p: StreamPlacement) => {
  const name = (s: LocalServer | undefined) => (s ? `n${nats.indexOf(s) + 1}` : "?");
  const replica = (r: StreamPlacement["replicas"][number]) => `${name(r.server)} ${r.offline ? "offline" : r.current ? "current" : "behind"}`;
  return `leader ${p.leader ? name(p.leader) : "none"}; ${p.replicas.map(replica).join(", ") || "no replicas"}`;
};

/** Where `stream` is as a wait reports it ("leader n2; n1 current, n3 behind"), or the error that answered. */
export const placementSeen = (nats: LocalServer[], stream: string): Promise<string> =>
  streamPlacementOf(nats, stream).then(
    (p) => placementText(nats, p),
    (err: Error) => `error: ${err.message}`,
  );

/** The node that leads `stream` once it has a leader; gives up after `quietMs` in which its placement did not change. */
export async function streamLedOf(nats: LocalServer[], stream: string, quietMs = QUIET_MS): Promise<LocalServer> {
  let leader: LocalServer | undefined;
  await untilSeen(
    `a leader of ${stream}`,
    async () => {
      const p = await streamPlacementOf(nats, stream);
      leader = p.leader;
      return { done: leader !== undefined, seen: placementText(nats, p) };
    },
    quietMs,
  );
  return leader as LocalServer;
}

/** Resolves once `stream` is whole again; gives up after `quietMs` in which its placement did not change. */
export const streamHealedOf = (nats: LocalServer[], stream: string, quietMs = QUIET_MS) =>
  untilSeen(
    `every replica of ${stream} current`,
    async () => {
      const p = await streamPlacementOf(nats, stream);
      return { done: whole(nats, p), seen: placementText(nats, p) };
    },
    quietMs,
  );

/** Resolves once every stream of the cluster is whole again (the services' streams of nodes and node work too, not only the event log). */
export const streamsHealedOf = (nats: LocalServer[], quietMs = QUIET_MS) =>
  untilSeen(
    "every replica of every stream current",
    () =>
      withJetStream(nats, async (jsm) => {
        const seen: string[] = [];
        let all = true;
        for await (const info of jsm.streams.list()) {
          const p = placementOf(nats, info.cluster);
          all &&= whole(nats, p);
          seen.push(`${info.config.name}: ${placementText(nats, p)}`);
        }
        return { done: all, seen: seen.join("; ") };
      }),
    quietMs,
  );

/**
 * Each node's own copy of `stream` (what it holds at every sequence: subject and a digest of the
 * data), or undefined for a node that would not lead. JetStream answers a message get from the
 * stream's leader's store, so each node is made the leader in turn (leader step-downs, each
 * electing another node at random, until it leads) and the stream read through it. Costs an
 * election per step-down: for checks after the load, not during it.
 */
export async function streamCopiesOf(nats: LocalServer[], stream: string, stepDowns = 30): Promise<(StreamCopy | undefined)[]> {
  const nc = await connect({ servers: nats.map((n) => n.url), maxReconnectAttempts: -1 });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5000 });
    const copies: (StreamCopy | undefined)[] = [];
    for (const node of nats) {
      const leads = () =>
        streamLeaderOf(nats, stream).then(
          (l) => l === node,
          () => false,
        );
      const led = async () => {
        for (let i = 0; i < stepDowns && !(await leads()); i++) {
          await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, "", { timeout: 5000 }).catch(() => {});
          await streamLedOf(nats, stream);
        }
        return leads();
      };
      copies.push(
        await led()
          .then((yes) => (yes ? readCopy(jsm, stream) : undefined))
          .catch(() => undefined),
      );
    }
    return copies;
  } finally {
    await nc.close();
  }
}

/** The stream as its leader holds it: every sequence's record (a removed one left out); a get that keeps failing fails the read. */
async function readCopy(jsm: JetStreamManager, stream: string): Promise<StreamCopy> {
  const { first_seq, last_seq } = (await jsm.streams.info(stream)).state;
  const copy: StreamCopy = new Map();
  for (let seq = first_seq; seq <= last_seq; seq++) {
    for (let attempt = 1; ; attempt++) {
      const m = await jsm.streams.getMessage(stream, { seq }).then(
        (x) => x ?? null,
        (err: unknown) => {
          if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound) return null;
          if (attempt >= 3) throw err;
          return undefined;
        },
      );
      if (m === undefined) continue;
      if (m) copy.set(seq, recordOf(m.subject, m.data));
      break;
    }
  }
  return copy;
}

/** The Redis server `s` runs as a replica whose link to its master is up (progress: its role, link and replication offset). */
export const redisReplicaInSync = (s: LocalServer, quietMs = QUIET_MS) =>
  untilSeen(
    `redis :${s.port} a replica in sync`,
    async () => {
      const info = await withRedis(s.url, (r) => r.info("replication"));
      const field = (k: string) => new RegExp(`^${k}:(.*)$`, "m").exec(info)?.[1]?.trim() ?? "?";
      return {
        done: field("role") === "slave" && field("master_link_status") === "up",
        seen: `role ${field("role")}, master :${field("master_port")}, link ${field("master_link_status")}, sync in progress ${field("master_sync_in_progress")}, offset ${field("slave_repl_offset")}`,
      };
    },
    quietMs,
  );

/** What a set of replicated servers already started offers its users beyond its addresses (the HA harness's and the hosts stack's alike). */
export function serversView(s: {
  nats: LocalServer[];
  redis: LocalServer[];
  sentinels: LocalServer[];
  sentinelEvents: SentinelEvents;
  redisPrimary: () => Promise<LocalServer>;
}): Pick<HaServers, "named" | "redisPrimary" | "sentinelEvents" | "streamLeader" | "streamHealed" | "streamsHealed" | "promotedAway" | "stop"> {
  const { nats, redis, sentinels, sentinelEvents, redisPrimary } = s;
  return {
    named: () => [
      ...nats.map((server, i) => ({ name: `nats-n${i + 1}`, server })),
      ...redis.map((server, i) => ({ name: `redis-${i + 1}`, server })),
      ...sentinels.map((server, i) => ({ name: `sentinel-${i + 1}`, server })),
    ],
    redisPrimary,
    sentinelEvents,
    streamLeader: (stream) => streamLeaderOf(nats, stream),
    streamHealed: (stream, ms) => streamHealedOf(nats, stream, ms),
    streamsHealed: (ms) => streamsHealedOf(nats, ms),
    promotedAway: (old, quietMs) =>
      untilSeen("the sentinels name a new master", async () => ({ done: (await redisPrimary()) !== old, seen: sentinelEvents.last() }), quietMs),
    stop: async () => {
      sentinelEvents.close();
      await Promise.all(sentinels.map((x) => x.stop()));
      await Promise.all(redis.map((x) => x.stop()));
      await Promise.all(nats.map((x) => x.stop()));
    },
  };
}

/**
 * `natsConfig`: a configuration file every NATS node starts with (`-c`; the account layout of a
 * locked-down stack), and `natsAccess`: how to connect to it to wait for JetStream (a member of an
 * account with JetStream).
 */
export async function startHaServers(dir: string, o: { natsConfig?: string; natsAccess?: ConnectionOptions } = {}): Promise<HaServers> {
  const started: LocalServer[] = [];
  const sentinelEvents = new SentinelEvents();
  try {
    const nats = await startJetStreamCluster(dir, o, started);
    const natsUrl = nats.map((n) => n.url).join(",");
    const { redis, sentinels } = await startRedisWithSentinels(dir, sentinelEvents, started);
    const sentinelAddrs = sentinels.map((s) => `127.0.0.1:${s.port}`).join(",");
    const redisPrimary = async () => {
      for (const s of sentinels.filter((x) => x.running)) {
        const addr = await withRedis(s.url, (r) => r.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", HA_MASTER_NAME)).catch(() => undefined);
        const port = Array.isArray(addr) ? Number(addr[1]) : undefined;
        const found = redis.find((x) => x.port === port);
        if (found) return found;
      }
      throw new Error("no sentinel names a master");
    };
    return {
      nats,
      natsUrl,
      redis,
      sentinels,
      sentinelAddrs,
      masterName: HA_MASTER_NAME,
      env: {
        NATS_URL: natsUrl,
        NATS_MONITOR_URL: nats.flatMap((n) => (n.monitorUrl ? [n.monitorUrl] : [])).join(","),
        REDIS_SENTINELS: sentinelAddrs,
        REDIS_MASTER_NAME: HA_MASTER_NAME,
        STREAM_REPLICAS: String(HA_NATS_NODES),
      },
      ...serversView({ nats, redis, sentinels, sentinelEvents, redisPrimary }),
    };
  } catch (err) {
    sentinelEvents.close();
    await Promise.all(started.map((s) => s.stop()));
    throw err;
  }
}
