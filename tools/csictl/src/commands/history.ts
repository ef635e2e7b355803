/**
 * `history <CSI volume id | snapshot id | uuid | request name>`: the timeline of an aggregate,
 * every event and device-state report in log order. The journal's `volume.history` command
 * answers it (paged: csictl follows the next tokens); a request name is looked up in the log
 * (its name subject says which uuids it reserved), in the named cluster or in every cluster.
 * `--follow` then watches the aggregate's subjects live until Ctrl-C.
 */
import { DriverError, type ResolvedCluster, subjects } from "@csi/contracts";
import { KINDS, uuidSubjects } from "@csi/journal/fold";
import { classifyRecord, type JetStreamLog as EventLog, eventsOf, isForeign } from "@csi/journal/log";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { stringify as yamlStringify } from "yaml";
import { parseTarget, type Target } from "../domain/target.js";
import { type HistoryEntry, mergeHistories, Reorder, type TimelineRow, timelineRow } from "../domain/timeline.js";
import { CliError, usageError } from "../errors.js";
import { TableTail, table } from "../output.js";
import { resolveVolume } from "../resolve.js";
import type { Session } from "../session.js";

/** Events per history page asked of the journal (it cuts pages to its reply budget anyway). */
const PAGE = 500;
/** How long a live event is held so that one of a lower sequence from another subject goes first. */
const REORDER_HOLD_MS = 200;

const HEAD = ["SEQ", "TIME", "EVENT", "REQUEST", "ACTOR", "CHANGE"];
const cells = (r: TimelineRow) => [r.seq, r.time, r.type, r.requestId, r.actor, r.change];

/** An entry's subject and event as --json prints them (and, for a foreign record, why it is one). */
const entryJson = (e: HistoryEntry) => ({ subject: e.subject, event: e.event, ...(e.foreign ? { foreign: e.foreign } : {}) });

/** One followed event for a program: a JSON object a line (-o json), a YAML document each (-o yaml). */
function writeLive(s: Session, value: object): void {
  process.stdout.write(s.out.format === "yaml" ? `---\n${yamlStringify(value, { lineWidth: 0 })}` : `${JSON.stringify(value)}\n`);
}

/** Every page of one uuid's history from the journal. */
async function historyOf(s: Session, cluster: string, uuid: string): Promise<HistoryEntry[]> {
  const journal = await s.journal();
  const all: HistoryEntry[] = [];
  let token: string | undefined;
  do {
    const page = await journal.call(cluster, "volume.history", { uuid, maxEntries: PAGE, ...(token ? { startingToken: token } : {}) });
    all.push(...page.events);
    token = page.nextToken;
  } while (token);
  return all;
}

/** The subjects of a request name (one per kind) and the uuids it ever reserved. */
async function nameLookup(log: EventLog, cluster: ResolvedCluster, name: string): Promise<{ nameSubjects: string[]; uuids: string[] }> {
  const nameSubjects = Object.values(KINDS).map((k) => k.nameEvents(cluster.clusterID, cluster.instance, name));
  const events = eventsOf(await log.history(nameSubjects));
  const uuids = [...new Set(events.flatMap((e) => (e.event.type === "NameReserved" ? [e.event.uuid] : [])))];
  return { nameSubjects, uuids };
}

interface Found {
  cluster: ResolvedCluster;
  uuids: string[];
  nameSubjects: string[];
  entries: HistoryEntry[];
  /** The log's last sequence before the history was read: following starts after it. */
  lastSeq: number;
}

async function find(s: Session, target: Target): Promise<Found[]> {
  if (target.by === "id" && s.opts.cluster && s.opts.cluster !== target.clusterID) {
    throw usageError(`the id is of cluster ${target.clusterID}, not ${s.opts.cluster}`);
  }
  const clusters = target.by === "id" ? [s.cluster(target.clusterID)] : target.by === "uuid" || s.opts.cluster ? [s.cluster()] : s.clusters().clusters;
  const found: Found[] = [];
  for (const cluster of clusters) {
    const log = await s.eventLog(cluster.clusterID);
    const lastSeq = await log.lastSeq().catch(() => 0);
    const named = target.by === "name" ? await nameLookup(log, cluster, target.name) : { nameSubjects: [], uuids: [target.uuid] };
    const entries = mergeHistories(...(await Promise.all(named.uuids.map((u) => historyOf(s, cluster.clusterID, u)))));
    if (entries.length > 0 || clusters.length === 1) found.push({ cluster, ...named, entries, lastSeq });
  }
  return found;
}

/**
 * What `arg` names: an id or uuid as it is; a request name as the log knows it (deleted names
 * too); else (resolve.ts) the live volume it names by a unique uuid or id prefix or its PVC.
 */
async function findNamed(s: Session, arg: string, asName: boolean): Promise<Found[]> {
  let target: Target;
  try {
    target = parseTarget(arg, { asName });
  } catch (err) {
    if (!(err instanceof CliError)) throw err;
    return find(s, await resolveVolume(s, arg)); // the start of an id, or its error
  }
  const found = await find(s, target);
  if (target.by !== "name" || asName || found.some((f) => f.entries.length > 0)) return found;
  const resolved = await resolveVolume(s, arg);
  return resolved.by === "id" ? find(s, resolved) : found;
}

export async function history(s: Session, arg: string, o: { name?: boolean; follow?: boolean }): Promise<void> {
  const nc = await s.nats();
  const found = await findNamed(s, arg, !!o.name);
  const entries = found.flatMap((f) => f.entries);
  if (entries.length === 0 && !o.follow) {
    const where = found.length === 1 ? `cluster ${found[0]?.cluster.clusterID}` : "any cluster";
    throw new DriverError("NotFound", `no events of ${JSON.stringify(arg.slice(0, 128))} in ${where}`);
  }
  if (found.length > 1 && o.follow) throw usageError(`${JSON.stringify(arg)} is known in several clusters: pass --cluster to follow one`);
  const rows = found.flatMap((f) => f.entries.map((e) => ({ cluster: f.cluster.clusterID, entry: e, row: timelineRow(e) })));
  if (o.follow && s.out.json) {
    for (const r of rows) writeLive(s, { cluster: r.cluster, ...r.row, ...entryJson(r.entry) });
  } else if (rows.length > 0 || !o.follow) {
    const many = found.length > 1;
    s.out.result(
      {
        items: found.map((f) => ({
          cluster: f.cluster.clusterID,
          uuids: f.uuids,
          events: f.entries.map((e) => ({ ...timelineRow(e), ...entryJson(e) })),
        })),
      },
      (h) =>
        table(
          [...(many ? ["CLUSTER"] : []), ...HEAD, ...(h.wide ? ["SUBJECT"] : [])],
          rows.map((r) => [...(many ? [r.cluster] : []), ...cells(r.row), ...(h.wide ? [r.entry.subject] : [])]),
          h,
        ),
    );
  }
  const only = found[0];
  if (o.follow && only) await follow(s, nc, only, followedRows(s, rows));
}

/**
 * How a followed event is printed for a person: a line in the columns of the table above it
 * (`-o wide`: with its subject), the header first when there was no table.
 */
function followedRows(s: Session, shown: { entry: HistoryEntry; row: TimelineRow }[]): (e: HistoryEntry) => string {
  const wide = s.out.format === "wide";
  const headers = s.opts.headers !== false;
  const line = (row: TimelineRow, e: HistoryEntry) => [...cells(row), ...(wide ? [e.subject] : [])];
  const head = [...HEAD, ...(wide ? ["SUBJECT"] : [])];
  const tail = new TableTail(
    head,
    shown.map((r) => line(r.row, r.entry)),
    headers,
  );
  let first = shown.length === 0 && headers ? `${tail.line(head)}\n` : "";
  return (e) => {
    const text = `${first}${tail.line(line(timelineRow(e), e))}\n`;
    first = "";
    return text;
  };
}

/**
 * Watch the aggregate's subjects (its own, its device reports', its name's) from after what was
 * printed, one ordered consumer per subject, merged back into log order. A name that reserves a
 * new uuid meanwhile (a re-create after delete) brings that uuid's subjects in. Ends on Ctrl-C.
 */
async function follow(s: Session, nc: NatsConnection, f: Found, human: (e: HistoryEntry) => string): Promise<void> {
  const apiPrefix = s.logApi(f.cluster.clusterID);
  const js = jetstream(nc, apiPrefix ? { apiPrefix, checkAPI: false } : {});
  const stream = subjects.streamName(f.cluster.clusterID);
  const from = f.lastSeq + 1;
  const reorder = new Reorder(
    REORDER_HOLD_MS,
    f.entries.map((e) => e.seq),
  );
  const watching = new Set<string>();
  const stops: (() => void)[] = [];
  const print = (e: HistoryEntry) => {
    if (s.out.json) writeLive(s, { cluster: f.cluster.clusterID, ...timelineRow(e), ...entryJson(e) });
    else process.stdout.write(human(e));
  };
  const watch = async (subject: string) => {
    if (watching.has(subject)) return;
    watching.add(subject);
    const consumer = await js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
    const messages = await consumer.consume();
    stops.push(() => void messages.close().catch(() => {}));
    void (async () => {
      for await (const m of messages) {
        // A foreign record on a followed subject is shown as one (never thrown on: the follow goes on).
        const r = classifyRecord({ cluster: f.cluster.clusterID, instance: f.cluster.instance }, m);
        if (isForeign(r)) reorder.push({ seq: r.seq, subject: r.subject, event: {}, foreign: r.foreign }, Date.now());
        else reorder.push({ seq: r.seq, subject: r.subject, event: { ...r.event } }, Date.now());
        if (!isForeign(r) && r.event.type === "NameReserved") await watchUuid(r.event.uuid);
      }
    })().catch(() => {});
  };
  const watchUuid = async (uuid: string) => {
    for (const subject of uuidSubjects(f.cluster.clusterID, uuid)) await watch(subject);
  };
  // On stderr even with --json (stdout stays one JSON object per line): a script can wait for it.
  process.stderr.write(
    `following ${[...f.uuids, ...(f.nameSubjects.length ? ["its name"] : [])].join(", ")} in cluster ${f.cluster.clusterID}; Ctrl-C to stop\n`,
  );
  for (const u of f.uuids) await watchUuid(u);
  for (const n of f.nameSubjects) await watch(n);
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      for (const e of reorder.take(Date.now())) print(e);
    }, REORDER_HOLD_MS / 2);
    const stop = () => {
      clearInterval(tick);
      for (const st of stops) st();
      resolve();
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
}
