/**
 * Wiring of one journal replica: NATS, Redis, the pools, catch-up, then the NATS service.
 * main.ts calls this with the parsed config; tests can call it in-process too.
 */

import { setTimeout as sleep } from "node:timers/promises";
import { type Clusters, DeviceReport, DriverError, inboxPrefix, nodeQueues, type ResolvedCluster, subjects } from "@csi/contracts";
import {
  allNodeRegistrations,
  closeWithin,
  connectNats,
  consumeQueue,
  type Drainable,
  drainAll,
  ensureFleetStreams,
  failureStreak,
  fleetAccess,
  fleetManager,
  loadClusters,
  migrateLegacyNodeWork,
  natsConnectOptions,
  Ops,
  packageVersion,
  replicaId,
  SentinelSafeRedis,
  watchNats,
} from "@csi/runtime";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { Journal } from "./app/journal.js";
import { TokenBuckets } from "./commands/deciders/report-bounds.js";
import type { JournalConfig } from "./config.js";
import { restoreUnderWay } from "./log/backup/index.js";
import { checkLogDurability } from "./log/durability.js";
import { guardedLog, LOG_PROBE_TIMEOUT_MS, LogReachability, logUnavailable } from "./log/guarded.js";
import { JetStreamLog } from "./log/jetstream.js";
import { observedLog } from "./log/observed.js";
import type { EventLog } from "./log/port.js";
import { JournalMetrics } from "./metrics.js";
import { lastHeartbeats, makeNodeQueues } from "./nodes.js";
import { FilePool } from "./pools/file.js";
import type { PoolBackend } from "./pools/port.js";
import { RbdPool } from "./pools/rbd.js";
import { catchUpWhenLogAnswers, distrustAfterRedisDrops, Projector } from "./projection/projector.js";
import { JOURNAL_LIBRARY } from "./projection/redis/functions.js";
import { keysFor } from "./projection/redis/layout.js";
import { journalRedisOptions, RedisLink } from "./projection/redis/link.js";
import { RedisStore } from "./projection/redis/store.js";
import { serveJournal } from "./rpc/nats-service.js";

export { Journal, type JournalDeps } from "./app/journal.js";
export { DEFAULT_LOCK_TTL_MS, JOURNAL_SETTINGS, JournalConfig, journalConfig } from "./config.js";
/** The Redis key layout (test/journal.test.ts reads the projection with it). */
export { keysFor } from "./projection/redis/layout.js";

export interface RunningJournal {
  journal: Journal;
  projector: Projector;
  clusters: Clusters;
  stop(): Promise<void>;
}

/** This package's version (its package.json): the NATS service's, the CSI plugin info's, csi_build_info's. */
export const JOURNAL_VERSION = packageVersion(new URL("../package.json", import.meta.url));

/** `ops`: where the metrics and readiness checks go (runMain serves them; in-process callers may leave it out). */
/**
 * Fault injection, for tests only (test-support/faults-main.ts reads it from the environment; no
 * setting of the production configuration): SIGKILL or SIGSTOP the process right after appending
 * an event of a type, or after a pool step `image:<op>` returned; hold every copy of a file pool
 * (snapshot, clone) this long with its temp file in the pool, so a test can kill a journal mid-copy.
 */
export interface JournalFaults {
  crashAfter?: string | undefined;
  freezeAfter?: string | undefined;
  holdCopyMs?: number | undefined;
}

export async function startJournal(cfg: JournalConfig, logger: Logger, ops = new Ops("journal"), faults: JournalFaults = {}): Promise<RunningJournal> {
  const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
  const clusterID = cfg.cluster ?? clusters.defaultCluster;
  const cluster = clusters.get(clusterID);
  if (!cluster) throw new DriverError("InvalidArgument", `cluster ${clusterID} is not in the clusters config`);
  const log = logger.child({ cluster: clusterID });

  const pools = await openPools(cluster, cfg, log, faults.holdCopyMs ?? 0);

  const role = { kind: "journal" as const, cluster: clusterID };
  const nc = await connectNats(
    natsConnectOptions(cfg, { name: `csi-journal-${clusterID}`, inboxPrefix: inboxPrefix(role), maxReconnectAttempts: -1, noAsyncTraces: true }),
    (why) => log.warn(why),
  );
  const redis = new SentinelSafeRedis(cfg.redisUrl, journalRedisOptions(cfg, cfg.redisCommandTimeoutMs), () =>
    log.warn("the redis client had ended on its own (a failover seen while reconnecting): connecting again"),
  );
  const redisLink = new RedisLink(redis, log);
  const metrics = new JournalMetrics(ops);
  watchNats(nc, ops);
  metrics.watchRedis(redis);

  const { jetStreamLog, reach, events } = await openEventLog(nc, cfg, cluster, { ops, metrics, log });
  const trustedSince = await bindPools(pools, jetStreamLog, { cluster: clusterID, rebind: cfg.poolRebind, log });
  const { fleet, streams, nodeQueueMaker } = await openFleet(nc, cfg, log, metrics);
  const { store, projector } = await openProjection(cfg, cluster, { redis, redisLink, events }, metrics, log);
  catchUpWhenLogAnswers(reach, projector, log);
  if (await restoreUnderWay(await jetstreamManager(nc), clusterID))
    throw new DriverError("Unavailable", "a restore of the event log began while this journal started: exiting, to start again over the restored log");

  const signalAfter = faultsAfter({ SIGKILL: faults.crashAfter, SIGSTOP: faults.freezeAfter }, log);
  const eventLog = observedLog(events, async (e) => {
    metrics.appended(e);
    await signalAfter(e.event.type);
  });
  const journal = new Journal({
    cluster,
    pools,
    log: eventLog,
    store,
    projector,
    actor: { service: "journal", replica: replicaId(cfg.replica) },
    logger: log,
    lockTtlMs: cfg.lockTtlMs,
    lockWaitMs: cfg.lockWaitMs,
    now: () => new Date(),
    observeLockWait: metrics.lockWait,
    heartbeats: (nodeIds) => lastHeartbeats(nc, fleet, nodeIds),
    registrations: () => allNodeRegistrations(fleetManager(nc, fleet)),
    unavailable: () => unavailableWhy(redisLink, reach),
    afterEffect: (e) => signalAfter(`image:${e.op}`),
    trustedSince,
    ...(nc.info?.max_payload ? { maxPayload: nc.info.max_payload } : {}),
  });
  const svc = await serveJournal(nc, clusterID, journal, log, JOURNAL_VERSION, {
    beatEveryMs: cfg.beatEveryMs,
    observe: metrics.command,
    onRefused: metrics.refused,
    inFlight: metrics.inFlight,
  });
  ops.readiness.add("commands", () => svc.serving || "the command endpoints are stopped");
  const bound = Object.assign(new TokenBuckets(cfg.reportRate, cfg.reportBurst), { describe: `${cfg.reportRate}/s, burst ${cfg.reportBurst}` });
  const reports = await serveReports(nc, clusterID, journal, { log, fleet, metrics, streams, bound });
  const timer = catchUpEvery(cfg.catchUpEveryMs, projector, log);
  log.info({ pools: [...pools.keys()], stream: jetStreamLog.stream }, "journal serving");

  return {
    journal,
    projector,
    clusters,
    stop: () => {
      reach.stop();
      return stopJournal(cfg, log, { timer, nodeQueueMaker, served: [svc, reports], nc, redis, pools: [...pools.values()] });
    },
  };
}

/**
 * The node fleet's streams: on one account, journals make the streams and queues nodes use (and
 * move the work of the one shared work stream of before into each node's own: node-streams.ts);
 * in the account layout they are the FLEET account's, made by `csictl fleet init` (docs/security.md).
 */
async function openFleet(nc: NatsConnection, cfg: JournalConfig, log: Logger, metrics: JournalMetrics) {
  const streams = { replicas: cfg.streamReplicas };
  const fleet = fleetAccess(cfg.natsAccounts);
  await ensureFleetStreams(nc, fleet, streams);
  if (fleet.makes) {
    const { moved, left } = await migrateLegacyNodeWork(nc, streams);
    if (moved.size > 0 || left > 0)
      log.info({ moved: Object.fromEntries(moved), left }, "node work moved from the shared CSI_NODE_WORK into each node's own stream");
  }
  const nodeQueueMaker = fleet.makes ? makeNodeQueues(nc, log, streams, () => metrics.dropped("registrations", "malformed")) : { stop: () => {} };
  return { fleet, streams, nodeQueueMaker };
}

/** How often a journal that found a log restore under way looks again. */
const RESTORE_POLL_MS = 2000;

/**
 * Waits while a restore of the cluster's event log is under way or was interrupted (its staging
 * stream exists; once one was seen, until the log exists again: log/backup/io.ts): a journal never
 * serves, nor creates, a log half restored.
 */
async function untilNoRestore(nc: NatsConnection, cluster: string, log: Logger): Promise<void> {
  const jsm = await jetstreamManager(nc);
  let told = false;
  while (await restoreUnderWay(jsm, cluster, told)) {
    if (!told)
      log.warn(
        { stream: subjects.restoreStreamName(cluster) },
        "a restore of the event log is under way, or was interrupted: waiting for it to end before serving (an interrupted restore ends when csictl log restore is run again)",
      );
    told = true;
    await sleep(RESTORE_POLL_MS);
  }
  if (told) log.info("the restore of the event log has ended");
}

/**
 * The cluster's event log, made sure of, guarded: every use fails fast while it is known
 * unreachable (log/guarded.ts), and the readiness check "log" says so.
 */
async function openEventLog(
  nc: NatsConnection,
  cfg: JournalConfig,
  cluster: ResolvedCluster,
  o: { ops: Ops; metrics: JournalMetrics; log: Logger },
): Promise<{ jetStreamLog: JetStreamLog; reach: LogReachability; events: EventLog }> {
  const jetStreamLog = new JetStreamLog(nc, { cluster: cluster.clusterID, instance: cluster.instance, replicas: cfg.streamReplicas });
  o.metrics.watchForeign(jetStreamLog, o.log);
  await checkLogDurability(nc, { fsync: cfg.logFsync, monitorUrls: cfg.natsMonitorUrl, log: o.log });
  await untilNoRestore(nc, cluster.clusterID, o.log);
  await jetStreamLog.ensureStream();
  let said = false;
  await jetStreamLog.answers((why) => {
    if (!said) o.log.info({ why }, "waiting for the event log to have a leader in touch with its replicas");
    said = true;
  });
  const reach = new LogReachability((downSince) => jetStreamLog.probe(LOG_PROBE_TIMEOUT_MS, downSince), o.log);
  reach.watch(nc);
  o.ops.readiness.add("log", () => reach.check());
  return { jetStreamLog, reach, events: guardedLog(jetStreamLog, reach) };
}

/**
 * Every pool bound to the cluster's log (PoolBackend.bind): a pool of another log, another pool
 * or cluster on the same place, or another log's images under an empty log refuse the start,
 * naming both (docs/operations.md, "A pool knows its log"). Returns, per pool, since when gc may
 * trust that an image no record names is this log's leftover: its binding, or the log's restore,
 * whichever is later.
 */
async function bindPools(
  pools: Map<string, PoolBackend>,
  jetStreamLog: JetStreamLog,
  o: { cluster: string; rebind: boolean; log: Logger },
): Promise<Map<string, number>> {
  const id = await jetStreamLog.identity();
  if (!id) throw new DriverError("Unavailable", "the event log's stream is gone right after it was made sure of");
  const restored = id.restoredAt ? Date.parse(id.restoredAt) : 0;
  const since = new Map<string, number>();
  for (const [name, pool] of pools) {
    if (!pool.bind) {
      since.set(name, restored);
      continue;
    }
    const b = await pool.bind({ cluster: o.cluster, pool: name, log: id.identity }, { logRecords: id.records, rebind: o.rebind });
    if (b.previous)
      o.log.warn(
        { pool: name, log: id.identity, previous: b.previous },
        "POOL_REBIND: the pool was bound to this log; its older images are never removed by gc",
      );
    since.set(name, Math.max(b.boundAt, restored));
  }
  return since;
}

/** The projection caught up with the log every `everyMs` (0: never), its failures logged once per streak (an outage). */
function catchUpEvery(everyMs: number, projector: Projector, log: Logger): NodeJS.Timeout | undefined {
  if (everyMs <= 0) return undefined;
  const catchUps = failureStreak(log, "projection catch-up");
  const timer = setInterval(
    () =>
      projector.catchUp().then(
        () => catchUps.ok(),
        (err: unknown) => catchUps.failed(err),
      ),
    everyMs,
  );
  timer.unref();
  return timer;
}

/** Why the journal cannot serve a command now (the runner's `unavailable`): its Redis or its event log known down. */
function unavailableWhy(redisLink: RedisLink, reach: LogReachability): string | undefined {
  const redis = redisLink.down();
  if (redis) return `redis unavailable: ${redis}`;
  const log = reach.down();
  return log && logUnavailable(log);
}

/**
 * Graceful stop (docs/operations.md): leave the queue group and stop pulling device reports,
 * finish the commands and the report in flight (their replies sent) within the grace period,
 * then drain NATS and quit Redis. A command cut at the bound is resent by its caller to another
 * replica after its silence (docs/journal.md, "Failover"), as after a crash.
 */
async function stopJournal(
  cfg: JournalConfig,
  log: Logger,
  o: {
    timer: NodeJS.Timeout | undefined;
    nodeQueueMaker: { stop(): void };
    served: Drainable[];
    nc: NatsConnection;
    redis: Redis;
    pools: { close?(): Promise<void> }[];
  },
): Promise<void> {
  clearInterval(o.timer);
  o.nodeQueueMaker.stop();
  await drainAll(log, cfg.shutdownGraceMs, o.served);
  await closeWithin(
    () => o.nc.drain(),
    () => o.nc.close(),
  );
  await closeWithin(
    () => o.redis.quit(),
    () => o.redis.disconnect(),
  );
  await Promise.all(o.pools.map((p) => p.close?.()));
}

/**
 * The cluster's pools, each by its kind: a FilePool (a directory) or an RbdPool (a Ceph pool through
 * its helper). An RBD pool's key file is checked here (a start with a bad one fails, naming it); its
 * cluster is reached on first use, and looked at once in the background so the log says early
 * whether it answers (a Ceph cluster that is down fails that pool's calls, not the journal's start).
 */
async function openPools(
  cluster: ResolvedCluster,
  cfg: JournalConfig,
  log: Logger,
  holdCopyMs: number,
): Promise<Map<string, PoolBackend & { close?(): Promise<void> }>> {
  const pools = new Map<string, PoolBackend & { close?(): Promise<void> }>();
  for (const p of cluster.pools) {
    const max = p.maxImageBytes ? { maxImageBytes: p.maxImageBytes } : {};
    if (p.kind === "rbd") {
      const pool = new RbdPool({
        name: p.name,
        id: p.id,
        cephPool: p.cephPool ?? p.name,
        monitors: p.monitors,
        user: p.user,
        keyFile: p.keyFile,
        python: cfg.rbdPython,
        logger: log,
        ...max,
        ...(p.imageFeatures ? { imageFeatures: p.imageFeatures } : {}),
        ...(p.maxCloneDepth ? { maxCloneDepth: p.maxCloneDepth } : {}),
        ...(p.opTimeoutMs ? { opTimeoutMs: p.opTimeoutMs } : {}),
      });
      await pool.init();
      pool.probe().then(
        (images) => log.info({ pool: p.name, cephPool: pool.cephPool, images }, "rbd pool reachable"),
        (err: Error) => log.warn({ pool: p.name, cephPool: pool.cephPool, err: err.message }, "rbd pool not reachable yet"),
      );
      pools.set(p.name, pool);
      continue;
    }
    const pool = new FilePool({ name: p.name, id: p.id, root: p.root, ...max, ...(holdCopyMs > 0 ? { holdCopyMs } : {}) });
    await pool.init();
    pools.set(p.name, pool);
  }
  return pools;
}

/** The Redis store with its function library, and the projector, caught up and checked against the log before anything is served. */
async function openProjection(
  cfg: JournalConfig,
  cluster: ResolvedCluster,
  { redis, redisLink, events }: { redis: Redis; redisLink: RedisLink; events: EventLog },
  metrics: JournalMetrics,
  log: Logger,
) {
  const store = new RedisStore(redis, keysFor(cluster.clusterID, cluster.instance), { down: () => redisLink.down() });
  // The function library (redis/functions.ts): an admin loads it where the ACL is on; an open Redis
  // gets it from here. Missing and not loadable: the start fails, naming the admin's step.
  if (await store.ensureFunctions()) log.info({ library: JOURNAL_LIBRARY }, "loaded the journal's Redis function library");
  metrics.projectionLag(cluster.clusterID, async () => {
    const [info, meta] = await Promise.all([events.info(), store.projectionMeta()]);
    return { last: info.last, applied: meta?.applied ?? 0 };
  });
  const projector = new Projector(events, store, log, { batch: cfg.replayBatch, waitMs: cfg.rebuildWaitMs, lockTtlMs: cfg.lockTtlMs });
  distrustAfterRedisDrops(redis, projector);
  await projector.start(); // never serve from a projection behind the log, or one that disagrees with it
  return { store, projector };
}

/**
 * Device reports from node-agents wait in a durable queue until a journal appends them. A report
 * counts only on its own node's subject: NATS lets a node publish there and nowhere else.
 */
function serveReports(
  nc: NatsConnection,
  clusterID: string,
  journal: Journal,
  o: { log: Logger; fleet: ReturnType<typeof fleetAccess>; metrics: JournalMetrics; streams: { replicas: number }; bound: ReportBound },
) {
  return consumeQueue(
    nc,
    nodeQueues.reports(clusterID),
    DeviceReport,
    (r, from) => {
      if (from.subject !== subjects.reports(clusterID, r.nodeId, r.uuid))
        throw new DriverError("InvalidArgument", `a report of node ${r.nodeId} on volume ${r.uuid} came on another subject (${from.subject}): dropped`);
      // A node's reports within its bound (a rate and a burst): a flood is cut there, the others flow.
      if (!o.bound.take(r.nodeId)) {
        o.metrics.dropped("reports", "rate");
        throw new DriverError("ResourceExhausted", `node ${r.nodeId} sent reports past its bound (${o.bound.describe}): dropped`);
      }
      return journal.reportDevice(r);
    },
    o.log,
    { what: "device reports", at: o.fleet, waitForQueue: !o.fleet.makes, onDropped: (reason) => o.metrics.dropped("reports", reason), ...o.streams },
  );
}

type ReportBound = TokenBuckets & { describe: string };

/**
 * Fault injection (tests only): right after an event of the given type lands, or a pool step
 * `image:<op>` returned (`image:create`: the image made, its event not yet appended), SIGKILL the
 * process (a crash) or SIGSTOP it (a freeze: its lock renewals stop, so its locks expire while
 * it still means to go on — the case the sequence fences exist for).
 */
function faultsAfter(faults: Partial<Record<"SIGKILL" | "SIGSTOP", string>>, log: Logger): (point: string) => Promise<void> {
  const armed = Object.entries(faults).filter(([, type]) => type) as ["SIGKILL" | "SIGSTOP", string][];
  return async (point) => {
    for (const [signal, type] of armed) {
      if (point !== type) continue;
      log.warn({ type, signal }, "fault injection");
      process.kill(process.pid, signal);
      if (signal === "SIGKILL") await new Promise(() => {});
    }
  };
}
