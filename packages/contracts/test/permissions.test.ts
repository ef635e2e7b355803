import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { nodeQueues, nodeSubjects, nodeWorkSubjects } from "../src/nodes.js";
import {
  inboxPrefix,
  type NatsPermissions,
  type NatsRole,
  natsAuthorizationConfig,
  natsPermissions,
  natsRoles,
  natsUser,
  type SubjectRules,
} from "../src/permissions.js";
import { subjects } from "../src/subjects.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const CLUSTERS = ["c1", "c2"];

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
/** What nats-server decides: allowed by a rule and denied by none. */
const permits = (r: SubjectRules, subject: string) => r.allow.some((a) => matches(a, subject)) && !r.deny.some((d) => matches(d, subject));
const can = (p: NatsPermissions, op: "publish" | "subscribe", subject: string) => permits(p[op], subject);

const journal: NatsRole = { kind: "journal", cluster: "c1" };
const n1: NatsRole = { kind: "node", nodeId: "host-1.example.com" };
const n2: NatsRole = { kind: "node", nodeId: "host-2.example.com" };
const of = (r: NatsRole) => natsPermissions(r, CLUSTERS);

describe("subject matching (the model of nats-server used below)", () => {
  test("wildcards", () => {
    assert.ok(matches("a.*.c", "a.b.c"));
    assert.ok(!matches("a.*.c", "a.b.d.c"));
    assert.ok(matches("a.>", "a.b.c"));
    assert.ok(!matches("a.>", "a"));
    assert.ok(!matches("a.b", "a.b.c"));
  });
});

describe("per-role NATS permissions", () => {
  test("user names and inboxes: one per role, node ids as one token", () => {
    assert.equal(natsUser(journal), "journal-c1");
    assert.equal(natsUser({ kind: "controller" }), "controller");
    assert.match(natsUser(n1), /^node-[A-Za-z0-9_-]+$/);
    assert.notEqual(natsUser(n1), natsUser(n2));
    assert.equal(inboxPrefix(n1), `_INBOX.${natsUser(n1)}`);
    assert.deepEqual(natsRoles(["c1"], ["a"]).map(natsUser), ["journal-c1", "controller", "admin", natsUser({ kind: "node", nodeId: "a" })]);
  });

  test("only a journal appends its cluster's events and takes its cluster's commands", () => {
    const event = subjects.volumeEvents("c1", UUID);
    const command = subjects.command("c1", "volume.create");
    assert.ok(can(of(journal), "publish", event));
    assert.ok(can(of(journal), "subscribe", command));
    assert.ok(!can(of(journal), "publish", subjects.volumeEvents("c2", UUID)), "not another cluster's log");
    assert.ok(!can(of(journal), "subscribe", subjects.command("c2", "volume.create")), "not another cluster's commands");
    assert.ok(of(journal).responses && of(journal).responses!.max > 1, "answers with beats, then the reply");
    for (const r of [{ kind: "controller" } as NatsRole, { kind: "admin" } as NatsRole, n1]) {
      assert.ok(!can(of(r), "publish", event), `${natsUser(r)} appends no event`);
      assert.ok(!can(of(r), "publish", subjects.deviceEvents("c1", UUID)), `${natsUser(r)} appends no device event`);
      assert.ok(!can(of(r), "subscribe", command), `${natsUser(r)} takes no command`);
      assert.equal(of(r).responses, undefined, `${natsUser(r)} answers no request`);
    }
  });

  test("the controller sends commands and node work, pings journals, reads registrations", () => {
    const c = of({ kind: "controller" });
    assert.ok(can(c, "publish", subjects.command("c2", "volume.delete")));
    assert.ok(can(c, "publish", nodeWorkSubjects.forNode("host-1.example.com")));
    assert.ok(can(c, "publish", `$SRV.PING.${subjects.journalServiceName("c1")}`));
    assert.ok(can(c, "publish", "$JS.API.STREAM.MSG.GET.CSI_NODES"));
    assert.ok(can(c, "subscribe", `${inboxPrefix({ kind: "controller" })}.abc.1.0`));
    assert.ok(!can(c, "subscribe", `${inboxPrefix(n1)}.abc`), "not another role's inbox");
    assert.ok(!can(c, "publish", nodeSubjects.registration("host-1.example.com")), "no registration");
    assert.ok(!can(c, "publish", subjects.reports("c1", "host-1.example.com", UUID)), "no report");
    assert.ok(!can(c, "publish", "$JS.API.STREAM.CREATE.CSI_EVENTS_c1"));
    assert.ok(!can(c, "publish", "$JS.API.CONSUMER.CREATE.CSI_NODE_WORK.x"), "no consumer (its deliver subject is unchecked)");
  });

  test("a node-agent publishes its own registration and reports, and pulls its own work only", () => {
    const p = of(n1);
    const own = nodeQueues.work(n1.kind === "node" ? n1.nodeId : "");
    const other = nodeQueues.work(n2.kind === "node" ? n2.nodeId : "");
    assert.ok(can(p, "publish", nodeSubjects.registration("host-1.example.com")));
    assert.ok(can(p, "publish", subjects.reports("c1", "host-1.example.com", UUID)));
    assert.ok(can(p, "publish", subjects.reports("c2", "host-1.example.com", UUID)), "every cluster's report queue");
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.MSG.NEXT.${own.stream}.${own.consumer}`));
    assert.ok(can(p, "publish", `$JS.ACK.${own.stream}.${own.consumer}.1.2.3.4.5.6.7`));
    assert.ok(can(p, "subscribe", `${inboxPrefix(n1)}.x.y`));

    assert.ok(!can(p, "publish", nodeSubjects.registration("host-2.example.com")), "not n2's registration");
    assert.ok(!can(p, "publish", subjects.reports("c1", "host-2.example.com", UUID)), "not n2's report");
    assert.ok(!can(p, "publish", `$JS.API.CONSUMER.MSG.NEXT.${other.stream}.${other.consumer}`), "not n2's work");
    assert.ok(!can(p, "publish", `$JS.ACK.${other.stream}.${other.consumer}.1.2.3.4.5.6.7`), "not n2's acks");
    assert.ok(!can(p, "subscribe", `${inboxPrefix(n2)}.x.y`), "not n2's inbox (its pulled work arrives there)");
    assert.ok(!can(p, "subscribe", "_INBOX.abc"), "not the default inbox");
    assert.ok(!can(p, "publish", nodeWorkSubjects.forNode("host-2.example.com")), "sends no work");
    assert.ok(!can(p, "publish", `$JS.API.CONSUMER.CREATE.${own.stream}.${own.consumer}.${own.filterSubject}`), "makes no consumer, not even its own");
    assert.ok(!can(p, "publish", "$JS.API.STREAM.CREATE.CSI_NODES"), "makes no stream");
    assert.ok(!can(p, "publish", "$JS.API.STREAM.PURGE.CSI_NODE_WORK"));
  });

  test("every stream a journal makes and reads is in its permissions", () => {
    const p = of(journal);
    const reports = nodeQueues.reports("c1");
    for (const s of [subjects.streamName("c1"), reports.stream, "CSI_NODES", "CSI_NODE_WORK"]) {
      assert.ok(can(p, "publish", `$JS.API.STREAM.INFO.${s}`), s);
      assert.ok(can(p, "publish", `$JS.API.STREAM.CREATE.${s}`), s);
    }
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.CREATE.${reports.stream}.${reports.consumer}.${reports.filterSubject}`));
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.CREATE.CSI_NODE_WORK.${nodeWorkSubjects.consumer("n")}.${nodeWorkSubjects.forNode("n")}`));
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.CREATE.${subjects.streamName("c1")}.oc_1_1.csi.c1.evt.vol.${UUID}`), "ordered reads");
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.MSG.NEXT.${subjects.streamName("c1")}.oc_1_1`));
    assert.ok(can(p, "subscribe", nodeSubjects.registration("x")), "sees registrations (makes node queues)");
    assert.ok(!can(p, "publish", `$JS.API.STREAM.CREATE.${subjects.streamName("c2")}`), "not another cluster's log");
  });

  test("csictl (admin) sends commands and reads, and writes nothing", () => {
    const p = of({ kind: "admin" });
    assert.ok(can(p, "publish", subjects.command("c1", "audit.verify")));
    assert.ok(can(p, "publish", "$SRV.STATS"));
    assert.ok(can(p, "publish", `$JS.API.CONSUMER.CREATE.${subjects.streamName("c2")}.x_1.csi.c2.evt.>`));
    assert.ok(can(p, "publish", "$JS.API.CONSUMER.CREATE.CSI_NODES.x_1.csi.nodes.*"));
    assert.ok(!can(p, "publish", "$JS.API.STREAM.PURGE.CSI_EVENTS_c1"));
    assert.ok(!can(p, "publish", nodeWorkSubjects.forNode("n")));
  });
});

describe("the nats-server authorization block", () => {
  const users = [
    { user: "journal-c1", password: "$2a$11$abcdefghijklmnopqrstuv", permissions: of(journal) },
    { user: natsUser(n1), nkey: "UABC", permissions: of(n1) },
  ];
  const conf = natsAuthorizationConfig(users);

  test("one entry per user: password users with their hash, nkey users with their public key", () => {
    assert.match(conf, /^authorization \{\n {2}users = \[\n/m);
    assert.match(conf, /user: "journal-c1", password: "\$2a\$11\$abcdefghijklmnopqrstuv"/);
    assert.match(conf, /nkey: "UABC"/);
    assert.equal((conf.match(/permissions: \{/g) ?? []).length, 2);
  });
  test("allow_responses for the journal only; every subject quoted", () => {
    assert.equal((conf.match(/allow_responses: \{ max: \d+, expires: "10m" \}/g) ?? []).length, 1);
    assert.ok(conf.includes(JSON.stringify(subjects.eventsWildcard("c1"))));
    assert.ok(conf.includes(`"csi.*.report.${natsUser(n1).slice("node-".length)}.>"`));
    assert.ok(!/[[,] \$JS/.test(conf), "no unquoted $ (nats-server would read a variable)");
  });
});
