/**
 * Who may do what on NATS (docs/security.md): NATS **accounts** are the trust boundary, per-user
 * permissions inside each account a second wall. Both are derived here from the subject builders
 * (subjects.ts, nodes.ts) and the JetStream API calls each service makes.
 *
 * Why accounts. A request's reply subject is not checked against the requester's permissions:
 * the server (its JetStream API) and every responder answer on whatever subject the requester
 * names. Inside one account, any user that may send any request can therefore have a message
 * published onto any subject — a stream's, for instance — and a user that may make a push consumer
 * can have the server deliver stream messages onto any subject. So a stream must live in an
 * account whose users are all allowed to write it, and everything that crosses accounts is an
 * explicit export/import of an exact subject: a request that crosses is answered on a `_R_.`
 * subject that the server maps back to the requester's account, never into the exporter's.
 *
 *   CLUSTER_<c>   the journals of storage cluster c. Holds its event stream (CSI_EVENTS_<c>), the
 *                 one lasting stream in the account (a push consumer on it cannot deliver onto its
 *                 own subjects: JetStream refuses the cycle). While a log is restored, the restore's
 *                 staging stream (CSI_RESTORE_<c>) is there too: a push consumer on the log could
 *                 deliver into it, but nothing of it is ever copied into the log (the restore writes
 *                 the log from the checked backup file; the staging stream only proves the server
 *                 takes every record, and a record that should not be there fails its check), and only
 *                 the journal role may make consumers on it. Exports its commands and service
 *                 discovery to the controller and csictl, and read-only access to its log to csictl.
 *   FLEET         what crosses between nodes and the control plane: node registrations
 *                 (CSI_NODES), node work (CSI_NODE_WORK) and every cluster's device reports
 *                 (CSI_REPORTS_<c>). Its one user (`fleet`) is the operator's: `csictl fleet init`
 *                 makes the streams and the durable consumers of the declared nodes and clusters,
 *                 and `csictl node remove` purges a gone node's registration (ADMIN only reads them).
 *                 No running service is a member. Exports: a node's own registration and report
 *                 subjects (JetStream publishes, acknowledged back across), the controller's node
 *                 work subject, reads of the registrations, and each consumer's pull/ack API to the
 *                 one account that pulls it.
 *   NODE_<t>      the node-agent of one node (t: its id as a token): it can reach only its own
 *                 registration, its own report subjects and its own work consumer.
 *   CONTROLLER    the controllers: journal commands, node work, registration reads.
 *   ADMIN         csictl: journal commands, service discovery, reads of every log and of the
 *                 registrations. It writes nothing (a log restore runs as the cluster's journal).
 *
 * Every role keeps its own reply inbox prefix (`_INBOX.<user>`); responders answer only onto inboxes
 * (replies.ts). Pure: secrets come from the caller.
 */
import { NODES_STREAM, nodeQueues, nodeSubjects, nodeWorkSubjects } from "./nodes.js";
import { clusterToken, nameToken, subjects } from "./subjects.js";

export type NatsRole =
  | { kind: "journal"; cluster: string }
  | { kind: "controller" }
  | { kind: "node"; nodeId: string }
  | { kind: "admin" }
  /** The fleet account's operator (`csictl fleet init`): no running service connects as it. */
  | { kind: "fleet" };

export interface SubjectRules {
  allow: string[];
  deny: string[];
}

export interface NatsPermissions {
  publish: SubjectRules;
  subscribe: SubjectRules;
  /** May answer the requests it receives: up to `max` messages per request (working beats, then the reply) for `expires`. */
  responses?: { max: number; expires: string };
}

/** A journal may beat for 10 minutes (every 250 ms) before it replies: far beyond any caller's deadline. */
export const JOURNAL_RESPONSES = { max: 10_000, expires: "10m" };

/** The NATS user name of a role. */
export function natsUser(role: NatsRole): string {
  switch (role.kind) {
    case "journal":
      return `journal-${clusterToken(role.cluster)}`;
    case "node":
      return `node-${nameToken(role.nodeId)}`;
    default:
      return role.kind;
  }
}

/** The reply inbox prefix of a role: its connections use it, its permissions allow only it. */
export function inboxPrefix(role: NatsRole): string {
  return `_INBOX.${natsUser(role)}`;
}

/** The account a role's users belong to. */
export function natsAccount(role: NatsRole): string {
  switch (role.kind) {
    case "journal":
      return `CLUSTER_${clusterToken(role.cluster)}`;
    case "node":
      return `NODE_${nameToken(role.nodeId)}`;
    case "fleet":
      return FLEET_ACCOUNT;
    default:
      return role.kind.toUpperCase();
  }
}

export const FLEET_ACCOUNT = "FLEET";
const API = "$JS.API";
/** Where accounts that import the fleet's JetStream API reach it (their own `$JS.API` is not the fleet's). */
export const FLEET_API = "$JS.fleet.API";
/** Where csictl reaches the JetStream API of a cluster's log (read-only). */
export const clusterLogApi = (cluster: string) => `$JS.log.${clusterToken(cluster)}.API`;

/** One service import: `subject` of account `from`, seen as `to` (default the same) in the importer. */
export interface NatsImport {
  from: string;
  subject: string;
  to?: string;
  /** Several answers per request (pulls, journal beats, discovery of several replicas). */
  stream?: boolean;
}

export interface NatsAccountSpec {
  name: string;
  jetstream: boolean;
  roles: NatsRole[];
  imports: NatsImport[];
}

/** An export of an account: made from the imports of the others, so the two cannot disagree. */
export interface NatsExport {
  subject: string;
  accounts: string[];
  stream: boolean;
}

/** A JetStream API call `call` (e.g. `STREAM.INFO.X`) of account `from`, imported under `prefix`. */
const apiImport = (from: string, prefix: string, call: string, stream = false): NatsImport => ({
  from,
  subject: `${API}.${call}`,
  to: `${prefix}.${call}`,
  stream,
});

/** Reading the node registrations: stream info (its subjects) and the last message of one. */
const registryReads = (): NatsImport[] => [`STREAM.INFO.${NODES_STREAM}`, `STREAM.MSG.GET.${NODES_STREAM}`].map((c) => apiImport(FLEET_ACCOUNT, FLEET_API, c));

/** Pulling and acknowledging one durable consumer of the fleet (and its info, which the client reads first). */
const pulls = (stream: string, consumer: string): NatsImport[] => [
  apiImport(FLEET_ACCOUNT, FLEET_API, `CONSUMER.INFO.${stream}.${consumer}`),
  apiImport(FLEET_ACCOUNT, FLEET_API, `CONSUMER.MSG.NEXT.${stream}.${consumer}`, true),
  { from: FLEET_ACCOUNT, subject: `$JS.ACK.${stream}.${consumer}.>` },
];

/** Micro-service discovery of one service ($SRV.PING/INFO/STATS.<name>), every replica answering. */
const discovery = (cluster: string, verbs: string[]): NatsImport[] =>
  verbs.map((v) => ({ from: natsAccount({ kind: "journal", cluster }), subject: `$SRV.${v}.${subjects.journalServiceName(cluster)}`, stream: true }));

const commands = (cluster: string): NatsImport => ({
  from: natsAccount({ kind: "journal", cluster }),
  subject: subjects.commandWildcard(cluster),
  stream: true,
});

/** Read-only access to a cluster's log: stream info, message reads, ephemeral (ordered) pull consumers. */
const logReads = (cluster: string): NatsImport[] => {
  const s = subjects.streamName(cluster);
  const from = natsAccount({ kind: "journal", cluster });
  const at = clusterLogApi(cluster);
  return [
    apiImport(from, at, `STREAM.INFO.${s}`),
    apiImport(from, at, `STREAM.MSG.GET.${s}`),
    apiImport(from, at, `CONSUMER.CREATE.${s}.>`),
    apiImport(from, at, `CONSUMER.INFO.${s}.*`),
    apiImport(from, at, `CONSUMER.DELETE.${s}.*`),
    apiImport(from, at, `CONSUMER.MSG.NEXT.${s}.*`, true),
  ];
};

/** The durable consumer of a cluster's reports, pulled by its journals. */
const reportsConsumer = (cluster: string) => nodeQueues.reports(cluster);

/** The accounts of a deployment and what each imports (exports follow from them: `natsExports`). */
export function natsAccountSpecs(clusters: readonly string[], nodeIds: readonly string[]): NatsAccountSpec[] {
  if (clusters.length === 0) throw new Error("at least one storage cluster is needed");
  if (new Set(nodeIds.map(nameToken)).size !== nodeIds.length) throw new Error("node ids must be distinct");
  const journalAccounts = clusters.map((cluster): NatsAccountSpec => {
    const r = reportsConsumer(cluster);
    return {
      name: natsAccount({ kind: "journal", cluster }),
      jetstream: true,
      roles: [{ kind: "journal", cluster }],
      imports: [...pulls(r.stream, r.consumer), ...registryReads()],
    };
  });
  const nodeAccounts = nodeIds.map((nodeId): NatsAccountSpec => {
    const t = nameToken(nodeId);
    const w = nodeQueues.work(nodeId);
    return {
      name: natsAccount({ kind: "node", nodeId }),
      jetstream: false,
      roles: [{ kind: "node", nodeId }],
      imports: [
        { from: FLEET_ACCOUNT, subject: nodeSubjects.registration(nodeId) },
        ...clusters.map((c) => ({ from: FLEET_ACCOUNT, subject: `csi.${clusterToken(c)}.report.${t}.>` })),
        // Its own claim checks only (the journal answers for the node its subject names).
        ...clusters.map((c) => ({ from: natsAccount({ kind: "journal", cluster: c }), subject: subjects.claims(c, nodeId) })),
        ...registryReads(),
        ...pulls(w.stream, w.consumer),
      ],
    };
  });
  return [
    ...journalAccounts,
    { name: FLEET_ACCOUNT, jetstream: true, roles: [{ kind: "fleet" }], imports: [] },
    ...nodeAccounts,
    {
      name: natsAccount({ kind: "controller" }),
      jetstream: false,
      roles: [{ kind: "controller" }],
      imports: [
        ...clusters.flatMap((c) => [commands(c), ...discovery(c, ["PING"])]),
        { from: FLEET_ACCOUNT, subject: nodeWorkSubjects.wildcard },
        ...registryReads(),
      ],
    },
    {
      name: natsAccount({ kind: "admin" }),
      jetstream: false,
      roles: [{ kind: "admin" }],
      imports: [...clusters.flatMap((c) => [commands(c), ...discovery(c, ["PING", "INFO", "STATS"]), ...logReads(c)]), ...registryReads()],
    },
  ];
}

/** What an account exports: every subject another account imports from it, to exactly those accounts. */
export function natsExports(specs: readonly NatsAccountSpec[], account: string): NatsExport[] {
  const bySubject = new Map<string, NatsExport>();
  for (const spec of specs)
    for (const i of spec.imports) {
      if (i.from !== account) continue;
      const e = bySubject.get(i.subject) ?? { subject: i.subject, accounts: [], stream: false };
      if (!e.accounts.includes(spec.name)) e.accounts.push(spec.name);
      e.stream ||= !!i.stream;
      bySubject.set(i.subject, e);
    }
  return [...bySubject.values()];
}

/** The JetStream API of a role's own account for one stream it owns (make, read, consume, restore, purge). */
function ownStreamApi(stream: string): string[] {
  return [
    `STREAM.*.${stream}`,
    `STREAM.MSG.*.${stream}`,
    `CONSUMER.*.${stream}`,
    `CONSUMER.*.${stream}.>`,
    `CONSUMER.MSG.NEXT.${stream}.*`,
    `DIRECT.GET.${stream}.>`,
  ]
    .map((c) => `${API}.${c}`)
    .concat(`$JS.ACK.${stream}.>`);
}

const localSubjects = (imports: NatsImport[]) => imports.map((i) => i.to ?? i.subject);

/**
 * The permissions of a role inside its account: exactly the subjects of its imports, its own
 * stream's API if it has one, its inbox. The second wall: an import added by mistake to an
 * account is still not usable by a user whose permissions do not name it.
 */
export function natsPermissions(role: NatsRole, clusters: readonly string[]): NatsPermissions {
  const inbox = `${inboxPrefix(role)}.>`;
  const nodeIds = role.kind === "node" ? [role.nodeId] : [];
  const spec = natsAccountSpecs(clusters, nodeIds).find((a) => a.name === natsAccount(role));
  const imported = localSubjects(spec?.imports ?? []);
  switch (role.kind) {
    case "journal": {
      const c = role.cluster;
      return {
        publish: {
          allow: [
            subjects.eventsWildcard(c),
            `${API}.INFO`,
            ...ownStreamApi(subjects.streamName(c)),
            // A log restore (csictl as the journal, journals stopped) stages the backup in a stream of its own first.
            subjects.restoreWildcard(c),
            ...ownStreamApi(subjects.restoreStreamName(c)),
            ...imported,
          ],
          deny: [],
        },
        subscribe: {
          allow: [
            inbox,
            subjects.commandWildcard(c),
            subjects.claimsWildcard(c),
            ...["PING", "INFO", "STATS"].flatMap((v) => [
              `$SRV.${v}`,
              `$SRV.${v}.${subjects.journalServiceName(c)}.>`,
              `$SRV.${v}.${subjects.journalServiceName(c)}`,
            ]),
          ],
          deny: [],
        },
        responses: JOURNAL_RESPONSES,
      };
    }
    case "fleet":
      return { publish: { allow: [`${API}.>`, "$JS.ACK.>"], deny: [] }, subscribe: { allow: [inbox], deny: [] } };
    default:
      return { publish: { allow: imported, deny: [] }, subscribe: { allow: [inbox], deny: [] } };
  }
}

/** Every role of a deployment: a journal per cluster, the fleet's operator, the controller, csictl, a node-agent per node. */
export function natsRoles(clusters: readonly string[], nodeIds: readonly string[]): NatsRole[] {
  return natsAccountSpecs(clusters, nodeIds).flatMap((a) => a.roles);
}

/** A user of the accounts block: a password (plain or, better, a bcrypt hash) or an nkey public key. */
export type NatsUserEntry = { user: string; role: NatsRole; permissions: NatsPermissions } & ({ password: string } | { nkey: string });

const q = (s: string) => JSON.stringify(s);
const list = (xs: string[]) => `[${xs.map(q).join(", ")}]`;
const rules = (r: SubjectRules) => `{ allow: ${list(r.allow)}${r.deny.length ? `, deny: ${list(r.deny)}` : ""} }`;

function userEntry(u: NatsUserEntry): string {
  const who = "nkey" in u ? `nkey: ${q(u.nkey)}` : `user: ${q(u.user)}, password: ${q(u.password)}`;
  const p = u.permissions;
  const responses = p.responses ? `\n            allow_responses: { max: ${p.responses.max}, expires: ${q(p.responses.expires)} }` : "";
  return [
    `        # ${u.user}`,
    "        {",
    `          ${who}`,
    "          permissions: {",
    `            publish: ${rules(p.publish)}`,
    `            subscribe: ${rules(p.subscribe)}${responses}`,
    "          }",
    "        }",
  ].join("\n");
}

/** How long nats-server keeps the route back for a streamed answer: a journal may beat for that long. */
const STREAM_RESPONSE_THRESHOLD = JOURNAL_RESPONSES.expires;

/**
 * The nats-server `accounts { … }` block (a file the server config includes, or `-c` alone): every
 * account with its users, JetStream where it holds streams, its exports (from the imports of the
 * others, each to exactly its importers) and its imports. `system_account` is left to the server
 * default (`$SYS`, which no user here belongs to).
 */
export function natsAccountsConfig(specs: readonly NatsAccountSpec[], users: readonly NatsUserEntry[]): string {
  const blocks = specs.map((a) => {
    const members = users.filter((u) => natsAccount(u.role) === a.name);
    const exports = natsExports(specs, a.name).map(
      (e) =>
        `        { service: ${q(e.subject)}, accounts: ${list(e.accounts)}${e.stream ? `, response_type: "stream", response_threshold: ${q(STREAM_RESPONSE_THRESHOLD)}` : ""} }`,
    );
    const imports = a.imports.map(
      (i) => `        { service: { account: ${q(i.from)}, subject: ${q(i.subject)} }${i.to && i.to !== i.subject ? `, to: ${q(i.to)}` : ""} }`,
    );
    return [
      `  ${q(a.name)}: {`,
      ...(a.jetstream ? ["    jetstream: enabled"] : []),
      "    users: [",
      ...members.map(userEntry),
      "    ]",
      ...(exports.length ? ["    exports: [", ...exports, "    ]"] : []),
      ...(imports.length ? ["    imports: [", ...imports, "    ]"] : []),
      "  }",
    ].join("\n");
  });
  return `# Generated by csictl auth init (docs/security.md): an account per trust domain, a user per role.\naccounts {\n${blocks.join("\n")}\n}\n`;
}
