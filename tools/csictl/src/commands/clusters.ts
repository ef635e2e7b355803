/**
 * `clusters`: per storage cluster, the journal replicas answering (NATS micro-service discovery:
 * one `$SRV.STATS` request collects every replica of every `csi-journal-<cluster>` service),
 * the event log's last sequence and the Redis projection's `applied` watermark (the lag between
 * them). The clusters are those of the clusters file and any other whose journal answers. A
 * cluster no journal answers for is a row with 0 replicas and a note; exit 1 if one is not served,
 * 3 if none of them is (no journal runs: as any command that asks one).
 */
import { subjects } from "@csi/contracts";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { type ServiceStats, Svcm } from "@nats-io/services";
import { type ClusterHealth, clusterHealth } from "../domain/health.js";
import { EXIT } from "../errors.js";
import { type Column, listing } from "../output.js";
import type { Session } from "../session.js";

/** How long discovery collects answers from replicas. */
const DISCOVERY_MS = 1000;
const JOURNAL_SERVICE = /^csi-journal-(.+)$/;

type ClusterRow = ClusterHealth & { journals: { id: string; version: string; started: string; requests: number; errors: number }[] };

const CLUSTER_COLUMNS: Column<ClusterRow>[] = [
  { head: "CLUSTER", cell: (r) => r.cluster },
  { head: "REPLICAS", cell: (r) => r.replicas },
  { head: "LOG SEQ", cell: (r) => r.logSeq },
  { head: "APPLIED", cell: (r) => r.applied },
  { head: "LAG", cell: (r) => r.lag },
  { head: "PROJECTION", cell: (r) => r.projection },
  { head: "REQUESTS", cell: (r) => r.journals.reduce((n, j) => n + j.requests, 0) },
  { head: "ERRORS", cell: (r) => r.journals.reduce((n, j) => n + j.errors, 0) },
  { head: "JOURNALS", cell: (r) => r.journals.map((j) => `${j.id} (${j.version})`).join(","), wide: true },
];

export async function clusters(s: Session): Promise<number> {
  const [nc, redis] = await Promise.all([s.nats(), s.redis()]);
  // @nats-io/services pins an older nats-core prerelease; the connection is the same at runtime.
  const client = new Svcm(nc as unknown as ConstructorParameters<typeof Svcm>[0]).client({ strategy: "timer", maxWait: Math.min(DISCOVERY_MS, s.timeoutMs) });
  const replicas = new Map<string, ServiceStats[]>();
  const configured = s.clusters().clusters;
  // One account: one request finds every journal service. Accounts: csictl imports each configured cluster's discovery.
  const asked = s.accounts() ? configured.map((c) => client.stats(subjects.journalServiceName(c.clusterID))) : [client.stats()];
  for (const st of await answering(asked)) {
    const cluster = st.metadata?.cluster ?? JOURNAL_SERVICE.exec(st.name)?.[1];
    if (!cluster || st.name !== subjects.journalServiceName(cluster)) continue;
    replicas.set(cluster, [...(replicas.get(cluster) ?? []), st]);
  }
  const chosen = s.opts.cluster ? [s.cluster().clusterID] : [...new Set([...configured.map((c) => c.clusterID), ...replicas.keys()])].sort();
  const rows = await Promise.all(
    chosen.map(async (id) => {
      const instance = configured.find((c) => c.clusterID === id)?.instance ?? "default";
      const [info, meta] = await Promise.all([
        // The last record there (as the journal sees the log: a removed tail is not counted as lag).
        s
          .eventLog(id)
          .then((log) => log.info())
          .catch(() => undefined),
        new RedisStore(redis, keysFor(id, instance)).projectionMeta(),
      ]);
      const journals = (replicas.get(id) ?? []).map((r) => ({
        id: r.id,
        version: r.version,
        started: r.started,
        requests: (r.endpoints ?? []).reduce((n, e) => n + e.num_requests, 0),
        errors: (r.endpoints ?? []).reduce((n, e) => n + e.num_errors, 0),
      }));
      return { ...clusterHealth(id, journals.length, info?.last, meta), journals };
    }),
  );
  s.out.result(
    { items: rows },
    (h) => listing(CLUSTER_COLUMNS, rows, h),
    () => rows.map((r) => r.cluster),
  );
  const unserved = rows.filter((r) => r.replicas === 0).map((r) => r.cluster);
  if (unserved.length > 0) s.out.note(`no journal of cluster ${unserved.join(", ")} answers: is one running?`);
  // Not one journal answers: unreachable, as every command that asks a journal then is (3); some not served: a finding (1).
  if (rows.length > 0 && unserved.length === rows.length) return EXIT.unreachable;
  return rows.every((r) => r.ok) ? EXIT.ok : EXIT.failed;
}

/** Every replica's answer to the discovery requests; none at all (NATS: "no responders") is an empty list, not an error. */
async function answering(asked: Promise<AsyncIterable<ServiceStats>>[]): Promise<ServiceStats[]> {
  const all: ServiceStats[] = [];
  for (const answers of await Promise.all(asked)) {
    try {
      for await (const st of answers) all.push(st);
    } catch (err) {
      if ((err as Error).name !== "NoResponders") throw err;
    }
  }
  return all;
}
