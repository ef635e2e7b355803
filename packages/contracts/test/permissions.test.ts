import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { NODES_STREAM, nodeQueues, nodeSubjects, nodeWorkStream, nodeWorkSubjects } from "../src/nodes.js";
import {
  clusterLogApi,
  FLEET_ACCOUNT,
  FLEET_API,
  inboxPrefix,
  type NatsPermissions,
  type NatsRole,
  natsAccount,
  natsAccountSpecs,
  natsAccountsConfig,
  natsExports,
  natsPermissions,
  natsRoles,
  natsUser,
  type SubjectRules,
} from "../src/permissions.js";
import { subjects } from "../src/subjects.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const CLUSTERS = ["c1", "c2"];
const N1 = "host-1.example.com";
const N2 = "host-2.example.com";
const specs = natsAccountSpecs(CLUSTERS, [N1, N2]);

/** NATS subject matching: `*` one token, `>` one or more trailing tokens. */
function matches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}
/** Whether two subject patterns can match one same subject. */
function overlap(a: string, b: string): boolean {
  const x = a.split(".");
  const y = b.split(".");
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] === ">" || y[i] === ">") return x.length > i && y.length > i;
    if (x[i] === undefined || y[i] === undefined) return false;
    if (x[i] !== "*" && y[i] !== "*" && x[i] !== y[i]) return false;
  }
  return true;
}
/** What nats-server decides: allowed by a rule and denied by none. */
const permits = (r: SubjectRules, subject: string) => r.allow.some((a) => matches(a, subject)) && !r.deny.some((d) => matches(d, subject));
const can = (p: NatsPermissions, op: "publish" | "subscribe", subject: string) => permits(p[op], subject);

const journal: NatsRole = { kind: "journal", cluster: "c1" };
const n1: NatsRole = { kind: "node", nodeId: N1 };
const n2: NatsRole = { kind: "node", nodeId: N2 };
const of = (r: NatsRole) => natsPermissions(r, CLUSTERS);
const spec = (name: string) => {
  const s = specs.find((a) => a.name === name);
  assert.ok(s, name);
  return s;
};

/** Every stream of a deployment, its account, the subjects it stores and who may write each subject. */
const STREAMS = [
  ...CLUSTERS.map((c) => ({ account: natsAccount({ kind: "journal", cluster: c }), stream: subjects.streamName(c), subjects: [subjects.eventsWildcard(c)] })),
  { account: FLEET_ACCOUNT, stream: NODES_STREAM, subjects: [nodeSubjects.wildcard] },
  ...[N1, N2].map((n) => ({ account: FLEET_ACCOUNT, stream: nodeWorkStream(n), subjects: [nodeWorkSubjects.forNode(n)] })),
  ...CLUSTERS.map((c) => ({ account: FLEET_ACCOUNT, stream: nodeQueues.reports(c).stream, subjects: nodeQueues.reports(c).subjects })),
];

describe("NATS accounts: the trust boundary", () => {
  test("user names, accounts and inboxes: one per role, node ids as one token", () => {
    assert.equal(natsUser(journal), "journal-c1");
    assert.equal(natsAccount(journal), "CLUSTER_c1");
    assert.equal(natsAccount({ kind: "controller" }), "CONTROLLER");
    assert.match(natsAccount(n1), /^NODE_[A-Za-z0-9_-]+$/);
    assert.notEqual(natsAccount(n1), natsAccount(n2));
    assert.equal(inboxPrefix(n1), `_INBOX.${natsUser(n1)}`);
    assert.deepEqual(natsRoles(["c1"], ["a"]).map(natsUser), ["journal-c1", "fleet", natsUser({ kind: "node", nodeId: "a" }), "controller", "admin"]);
    assert.throws(() => natsAccountSpecs([], ["a"]), /cluster/);
  });

  test("an account with streams has JetStream and only roles that own its streams; the others have none", () => {
    for (const a of specs) {
      const holds = STREAMS.filter((s) => s.account === a.name);
      assert.equal(a.jetstream, holds.length > 0, a.name);
      if (a.name.startsWith("CLUSTER_")) {
        assert.deepEqual(a.roles, [{ kind: "journal", cluster: a.name.slice("CLUSTER_".length) }], "a cluster's journals only");
        assert.equal(holds.length, 1, "its event stream alone: a push consumer on it cannot deliver onto its own subjects (a cycle)");
        // (and a restore's staging stream while a log is restored: permissions.ts says why that one is harmless)
      }
    }
    assert.deepEqual(spec(FLEET_ACCOUNT).roles, [{ kind: "fleet" }], "no running service is a member of FLEET");
  });

  test("no account imports a subject of another cluster's log, or any log but csictl's reads", () => {
    for (const a of specs)
      for (const i of a.imports) for (const c of CLUSTERS) assert.ok(!overlap(i.subject, subjects.eventsWildcard(c)), `${a.name} imports ${i.subject}`);
  });

  test("what crosses into a stream: a node only its own subjects, the controller node work, nobody else anything", () => {
    const writes = (name: string) =>
      spec(name).imports.flatMap((i) => STREAMS.flatMap((s) => s.subjects.filter((sub) => overlap(i.subject, sub)).map(() => i.subject)));
    const t1 = natsAccount(n1).slice("NODE_".length);
    assert.deepEqual(writes(natsAccount(n1)).sort(), [nodeSubjects.registration(N1), `csi.c1.report.${t1}.>`, `csi.c2.report.${t1}.>`].sort());
    assert.deepEqual([...new Set(writes("CONTROLLER"))], [nodeWorkSubjects.wildcard], "node work, into each node's own stream");
    assert.deepEqual(writes("ADMIN"), []);
    for (const c of CLUSTERS) assert.deepEqual(writes(natsAccount({ kind: "journal", cluster: c })), []);
  });

  test("a node pulls and acknowledges only its own work; a cluster's journals only their own reports", () => {
    const own = nodeQueues.work(N1);
    const subjectsOf = (r: NatsRole) => spec(natsAccount(r)).imports.map((i) => i.subject);
    assert.ok(subjectsOf(n1).includes(`$JS.API.CONSUMER.MSG.NEXT.${own.stream}.${own.consumer}`));
    assert.ok(subjectsOf(n1).includes(`$JS.ACK.${own.stream}.${own.consumer}.>`));
    assert.ok(!subjectsOf(n1).some((s) => s.includes(nodeQueues.work(N2).consumer)));
    const r1 = nodeQueues.reports("c1");
    assert.ok(subjectsOf(journal).includes(`$JS.API.CONSUMER.MSG.NEXT.${r1.stream}.${r1.consumer}`));
    assert.ok(!subjectsOf(journal).some((s) => s.includes(nodeQueues.reports("c2").stream)));
    for (const a of specs)
      for (const i of a.imports)
        assert.ok(!/\.(STREAM\.(CREATE|UPDATE|DELETE|PURGE)|STREAM\.MSG\.DELETE|CONSUMER\.DURABLE)\./.test(i.subject), `${a.name}: ${i.subject}`);
  });

  test("csictl reads every log through its own prefix, and creates consumers only there (no other stream in those accounts)", () => {
    const admin = spec("ADMIN");
    for (const c of CLUSTERS) {
      const mine = admin.imports.filter((i) => i.to?.startsWith(clusterLogApi(c)));
      assert.ok(mine.length > 0);
      for (const i of mine) assert.equal(i.from, natsAccount({ kind: "journal", cluster: c }));
    }
    assert.ok(admin.imports.filter((i) => i.subject.includes("CONSUMER.CREATE")).every((i) => i.from.startsWith("CLUSTER_")));
    assert.ok(admin.imports.filter((i) => i.from === FLEET_ACCOUNT).every((i) => i.to?.startsWith(FLEET_API)));
  });

  test("exports are exactly the imports, each to its importers only", () => {
    const fleetExports = natsExports(specs, FLEET_ACCOUNT);
    const reg = fleetExports.find((e) => e.subject === nodeSubjects.registration(N1));
    assert.deepEqual(reg?.accounts, [natsAccount(n1)]);
    const reads = fleetExports.find((e) => e.subject === `$JS.API.STREAM.MSG.GET.${NODES_STREAM}`);
    assert.equal(reads?.accounts.length, CLUSTERS.length + 2 + 2, "the journals, the nodes, the controller and csictl");
    const cmd = natsExports(specs, "CLUSTER_c1").find((e) => e.subject === subjects.commandWildcard("c1"));
    assert.deepEqual(cmd, { subject: subjects.commandWildcard("c1"), accounts: ["CONTROLLER", "ADMIN"], stream: true });
    const count = specs.reduce((n, a) => n + a.imports.length, 0);
    const exported = specs.reduce((n, a) => n + natsExports(specs, a.name).reduce((m, e) => m + e.accounts.length, 0), 0);
    assert.equal(exported, count);
  });
});

describe("per-user permissions: the second wall", () => {
  test("only a journal appends its cluster's events and takes its cluster's commands", () => {
    const event = subjects.volumeEvents("c1", UUID);
    const command = subjects.command("c1", "volume.create");
    assert.ok(can(of(journal), "publish", event));
    assert.ok(can(of(journal), "subscribe", command));
    assert.ok(!can(of(journal), "publish", subjects.volumeEvents("c2", UUID)), "not another cluster's log");
    assert.ok(!can(of(journal), "subscribe", subjects.command("c2", "volume.create")), "not another cluster's commands");
    assert.ok(can(of(journal), "publish", `$JS.API.STREAM.MSG.DELETE.${subjects.streamName("c1")}`), "its own log's API");
    assert.ok(!can(of(journal), "publish", `$JS.API.STREAM.CREATE.${subjects.streamName("c2")}`));
    assert.ok(can(of(journal), "publish", `$JS.API.STREAM.CREATE.${subjects.restoreStreamName("c1")}`), "its own restore's staging stream");
    assert.ok(can(of(journal), "publish", "csi.c1.restore.evt.vol.x"));
    assert.ok(!can(of(journal), "publish", `$JS.API.STREAM.CREATE.${subjects.restoreStreamName("c2")}`), "not another cluster's");
    assert.ok(!can(of(journal), "publish", "csi.c2.restore.evt.vol.x"));
    assert.ok(of(journal).responses && (of(journal).responses?.max ?? 0) > 1, "answers with beats, then the reply");
    for (const r of [{ kind: "controller" } as NatsRole, { kind: "admin" } as NatsRole, n1]) {
      assert.ok(!can(of(r), "publish", event), `${natsUser(r)} appends no event`);
      assert.ok(!can(of(r), "subscribe", command), `${natsUser(r)} takes no command`);
      assert.equal(of(r).responses, undefined, `${natsUser(r)} answers no request`);
    }
  });

  test("the controller sends commands and node work, pings journals, reads registrations", () => {
    const c = of({ kind: "controller" });
    assert.ok(can(c, "publish", subjects.command("c2", "volume.delete")));
    assert.ok(can(c, "publish", nodeWorkSubjects.forNode(N1)));
    assert.ok(can(c, "publish", `$SRV.PING.${subjects.journalServiceName("c1")}`));
    assert.ok(can(c, "publish", `${FLEET_API}.STREAM.MSG.GET.CSI_NODES`));
    assert.ok(can(c, "subscribe", `${inboxPrefix({ kind: "controller" })}.abc.1.0`));
    assert.ok(!can(c, "subscribe", `${inboxPrefix(n1)}.abc`), "not another role's inbox");
    assert.ok(!can(c, "publish", nodeSubjects.registration(N1)), "no registration");
    assert.ok(!can(c, "publish", subjects.reports("c1", N1, UUID)), "no report");
  });

  test("a node-agent publishes its own registration and reports, and pulls its own work only", () => {
    const p = of(n1);
    const own = nodeQueues.work(N1);
    const other = nodeQueues.work(N2);
    assert.ok(can(p, "publish", nodeSubjects.registration(N1)));
    assert.ok(can(p, "publish", subjects.reports("c1", N1, UUID)));
    assert.ok(can(p, "publish", subjects.reports("c2", N1, UUID)), "every cluster's report queue");
    assert.ok(can(p, "publish", `${FLEET_API}.CONSUMER.MSG.NEXT.${own.stream}.${own.consumer}`));
    assert.ok(can(p, "publish", `$JS.ACK.${own.stream}.${own.consumer}.1.2.3.4.5.6.7`));
    assert.ok(!can(p, "publish", nodeSubjects.registration(N2)), "not n2's registration");
    assert.ok(!can(p, "publish", subjects.reports("c1", N2, UUID)), "not n2's report");
    assert.ok(!can(p, "publish", `${FLEET_API}.CONSUMER.MSG.NEXT.${other.stream}.${other.consumer}`), "not n2's work");
    assert.ok(!can(p, "subscribe", `${inboxPrefix(n2)}.x.y`), "not n2's inbox");
    assert.ok(!can(p, "publish", nodeWorkSubjects.forNode(N2)), "sends no work");
    assert.ok(!can(p, "publish", `$JS.API.CONSUMER.CREATE.${own.stream}.${own.consumer}.${own.filterSubject}`), "makes no consumer");
  });

  test("csictl (admin) sends commands and reads, and writes nothing", () => {
    const p = of({ kind: "admin" });
    assert.ok(can(p, "publish", subjects.command("c1", "audit.verify")));
    assert.ok(can(p, "publish", `$SRV.STATS.${subjects.journalServiceName("c2")}`));
    assert.ok(can(p, "publish", `${clusterLogApi("c2")}.CONSUMER.CREATE.${subjects.streamName("c2")}.x_1.csi.c2.evt.>`));
    assert.ok(!can(p, "publish", `$JS.API.STREAM.PURGE.${subjects.streamName("c1")}`));
    assert.ok(!can(p, "publish", nodeWorkSubjects.forNode("n")));
  });
});

describe("the nats-server accounts block", () => {
  const users = [
    { user: "journal-c1", role: journal, password: "$2a$11$abcdefghijklmnopqrstuv", permissions: of(journal) },
    { user: natsUser(n1), role: n1, nkey: "UABC", permissions: of(n1) },
  ];
  const conf = natsAccountsConfig(specs, users);

  test("every account, its users, JetStream where it holds streams", () => {
    assert.match(conf, /^accounts \{\n/m);
    for (const a of specs) assert.ok(conf.includes(`${JSON.stringify(a.name)}: {`), a.name);
    assert.equal((conf.match(/jetstream: enabled/g) ?? []).length, CLUSTERS.length + 1);
    assert.match(conf, /user: "journal-c1", password: "\$2a\$11\$abcdefghijklmnopqrstuv"/);
    assert.match(conf, /nkey: "UABC"/);
    assert.equal((conf.match(/permissions: \{/g) ?? []).length, 2);
  });
  test("exports name their importers; streamed answers are kept open as long as a journal may beat; every subject quoted", () => {
    assert.ok(
      conf.includes(
        `{ service: ${JSON.stringify(subjects.commandWildcard("c1"))}, accounts: ["CONTROLLER", "ADMIN"], response_type: "stream", response_threshold: "10m" }`,
      ),
    );
    assert.ok(conf.includes(`to: ${JSON.stringify(`${FLEET_API}.STREAM.INFO.CSI_NODES`)}`));
    assert.equal((conf.match(/allow_responses: \{ max: \d+, expires: "10m" \}/g) ?? []).length, 1);
    assert.ok(!/[[,:] \$/.test(conf), "no unquoted $ (nats-server would read a variable)");
  });
});
