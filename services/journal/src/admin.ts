#!/usr/bin/env -S npx tsx
/**
 * Operator commands for one cluster's journal:
 *   csi-journal-admin rebuild                 drop the Redis projection and rebuild it from the log
 *   csi-journal-admin history <uuid>          every event of a volume or snapshot (and its name)
 *   csi-journal-admin history --name <name>   every event of a request name (volume by default)
 * Uses NATS_URL, REDIS_URL, CLUSTERS_FILE, CLUSTER_ID, DATA_DIR like the journal.
 */
import { parseArgs } from "node:util";
import { isUuid } from "@csi/contracts";
import { createLogger, loadClusters } from "@csi/runtime";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { EventLog } from "./adapters/event-log.js";
import { RedisStore } from "./adapters/redis-store.js";
import { Projector } from "./app/projector.js";
import { journalConfig } from "./config.js";
import { KINDS, keysFor, uuidSubjects } from "./domain/kinds.js";

const { positionals, values } = parseArgs({ allowPositionals: true, options: { name: { type: "string" }, snapshot: { type: "boolean" } } });
const cfg = journalConfig([], process.env);
const clusters = loadClusters(cfg.clustersFile, cfg.dataDir);
const cluster = clusters.get(cfg.cluster ?? clusters.defaultCluster);
if (!cluster) throw new Error("unknown cluster");
const nc = await connect({ servers: cfg.natsUrl });
const redis = new Redis(cfg.redisUrl);
const log = new EventLog(nc, { cluster: cluster.clusterID });
const keys = keysFor(cluster.clusterID, cluster.instance);
try {
  const [cmd, arg] = positionals;
  if (cmd === "rebuild") {
    // A forced rebuild under the cluster's rebuild lock: a new epoch, the projection keys wiped
    // (locks stay, so running operations are not disturbed), the log replayed, complete last.
    const store = new RedisStore(redis, keys);
    const dropped = (await store.projectionKeys()).length;
    const last = await new Projector(log, store, createLogger("journal-admin", "info", 2), { lockTtlMs: cfg.lockTtlMs }).rebuild();
    console.log(JSON.stringify({ dropped, replayedTo: last }));
  } else if (cmd === "history") {
    const subjectsToRead: string[] = [];
    if (values.name) subjectsToRead.push(KINDS[values.snapshot ? "snapshot" : "volume"].nameEvents(cluster.clusterID, cluster.instance, values.name));
    if (arg && isUuid(arg)) subjectsToRead.push(...uuidSubjects(cluster.clusterID, arg));
    if (subjectsToRead.length === 0) throw new Error("history needs a uuid or --name");
    for (const e of await log.history(subjectsToRead)) console.log(JSON.stringify({ seq: e.seq, subject: e.subject, ...e.event }));
  } else {
    console.error("usage: csi-journal-admin rebuild | history <uuid> | history --name <name> [--snapshot]");
    process.exitCode = 2;
  }
} finally {
  await nc.close();
  redis.disconnect();
}
