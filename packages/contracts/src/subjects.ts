/**
 * Subject builders. No service writes a subject string by hand: every token goes through
 * `token()`, which rejects what would change a subject's shape ('.', '*', '>', whitespace,
 * control characters, empty). Names chosen by CSI callers (arbitrary UTF-8) become a token
 * through base64url, so a volume named "a.b >" cannot address another aggregate.
 *
 * Layout (one storage cluster = one prefix, one stream, one journal queue group):
 *   csi.<cluster>.journal.<family>.<verb>            commands (request/reply)
 *   csi.<cluster>.evt.<token>.<uuid>                 a volume's (vol), snapshot's (snap) or group snapshot's (grp) events (kinds.ts)
 *   csi.<cluster>.evt.name.<token>.<instance>.<b64>  request-name aggregate (reservation fence)
 *   csi.<cluster>.evt.dev.<uuid>                     device-state reports of a volume (appended by the journal)
 *   csi.<cluster>.evt.pool.<pool>                    a pool's own events (gc of images no reservation owns)
 *   csi.<cluster>.restore.<evt subject after "csi.<cluster>.">   a log restore's staging stream (the same records, staged)
 *   csi.<cluster>.claims.<node>                      a node-agent asks the journal whether it holds a claim on a volume
 *                                                    (request/reply; <node> = nameToken(nodeId): a node asks as itself only)
 *   csi.<cluster>.report.<node>.<uuid>               device-state reports as node-agents send them (durable queue);
 *                                                    <node> = nameToken(nodeId), so NATS permissions can let a
 *                                                    node-agent publish its own node's reports only (permissions.ts)
 */
import { quote } from "./bounds.js";
import { DriverError } from "./errors.js";
import { KIND_TOKENS, type Kind, type KindToken } from "./kinds.js";

export class SubjectError extends DriverError {
  constructor(what: string, value: string) {
    super("InvalidArgument", `invalid ${what} for a subject token: ${quote(value)}`);
  }
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what we reject
const BAD_TOKEN = /[.*>\s\u0000-\u001f\u007f]/u;

export function token(value: string, what = "token"): string {
  if (value.length === 0 || BAD_TOKEN.test(value)) throw new SubjectError(what, value);
  return value;
}

/** A cluster ID is also a stream-name part and a Redis hash tag: keep it to a safe alphabet. */
export const CLUSTER_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
export function clusterToken(clusterID: string): string {
  if (!CLUSTER_ID_RE.test(clusterID)) throw new SubjectError("cluster id", clusterID);
  return clusterID;
}

export function nameToken(name: string): string {
  return Buffer.from(name, "utf8").toString("base64url") || "_";
}

function aggregateEvents(cluster: string, kind: Kind, uuid: string): string {
  return `csi.${clusterToken(cluster)}.evt.${KIND_TOKENS[kind]}.${token(uuid, "uuid")}`;
}

export const subjects = {
  /** `command` is "<family>.<verb>", e.g. "volume.create". */
  command: (cluster: string, command: string) =>
    `csi.${clusterToken(cluster)}.journal.${command
      .split(".")
      .map((t) => token(t, "command"))
      .join(".")}`,
  commandWildcard: (cluster: string) => `csi.${clusterToken(cluster)}.journal.>`,
  eventsWildcard: (cluster: string) => `csi.${clusterToken(cluster)}.evt.>`,
  /** The events of one volume, snapshot, … (its kind's token, then its uuid). */
  aggregateEvents,
  volumeEvents: (cluster: string, uuid: string) => aggregateEvents(cluster, "volume", uuid),
  snapshotEvents: (cluster: string, uuid: string) => aggregateEvents(cluster, "snapshot", uuid),
  /** The request-name aggregate of a kind (`KIND_TOKENS[kind]`). */
  nameEvents: (cluster: string, kind: KindToken, instance: string, name: string) =>
    `csi.${clusterToken(cluster)}.evt.name.${kind}.${token(instance, "instance")}.${nameToken(name)}`,
  deviceEvents: (cluster: string, uuid: string) => `csi.${clusterToken(cluster)}.evt.dev.${token(uuid, "uuid")}`,
  /** A pool's own events (ImageLeakCollected); pool names are one token already ([A-Za-z0-9_-]). */
  poolEvents: (cluster: string, pool: string) => `csi.${clusterToken(cluster)}.evt.pool.${token(pool, "pool")}`,
  /** A node's report on a volume: the node's token is in the subject (NATS permissions are per subject). */
  reports: (cluster: string, nodeId: string, uuid: string) => `csi.${clusterToken(cluster)}.report.${nameToken(nodeId)}.${token(uuid, "uuid")}`,
  reportsWildcard: (cluster: string) => `csi.${clusterToken(cluster)}.report.>`,
  /** Durable queue of device reports on their way to a cluster's journal. */
  reportStreamName: (cluster: string) => `CSI_REPORTS_${clusterToken(cluster)}`,
  /** JetStream stream holding one cluster's event log. */
  streamName: (cluster: string) => `CSI_EVENTS_${clusterToken(cluster)}`,
  /**
   * The staging stream of a log restore (`csictl log restore`, docs/operations.md): the backup is
   * written there whole, on its sequences, before the event log is replaced; journals do not start
   * while it exists. Its subjects are the log's with `restore` in place of `evt`.
   */
  restoreStreamName: (cluster: string) => `CSI_RESTORE_${clusterToken(cluster)}`,
  restoreWildcard: (cluster: string) => `csi.${clusterToken(cluster)}.restore.>`,
  /** A node's claim checks (its agent asks before it runs work): the node's token is the subject's last. */
  claims: (cluster: string, nodeId: string) => `csi.${clusterToken(cluster)}.claims.${nameToken(nodeId)}`,
  claimsWildcard: (cluster: string) => `csi.${clusterToken(cluster)}.claims.*`,
  journalQueue: (cluster: string) => `journal-${clusterToken(cluster)}`,
  journalServiceName: (cluster: string) => `csi-journal-${clusterToken(cluster)}`,
};
