/**
 * The whole CSI stack on this machine, as `npm start` runs it and as `npm run sanity` and
 * `npm run chaos` run it in a temporary directory: nats-server + redis-server (unless URLs are
 * given), one or more journal replicas per cluster of the clusters file, a controller
 * (<runDir>/csi-controller.sock) and a node-agent (<runDir>/csi-node.sock). Without a clusters
 * file it writes one (<runDir>/clusters.json): one cluster, or `clusters` of them
 * (`CLUSTERS=2 npm start`), all on the one NATS and Redis. Each service (and each server we started) can be killed
 * and started again on the same socket, port and data (the chaos driver does).
 *
 *   const stack = await startStack({ dataDir, runDir, journalReplicas: 3 });   // rejects after stopping what it started
 *   await stack.journals[0].kill(); await stack.journals[0].start();
 *   await stack.stop();                                     // services first, then our servers
 *
 * `ha: true` (`npm start -- --ha`): instead of one nats-server and one redis-server, a 3-node NATS
 * cluster and a Redis primary + replica behind 3 Sentinels (ha-servers.ts), streams with 3 replicas,
 * and 2 journal replicas per cluster unless `journalReplicas` says otherwise.
 *
 * `ceph: true` (`npm start -- --ceph`): a single-node Ceph kept under <dataDir>/ceph (started again
 * over its data by the next start), stopped with the stack; the cluster's default pool is an RBD pool on it.
 *
 * The data and run directories are locked for the life of the stack (stack-lock.ts): a second
 * stack on them is refused (StackInUse) before it starts or writes anything.
 *
 * A service is started when it is ready: it writes its READY_FILE (<runDir>/<name>.ready.json)
 * once its readiness checks pass, whatever its LOG_LEVEL; its ops listener (/metrics, /healthz,
 * /readyz) is on 127.0.0.1 at a free port, named in that file (`stack.metricsUrls()`).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { writeAuthDir } from "@csi/cli/auth";
import { accessEnv, natsAccessFrom, REDIS_ADMIN_USER, redisAccessFrom } from "@csi/cli/auth-files";
import { DEFAULT_CLUSTERS, inboxPrefix, type NatsRole, resolveClusters, TOPOLOGY_KEY } from "@csi/contracts";
import { initFleet, natsConnectOptions, type RedisAccess } from "@csi/runtime";
import {
  type CephCluster,
  endProcess,
  isRunning,
  type LocalServer,
  loadJournalFunctionsAt,
  type ServiceProcess,
  spawnService,
  startCeph,
  startServer,
  whyNoCeph,
  whyNoReplicatedStreams,
} from "@csi/testkit";
import { connect } from "@nats-io/transport-node";
import { prepareDataDir } from "./data-dir.js";
import { type HaServers, startHaServers } from "./ha-servers.js";
import { StackLock } from "./stack-lock.js";

export interface StackOptions {
  dataDir: string;
  runDir: string;
  /** Use these servers instead of starting our own (data under <dataDir>/nats, <dataDir>/redis). */
  natsUrl?: string | undefined;
  redisUrl?: string | undefined;
  /** CSI node id of the node-agent (default: hostname). */
  nodeId?: string | undefined;
  /** How many local clusters to run when no clusters file is given (`CLUSTERS`, default 1). */
  clusters?: string | undefined;
  /** How many journal replicas per cluster (one queue group; REPLICA_ID journal-1, journal-2, …). Default 1. */
  journalReplicas?: number;
  /** Extra environment for the services. */
  env?: Record<string, string>;
  /** A service (also one started again) that is not ready in this long is killed and its start fails (default: no limit). */
  readyTimeoutMs?: number;
  /** Every log line of the services (pino JSON). */
  onLine?: (line: string) => void;
  /** The stack's own steps ("started embedded nats-server", { url }). */
  onStep?: (msg: string, extra: Record<string, unknown>) => void;
  /** Abort the start-up: what was started is stopped and startStack rejects. */
  signal?: AbortSignal;
  /**
   * Locked down (`SECURE=1 npm start`, docs/security.md): credentials for every role generated into
   * <runDir>/auth (files 0600), our nats-server and redis-server started with them, each service with
   * its role's. Only with the servers the stack starts itself.
   */
  secure?: boolean;
  /** Replicated servers (ha-servers.ts) under <dataDir>/ha: a NATS cluster, Redis with Sentinel; streams with 3 replicas. */
  ha?: boolean;
  /**
   * `npm start -- --ceph`: a single-node Ceph (testkit's startCeph: one monitor, manager and OSD)
   * kept under <dataDir>/ceph, and the cluster's default pool an RBD pool on it (`ceph`, Ceph pool
   * `rbd`, a `profile rbd` user); the file pool `default` stays beside it. Not with a clusters file
   * of one's own or several clusters.
   */
  ceph?: boolean;
}

/** One service of the stack, which can be killed and started again with the same environment and arguments. */
export interface StackService {
  /** "journal-1" (or "journal-<cluster>-1" with several clusters), "controller", "node-agent". */
  readonly name: string;
  /** The process running now, if any. */
  readonly process: ServiceProcess | undefined;
  readonly running: boolean;
  /** The ops listener of the process running now (http://127.0.0.1:port), once it is ready. */
  readonly metricsUrl: string | undefined;
  /** SIGKILL (a crash); waits for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after a grace period; waits for the exit. */
  stop(): Promise<void>;
  /** Start it again (same environment, arguments and sockets) unless it runs; waits until it serves. */
  start(): Promise<void>;
}

export interface Stack {
  controllerEndpoint: string;
  nodeEndpoint: string;
  nodeId: string;
  natsUrl: string;
  /** The Redis server (with `ha`: the primary at start; the services find the master through the sentinels). */
  redisUrl: string;
  /** With `ha`: the sentinels (REDIS_SENTINELS) and the master's name. */
  redisSentinels?: string;
  redisMasterName?: string;
  /** How a client reaches the stack's Redis (the URL, or the sentinels): for redisConnectOptions. */
  redisAccess: RedisAccess;
  /** The clusters file the services run with. */
  clustersFile: string;
  /** The clusters served (journals for each), the default first. */
  clusters: string[];
  /** The processes running now. */
  readonly services: ServiceProcess[];
  journals: StackService[];
  controller: StackService;
  nodeAgent: StackService;
  /** Each running service's ops listener (/metrics, /healthz, /readyz), by service name. */
  metricsUrls(): Record<string, string>;
  /** The servers this stack started (absent when given by URL); `ha` with `ha: true`; `ceph` with `ceph: true`. */
  servers: { nats?: LocalServer; redis?: LocalServer; ha?: HaServers; ceph?: CephCluster };
  /** A locked-down stack's credentials directory (csictl finds it through stack.json). */
  authDir?: string;
  /** Settles with the exit code of the first service that exits by itself (not through kill/stop above). */
  exited: Promise<number | null>;
  /** Stops the services, then the servers we started. Idempotent. */
  stop(): Promise<void>;
}

export async function startStack(opts: StackOptions): Promise<Stack> {
  const givenFile = opts.env?.CLUSTERS_FILE ?? process.env.CLUSTERS_FILE;
  const count = clusterCount(opts.clusters);
  checkOptions(opts, givenFile, count);
  prepareDataDir(opts.dataDir);
  mkdirSync(opts.runDir, { recursive: true });
  const lock = await StackLock.take([opts.dataDir, opts.runDir]); // StackInUse: nothing started, nothing written
  let exitedBySelf: (code: number | null) => void = () => {};
  const exited = new Promise<number | null>((resolve) => {
    exitedBySelf = resolve;
  });
  const run: StackRun = { opts, lock, servers: {}, managed: [], step: opts.onStep ?? (() => {}), exitedBySelf: (code) => exitedBySelf(code) };
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await Promise.all(run.managed.map((s) => s.stop()));
      await Promise.all([run.servers.nats, run.servers.redis, run.servers.ha, run.servers.ceph].map((s) => s?.stop()));
      await lock.release();
    })();
    return stopped;
  };
  try {
    const nodeId = opts.nodeId || os.hostname();
    const ceph = opts.ceph ? await startLocalCeph(run) : undefined;
    const clustersFile = givenFile ?? writeLocalClusters(opts.runDir, nodeId, count, ceph);
    const resolved = resolveClusters(JSON.parse(readFileSync(clustersFile, "utf8")), opts.dataDir);
    const clusters = [resolved.defaultCluster, ...resolved.clusters.map((c) => c.clusterID).filter((id) => id !== resolved.defaultCluster)];
    const auth = opts.secure ? await writeAuthDir(path.join(opts.runDir, "auth"), { clusters, nodes: [nodeId], force: true }) : undefined;
    if (auth) run.step("locked down: credentials generated", { authDir: auth.dir });
    const ha = opts.ha ? await startHa(run, auth) : undefined;
    if (ha && auth) run.step("--ha: Redis is not locked down (its replication and Sentinel ACL users are not built; docs/operations.md)", {});
    const natsUrl = ha?.natsUrl || opts.natsUrl || (await startEmbedded(run, "nats", auth ? ["-c", auth.natsConfig] : []));
    const redisUrl = ha?.redis[0]?.url || opts.redisUrl || (await startEmbedded(run, "redis", auth ? ["--aclfile", auth.redisAcl] : []));
    if (auth) await initFleetAccount(run, { natsUrl, authDir: auth.dir, clusters, nodeId, replicas: ha ? Number(ha.env.STREAM_REPLICAS) : 1 });
    // The journal's Redis function library, loaded before any journal starts by an identity that
    // may: our own servers' admin (SECURE=1; with --ha Redis is open) or default user. A Redis given
    // by URL: its journals load it if it is open, else its admin has (`csictl redis load-functions`).
    if (!opts.redisUrl) await loadJournalFunctionsAt(redisUrl, auth && !ha ? redisAccessFrom(auth.dir, REDIS_ADMIN_USER) : {});
    const env = {
      NATS_URL: natsUrl,
      // Our own nats-server: the journals check on its monitoring endpoint that it fsyncs every append.
      ...(run.servers.nats?.monitorUrl ? { NATS_MONITOR_URL: run.servers.nats.monitorUrl } : {}),
      // The stack's opt-out of durable acks (docs/operations.md, "Durability"): its servers and journals alike.
      ...(process.env.CSI_UNSAFE_NO_FSYNC === "1" ? { LOG_FSYNC: "off" } : {}),
      REDIS_URL: redisUrl,
      DATA_DIR: opts.dataDir,
      LOG_LEVEL: process.env.LOG_LEVEL ?? "info",
      CLUSTERS_FILE: clustersFile,
      ...ha?.env,
      ...opts.env,
    };
    const started = await startServices(run, { clusters, nodeId, env, authDir: auth?.dir, ha: ha !== undefined });
    const redisHa = ha ? { redisSentinels: ha.sentinelAddrs, redisMasterName: ha.masterName } : {};
    return {
      ...started,
      nodeId,
      natsUrl,
      redisUrl,
      ...redisHa,
      redisAccess: { redisUrl, ...redisHa },
      clustersFile: env.CLUSTERS_FILE,
      clusters,
      get services() {
        return run.managed.flatMap((s) => (s.process && s.running ? [s.process] : []));
      },
      metricsUrls: () => Object.fromEntries(run.managed.flatMap((s) => (s.running && s.metricsUrl ? [[s.name, s.metricsUrl]] : []))),
      servers: run.servers,
      ...(auth ? { authDir: auth.dir } : {}),
      exited,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** What one start of the stack shares among its steps: its options, its lock, what it started so far. */
interface StackRun {
  opts: StackOptions;
  lock: StackLock;
  servers: Stack["servers"];
  managed: StackService[];
  step: NonNullable<StackOptions["onStep"]>;
  exitedBySelf: (code: number | null) => void;
}

/** The options that cannot go together, refused before anything is started or written. */
function checkOptions(opts: StackOptions, givenFile: string | undefined, count: number): void {
  if (givenFile && opts.clusters) throw new Error("set CLUSTERS or CLUSTERS_FILE, not both (a clusters file says how many clusters it has)");
  if (opts.secure && (opts.natsUrl || opts.redisUrl))
    throw new Error(
      "SECURE=1 locks down the servers the stack starts itself; with NATS_URL/REDIS_URL, give the services their credentials (NATS_USER, NATS_PASSWORD, …)",
    );
  if (opts.ha && (opts.natsUrl || opts.redisUrl)) throw new Error("--ha starts its own replicated servers: not with NATS_URL/REDIS_URL");
  if (opts.ceph && (givenFile || count > 1))
    throw new Error("--ceph writes its own clusters file (one cluster, its default pool on the local Ceph): not with CLUSTERS_FILE or CLUSTERS");
  const noCeph = opts.ceph ? whyNoCeph() : undefined;
  if (noCeph) throw new Error(`--ceph: ${noCeph}`);
}

/** An embedded nats-server or redis-server under the data directory; its URL. */
async function startEmbedded(run: StackRun, kind: "nats" | "redis", args: string[] = []): Promise<string> {
  const s = await startServer(kind, path.join(run.opts.dataDir, kind), undefined, args);
  run.servers[kind] = s;
  await run.lock.add(`${kind}-server`, s.pid);
  run.step(`started embedded ${kind}-server`, { url: s.url });
  run.opts.signal?.throwIfAborted();
  return s.url;
}

/** The replicated servers of --ha (ha-servers.ts), locked down with `auth`'s NATS configuration when given. */
async function startHa(run: StackRun, auth?: { dir: string; natsConfig: string }): Promise<HaServers> {
  const fleet = { kind: "fleet" } as const;
  const h = await startHaServers(
    path.join(run.opts.dataDir, "ha"),
    auth
      ? {
          natsConfig: auth.natsConfig,
          natsAccess: natsConnectOptions({ natsUrl: "", ...natsAccessFrom(auth.dir, fleet) }, { inboxPrefix: inboxPrefix(fleet) }),
        }
      : {},
  );
  run.servers.ha = h;
  for (const { name, server: s } of h.named()) await run.lock.add(name, s.pid);
  run.step("started embedded replicated servers", { nats: h.natsUrl, sentinels: h.sentinelAddrs, masterName: h.masterName });
  const unsafe = whyNoReplicatedStreams();
  if (unsafe) run.step(`WARNING: ${unsafe}: a stream leader's crash can lose acknowledged events (docs/operations.md)`, {});
  run.opts.signal?.throwIfAborted();
  return h;
}

/** The single-node Ceph of --ceph, kept under <dataDir>/ceph. */
async function startLocalCeph(run: StackRun): Promise<CephCluster> {
  const ceph = await startCeph({ dir: path.join(run.opts.dataDir, "ceph") });
  run.servers.ceph = ceph;
  for (const [name, pid] of Object.entries(ceph.pids())) if (pid) await run.lock.add(`ceph-${name}`, pid);
  run.step("started a local single-node Ceph", { dir: ceph.dir, monitors: ceph.monitors, cephPool: ceph.pools[0], user: ceph.user });
  run.opts.signal?.throwIfAborted();
  return ceph;
}

/** The account layout: the FLEET account's streams and consumers, made by its operator before any service starts. */
async function initFleetAccount(run: StackRun, o: { natsUrl: string; authDir: string; clusters: string[]; nodeId: string; replicas: number }): Promise<void> {
  const fleet = { kind: "fleet" } as const;
  const nc = await connect(natsConnectOptions({ natsUrl: o.natsUrl, ...natsAccessFrom(o.authDir, fleet) }, { inboxPrefix: inboxPrefix(fleet) }));
  try {
    await initFleet(nc, o.clusters, [o.nodeId], { replicas: o.replicas });
  } finally {
    await nc.close();
  }
  run.step("fleet account initialised", { clusters: o.clusters, nodes: [o.nodeId] });
}

/** The journals (per cluster, per replica), the controller and the node-agent, each started once it is ready: the journals first. */
async function startServices(
  run: StackRun,
  o: { clusters: string[]; nodeId: string; env: Record<string, string>; authDir: string | undefined; ha: boolean },
): Promise<Pick<Stack, "controllerEndpoint" | "nodeEndpoint" | "journals" | "controller" | "nodeAgent">> {
  const { opts } = run;
  const { clusters, nodeId, env, authDir } = o;
  /** A role's credentials (none on an open stack). */
  // With --ha, Redis (primary, replica, sentinels) stays open on loopback: its replication and
  // Sentinel ACL users are not built (docs/operations.md), so no Redis credentials are given.
  const roleEnv = (role: NatsRole) => {
    if (!authDir) return {};
    const access = accessEnv(authDir, role);
    if (o.ha) for (const k of ["REDIS_USERNAME", "REDIS_PASSWORD"]) delete access[k];
    return access;
  };
  const controllerEndpoint = `unix://${path.join(opts.runDir, "csi-controller.sock")}`;
  const nodeEndpoint = `unix://${path.join(opts.runDir, "csi-node.sock")}`;
  const common = { onLine: opts.onLine, ...(opts.readyTimeoutMs === undefined ? {} : { readyTimeoutMs: opts.readyTimeoutMs }) };
  const readyFile = (name: string) => ({ READY_FILE: path.join(opts.runDir, `${name}.ready.json`) });
  const service = (name: string, launch: () => Promise<ServiceProcess>) => {
    const s = stackService(
      name,
      async () => {
        const p = await launch();
        await run.lock.add(name, p.child.pid);
        return p;
      },
      run.exitedBySelf,
    );
    run.managed.push(s);
    return s;
  };
  const replicas = Math.max(1, opts.journalReplicas ?? (o.ha ? 2 : 1));
  // One cluster: "journal", or "journal-1", "journal-2"… for replicas; several: the cluster too ("journal-local-2", "journal-local-2-1").
  const journals = clusters.flatMap((cluster) =>
    Array.from({ length: replicas }, (_, i) => {
      const name = ["journal", ...(clusters.length > 1 ? [cluster] : []), ...(replicas > 1 ? [String(i + 1)] : [])].join("-");
      const replica: Record<string, string> = replicas > 1 ? { REPLICA_ID: name } : {};
      return service(name, () =>
        spawnService("journal", { ...replica, ...env, ...roleEnv({ kind: "journal", cluster }), CLUSTER_ID: cluster, ...readyFile(name) }, common),
      );
    }),
  );
  const controller = service("controller", () =>
    spawnService(
      "controller",
      { ...env, ...roleEnv({ kind: "controller" }), ...readyFile("controller") },
      { args: ["--endpoint", controllerEndpoint], ...common },
    ),
  );
  const nodeAgent = service("node-agent", () =>
    spawnService(
      "node-agent",
      { ...env, ...roleEnv({ kind: "node", nodeId }), ...readyFile("node-agent") },
      { args: ["--endpoint", nodeEndpoint, "--nodeid", nodeId], ...common },
    ),
  );
  // The journals first: the controller's Probe wants a journal of the default cluster to answer.
  await settleAll(journals.map((j) => j.start()));
  opts.signal?.throwIfAborted();
  await settleAll([controller.start(), nodeAgent.start()]);
  opts.signal?.throwIfAborted();
  return { controllerEndpoint, nodeEndpoint, journals, controller, nodeAgent };
}

/** Waits for every start; rejects with the first failure once all have settled (so none is left half started). */
export async function settleAll(starts: Promise<void>[]): Promise<void> {
  const results = await Promise.allSettled(starts);
  for (const r of results) if (r.status === "rejected") throw r.reason;
}

export function stackService(name: string, launch: () => Promise<ServiceProcess>, exitedBySelf: (code: number | null) => void): StackService {
  let current: ServiceProcess | undefined;
  let starting: Promise<void> | undefined;
  const running = () => current !== undefined && isRunning(current);
  const take = () => {
    const p = current;
    current = undefined;
    return p;
  };
  return {
    name,
    get process() {
      return current;
    },
    get running() {
      return running();
    },
    get metricsUrl() {
      return current?.metricsUrl;
    },
    kill: async () => {
      await take()?.kill();
    },
    stop: async () => {
      await starting?.catch(() => {});
      const p = take();
      if (p) await endProcess(p);
    },
    start: () => {
      if (running()) return Promise.resolve();
      starting ??= launch()
        .then((p) => {
          current = p;
          p.exited.then((code) => {
            if (current === p) exitedBySelf(code);
          });
        })
        .finally(() => {
          starting = undefined;
        });
      return starting;
    },
  };
}

/** The most local clusters `CLUSTERS` may ask for. */
export const MAX_LOCAL_CLUSTERS = 16;

/** `CLUSTERS` (unset or empty = 1): a whole number from 1 to MAX_LOCAL_CLUSTERS. */
export function clusterCount(v: string | undefined): number {
  if (v === undefined || v === "") return 1;
  if (!/^[0-9]{1,3}$/.test(v) || Number(v) < 1 || Number(v) > MAX_LOCAL_CLUSTERS)
    throw new Error(`CLUSTERS must be a whole number from 1 to ${MAX_LOCAL_CLUSTERS}, got ${JSON.stringify(v.slice(0, 20))}`);
  return Number(v);
}

/**
 * The clusters file of a local stack: the built-in cluster (`local`) and, for `count` > 1,
 * `local-2`, `local-3`… each with the built-in pool; every pool's topology is this machine's node
 * segment (its files live here, so only this machine's node-agent can attach them). Pool
 * directories default to `<dataDir>/pools/<cluster>/<pool>`: one per cluster.
 */
export function localClusters(count: number, nodeId: string, ceph?: LocalCeph): typeof DEFAULT_CLUSTERS {
  const [builtIn] = DEFAULT_CLUSTERS.clusters;
  if (!builtIn) throw new Error("no built-in cluster");
  const clusters: typeof DEFAULT_CLUSTERS.clusters = Array.from({ length: count }, (_, i) => ({
    ...builtIn,
    clusterID: i === 0 ? builtIn.clusterID : `${builtIn.clusterID}-${i + 1}`,
    pools: builtIn.pools.map((p) => ({ ...p, topology: [{ [TOPOLOGY_KEY]: nodeId }] })),
  }));
  const [first] = clusters;
  if (ceph && first) {
    // An RBD pool is reached through the Ceph cluster from any node: no topology.
    const id = Math.max(...first.pools.map((p) => p.id)) + 1;
    const rbd = {
      name: CEPH_POOL,
      id,
      kind: "rbd" as const,
      monitors: ceph.monitors,
      cephPool: ceph.pools[0] ?? "rbd",
      user: ceph.user,
      keyFile: ceph.keyFile,
    };
    clusters[0] = { ...first, defaultPool: CEPH_POOL, pools: [rbd, ...first.pools] };
  }
  return { ...DEFAULT_CLUSTERS, clusters };
}

/** The RBD pool's name in the clusters file `npm start -- --ceph` writes. */
export const CEPH_POOL = "ceph";

/** What the clusters file needs of the local Ceph. */
type LocalCeph = Pick<CephCluster, "monitors" | "pools" | "user" | "keyFile">;

/** Writes localClusters(count, nodeId, ceph) to <runDir>/clusters.json. */
export function writeLocalClusters(runDir: string, nodeId: string, count = 1, ceph?: LocalCeph): string {
  const file = path.join(runDir, "clusters.json");
  writeFileSync(file, `${JSON.stringify(localClusters(count, nodeId, ceph), null, 2)}\n`);
  return file;
}
