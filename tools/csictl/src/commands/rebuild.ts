/**
 * `rebuild`: drop one cluster's Redis projection and rebuild it from the event log, with the
 * journal's own Projector (docs/journal.md, "Rebuilds"): under the cluster's rebuild lock, a new
 * epoch, the projection keys wiped (locks stay), the log replayed in conditional batches,
 * `complete` written last. Journals keep serving meanwhile: an operation that needs the
 * projection waits for `complete` (or answers UNAVAILABLE after REBUILD_WAIT_MS and the CO
 * retries). The progress is the projection's own watermark, read from Redis while it runs.
 */

import { JetStreamLog as EventLog } from "@csi/journal/log";
import { Projector } from "@csi/journal/projection";
import { keysFor, RedisStore } from "@csi/journal/redis";
import { createLogger } from "@csi/runtime";
import { CliError, EXIT } from "../errors.js";
import { fields } from "../output.js";
import { startProgress } from "../progress.js";
import type { Session } from "../session.js";

const PROGRESS_EVERY_MS = 200;

export async function rebuild(s: Session): Promise<void> {
  const cluster = s.cluster();
  // As the cluster's journal (its Redis user already): the rebuild is the journal's own work.
  const [nc, redis] = await Promise.all([s.nats({ kind: "journal", cluster: cluster.clusterID }), s.redis()]);
  const keys = keysFor(cluster.clusterID, cluster.instance);
  const store = new RedisStore(redis, keys);
  const log = new EventLog(nc, { cluster: cluster.clusterID, instance: cluster.instance });
  const total = await log.lastSeq().catch((err: unknown) => {
    throw new CliError(
      EXIT.failed,
      `cluster ${cluster.clusterID}: its event log ${log.stream} cannot be read (${(err as Error).message}); has a journal of it ever run?`,
    );
  });
  const dropped = (await store.projectionKeys()).length;
  // The projector's own log lines (rebuild started / interrupted) only when something is wrong.
  const projector = new Projector(log, store, createLogger("csictl", "error", 2));
  const started = performance.now();
  const progress = startProgress(s.out.json, `rebuild ${cluster.clusterID}`, total);
  const poll = setInterval(() => {
    store
      .projectionMeta()
      .then((m) => progress.update(Math.min(m?.applied ?? 0, total)))
      .catch(() => {});
  }, PROGRESS_EVERY_MS);
  let replayedTo: number;
  try {
    replayedTo = await projector.rebuild("csictl rebuild");
  } finally {
    clearInterval(poll);
  }
  progress.finish(replayedTo);
  const ms = Math.round(performance.now() - started);
  const [volumes, snapshots, groupSnapshots] = await Promise.all([
    redis.zcard(keys.index("volume")),
    redis.zcard(keys.index("snapshot")),
    redis.zcard(keys.index("groupsnapshot")),
  ]);
  const result = { cluster: cluster.clusterID, dropped, replayedTo, volumes, snapshots, groupSnapshots, ms };
  s.out.result(result, () =>
    fields([
      ["CLUSTER", cluster.clusterID],
      ["KEYS DROPPED", dropped],
      ["REPLAYED TO", `sequence ${replayedTo}`],
      ["VOLUMES", volumes],
      ["SNAPSHOTS", snapshots],
      ["GROUP SNAPSHOTS", groupSnapshots],
      ["TOOK", `${ms} ms (${ms > 0 ? Math.round((replayedTo / ms) * 1000) : replayedTo} events/s)`],
    ]),
  );
}
