/**
 * What a test file of the journal starts with: real nats-server and redis-server, a clusters
 * file with one cluster, a NATS connection with a journal client, a Redis client, and a way to
 * start journal processes against them.
 *
 *   const j = await journalTestEnv("c1");                      // in before()
 *   const journal = new SharedProcess(j.spawnJournal);
 *   await j.dispose();                                         // in after()
 */
import { after, before } from "node:test";
import { NODES_STREAM, nodeSubjects } from "@csi/contracts";
import { JournalClient } from "@csi/runtime";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { type ServiceProcess, spawnService, type TestPool, writeClustersFile } from "./processes.js";
import { startTestServers, type TestServers } from "./servers.js";
import { SharedProcess } from "./shared-process.js";

export interface JournalTestEnv {
  servers: TestServers;
  clustersFile: string;
  nc: NatsConnection;
  redis: Redis;
  client: JournalClient;
  /** The environment of a journal process of this cluster (no periodic catch-up), plus `extra`. */
  journalEnv(extra?: Record<string, string>): Record<string, string>;
  spawnJournal(extra?: Record<string, string>): Promise<ServiceProcess>;
  dispose(): Promise<void>;
}

export async function journalTestEnv(cluster: string, opts: { pools?: TestPool[]; timeoutMs?: number; natsConfig?: string } = {}): Promise<JournalTestEnv> {
  const servers = await startTestServers(opts.natsConfig ? { natsConfig: opts.natsConfig } : {});
  const clustersFile = await writeClustersFile(servers.dir, [{ clusterID: cluster, pools: opts.pools ?? ["default"] }]);
  const nc = await connect({ servers: servers.nats.url });
  const redis = new Redis(servers.redis.url);
  redis.on("error", () => {}); // tests may stop it on purpose
  const journalEnv = (extra: Record<string, string> = {}) => ({
    NATS_URL: servers.nats.url,
    REDIS_URL: servers.redis.url,
    CLUSTERS_FILE: clustersFile,
    CLUSTER_ID: cluster,
    CATCHUP_EVERY_MS: "0",
    ...extra,
  });
  return {
    servers,
    clustersFile,
    nc,
    redis,
    client: new JournalClient(nc, opts.timeoutMs ?? 20_000),
    journalEnv,
    spawnJournal: (extra) => spawnService("journal", journalEnv(extra)),
    dispose: async () => {
      await nc.close();
      redis.disconnect();
      await servers.dispose();
    },
  };
}

/**
 * The usual set-up of a journal test file: in before(), the environment (handed to `use`) and one
 * shared journal process started; in after(), both ended.
 *
 *   let j: JournalTestEnv;
 *   const journal = journalPerFile("c1", {}, (env) => { j = env; });
 */
export function journalPerFile(cluster: string, opts: Parameters<typeof journalTestEnv>[1], use: (env: JournalTestEnv) => void): SharedProcess {
  let env: JournalTestEnv | undefined;
  const journal = new SharedProcess((extra) => (env as JournalTestEnv).spawnJournal(extra));
  before(async () => {
    env = await journalTestEnv(cluster, opts);
    use(env);
    await journal.start();
  });
  after(async () => {
    await journal.stop();
    await env?.dispose();
  });
  return journal;
}

/**
 * A node's registration (its heartbeat), as a node-agent publishes it, without a node-agent: the
 * controller then knows the node (ControllerPublishVolume), the journal its last heartbeat (verify).
 */
export async function registerNode(nc: NatsConnection, nodeId: string, time = new Date(), more: { maxVolumes?: number } = {}): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.info(NODES_STREAM).catch(() =>
    jsm.streams.add({
      name: NODES_STREAM,
      subjects: [nodeSubjects.wildcard],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      max_msgs_per_subject: 1,
    }),
  );
  const reg = { nodeId, maxVolumes: more.maxVolumes ?? 0, topology: {}, capabilities: [], version: "t", time: time.toISOString(), heartbeatMs: 1000 };
  await jetstream(nc).publish(nodeSubjects.registration(nodeId), JSON.stringify(reg));
}
