/**
 * Who may do what on NATS: one NATS user per role, its publish/subscribe permissions derived from
 * the subject builders (subjects.ts, nodes.ts) and the JetStream API calls each service makes, and
 * the nats-server `authorization` block that declares them (docs/security.md).
 *
 *   journal-<cluster>  appends its cluster's events, answers its cluster's commands (replies only to
 *                      requests it received), owns every stream and durable consumer (it makes them).
 *   controller         sends commands (request/reply) and node work; reads node registrations.
 *   node-<node>        publishes its own registration and its own reports; pulls and acks its own
 *                      work queue. It makes no stream and no consumer: a push consumer's deliver
 *                      subject is not checked against its creator's publish permissions
 *                      (nats-server issue 8274), so whoever may create consumers may write anywhere.
 *   admin              csictl: commands, reads of every stream, service discovery.
 *
 * Every role has its own reply inbox prefix (`_INBOX.<user>`), so no role can read the replies or
 * the pulled messages of another. Everything not allowed is refused; the denials listed are the
 * rules of the security model, kept even if someone widens an allow list.
 *
 * Pure: the secrets (bcrypt hashes or nkey public keys) come in from the caller.
 */
import { NODE_WORK_STREAM, NODES_STREAM, nodeQueues, nodeSubjects, nodeWorkSubjects } from "./nodes.js";
import { clusterToken, nameToken, subjects } from "./subjects.js";

export type NatsRole = { kind: "journal"; cluster: string } | { kind: "controller" } | { kind: "node"; nodeId: string } | { kind: "admin" };

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

const api = (s: string) => `$JS.API.${s}`;

/** Reading a stream: its info, last-message reads, and ordered (ephemeral) consumers on it. */
function readStream(stream: string): string[] {
  return [
    api(`STREAM.INFO.${stream}`),
    api(`STREAM.MSG.GET.${stream}`),
    api(`CONSUMER.CREATE.${stream}.*`),
    api(`CONSUMER.CREATE.${stream}.*.>`),
    api(`CONSUMER.INFO.${stream}.*`),
    api(`CONSUMER.DELETE.${stream}.*`),
    api(`CONSUMER.MSG.NEXT.${stream}.*`),
  ];
}

/** Making a stream (if missing) and durable consumers on it, pulling and acknowledging. */
function ownStream(stream: string): string[] {
  return [
    api(`STREAM.INFO.${stream}`),
    api(`STREAM.CREATE.${stream}`),
    api(`CONSUMER.CREATE.${stream}.>`),
    api(`CONSUMER.DURABLE.CREATE.${stream}.>`),
    api(`CONSUMER.INFO.${stream}.*`),
    api(`CONSUMER.MSG.NEXT.${stream}.*`),
    `$JS.ACK.${stream}.>`,
  ];
}

/** Micro-service discovery ($SRV.PING/INFO/STATS) of one service, as the service answers it. */
const serviceDiscovery = (name: string) => ["PING", "INFO", "STATS"].flatMap((v) => [`$SRV.${v}`, `$SRV.${v}.${name}`, `$SRV.${v}.${name}.*`]);

/** What no role but a journal may ever do: write a cluster's event log or take its commands. */
const JOURNAL_ONLY = { publish: ["csi.*.evt.>"], subscribe: ["csi.*.journal.>"] };
/** JetStream management only journals do (making streams and consumers, or undoing them). */
const MANAGEMENT = ["STREAM.CREATE.>", "STREAM.UPDATE.>", "STREAM.DELETE.>", "STREAM.PURGE.>", "STREAM.MSG.DELETE.>", "CONSUMER.DURABLE.CREATE.>"].map(api);

/**
 * The permissions of a role. `clusters`: the storage clusters (the controller and csictl may ping
 * their journals' services).
 */
export function natsPermissions(role: NatsRole, clusters: readonly string[]): NatsPermissions {
  const inbox = `${inboxPrefix(role)}.>`;
  switch (role.kind) {
    case "journal": {
      const c = role.cluster;
      const reports = nodeQueues.reports(c);
      return {
        publish: {
          allow: [
            subjects.eventsWildcard(c),
            api("INFO"),
            ...ownStream(subjects.streamName(c)),
            api(`STREAM.MSG.GET.${subjects.streamName(c)}`),
            // audit.purge removes foreign records (docs/operations.md, "Foreign records in the log").
            api(`STREAM.MSG.DELETE.${subjects.streamName(c)}`),
            api(`CONSUMER.DELETE.${subjects.streamName(c)}.*`),
            ...ownStream(reports.stream),
            ...ownStream(NODES_STREAM),
            api(`STREAM.MSG.GET.${NODES_STREAM}`),
            ...ownStream(NODE_WORK_STREAM),
          ],
          deny: [],
        },
        subscribe: {
          allow: [inbox, subjects.commandWildcard(c), ...serviceDiscovery(subjects.journalServiceName(c)), nodeSubjects.wildcard],
          deny: [],
        },
        responses: JOURNAL_RESPONSES,
      };
    }
    case "controller":
      return {
        publish: {
          allow: [
            "csi.*.journal.>",
            nodeWorkSubjects.wildcard,
            ...clusters.map((c) => `$SRV.PING.${subjects.journalServiceName(c)}`),
            api("INFO"),
            api(`STREAM.INFO.${NODES_STREAM}`),
            api(`STREAM.MSG.GET.${NODES_STREAM}`),
          ],
          deny: [...JOURNAL_ONLY.publish, "csi.*.report.>", nodeSubjects.wildcard, ...MANAGEMENT, api("CONSUMER.CREATE.>")],
        },
        subscribe: { allow: [inbox], deny: [...JOURNAL_ONLY.subscribe, nodeWorkSubjects.wildcard] },
      };
    case "node": {
      const work = nodeQueues.work(role.nodeId);
      const t = nameToken(role.nodeId);
      return {
        publish: {
          allow: [
            nodeSubjects.registration(role.nodeId),
            `csi.*.report.${t}.>`,
            api("INFO"),
            api(`STREAM.INFO.${NODES_STREAM}`),
            api(`STREAM.MSG.GET.${NODES_STREAM}`),
            api(`STREAM.INFO.${work.stream}`),
            api(`CONSUMER.INFO.${work.stream}.${work.consumer}`),
            api(`CONSUMER.MSG.NEXT.${work.stream}.${work.consumer}`),
            `$JS.ACK.${work.stream}.${work.consumer}.>`,
          ],
          deny: [...JOURNAL_ONLY.publish, "csi.*.journal.>", nodeWorkSubjects.wildcard, ...MANAGEMENT, api("CONSUMER.CREATE.>")],
        },
        subscribe: { allow: [inbox], deny: [...JOURNAL_ONLY.subscribe, nodeWorkSubjects.wildcard, "csi.*.report.>"] },
      };
    }
    case "admin":
      return {
        publish: {
          allow: [
            "csi.*.journal.>",
            ...["PING", "INFO", "STATS"].flatMap((v) => [`$SRV.${v}`, `$SRV.${v}.>`]),
            api("INFO"),
            ...clusters.flatMap((c) => readStream(subjects.streamName(c))),
            ...readStream(NODES_STREAM),
          ],
          deny: [...JOURNAL_ONLY.publish, ...MANAGEMENT],
        },
        subscribe: { allow: [inbox], deny: [...JOURNAL_ONLY.subscribe] },
      };
  }
}

/** Every role of a deployment: a journal per cluster, the controller, csictl, a node-agent per node. */
export function natsRoles(clusters: readonly string[], nodeIds: readonly string[]): NatsRole[] {
  return [
    ...clusters.map((cluster) => ({ kind: "journal" as const, cluster })),
    { kind: "controller" as const },
    { kind: "admin" as const },
    ...nodeIds.map((nodeId) => ({ kind: "node" as const, nodeId })),
  ];
}

/** A user of the authorization block: a password (plain or, better, a bcrypt hash) or an nkey public key. */
export type NatsUserEntry = { user: string; permissions: NatsPermissions } & ({ password: string } | { nkey: string });

const list = (xs: string[]) => `[${xs.map((x) => JSON.stringify(x)).join(", ")}]`;
const rules = (r: SubjectRules) => `{ allow: ${list(r.allow)}${r.deny.length ? `, deny: ${list(r.deny)}` : ""} }`;

/** The nats-server `authorization { users = [...] }` block (a file the server config includes). */
export function natsAuthorizationConfig(users: readonly NatsUserEntry[]): string {
  const entries = users.map((u) => {
    const who = "nkey" in u ? `nkey: ${JSON.stringify(u.nkey)}` : `user: ${JSON.stringify(u.user)}, password: ${JSON.stringify(u.password)}`;
    const p = u.permissions;
    const responses = p.responses ? `\n        allow_responses: { max: ${p.responses.max}, expires: ${JSON.stringify(p.responses.expires)} }` : "";
    return [
      `    # ${u.user}`,
      "    {",
      `      ${who}`,
      "      permissions: {",
      `        publish: ${rules(p.publish)}`,
      `        subscribe: ${rules(p.subscribe)}${responses}`,
      "      }",
      "    }",
    ].join("\n");
  });
  return `# Generated by csictl auth init (docs/security.md): one user per role, nothing else may connect.\nauthorization {\n  users = [\n${entries.join("\n")}\n  ]\n}\n`;
}
