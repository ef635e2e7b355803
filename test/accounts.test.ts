/**
 * The event log cannot be poisoned (docs/security.md, "Accounts"): on a real nats-server with the
 * account layout, every role — each cluster's journals, the controller, csictl, each node-agent —
 * tries every write it must not make:
 *
 *  - a direct publish onto a subject of every stream it does not own;
 *  - every request it can send (its account's imports, the JetStream API, journal commands,
 *    service discovery) with the reply subject set to each of those subjects, so that the server or
 *    a responder would publish the answer there;
 *  - push consumers with each of those subjects as deliver subject, through every JetStream API it
 *    can reach (its own account's, the fleet's, the logs' read APIs), on every stream.
 *
 * Then every service is restarted (each must come back ready) and nothing may have landed: the
 * target subjects are empty and no event stream grew. It runs twice: with per-user permissions
 * opened wide (`>`), so the accounts alone are the wall, and with what `csictl auth init` generates
 * (both walls, as `SECURE=1 npm start` runs).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { realpath, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { accessEnv, natsAccessFrom, REDIS_ADMIN_USER, redisAccessFrom } from "@csi/cli/auth-files";
import {
  clusterLogApi,
  FLEET_API,
  inboxPrefix,
  type NatsRole,
  NODES_STREAM,
  nameToken,
  natsAccountSpecs,
  natsAccountsConfig,
  natsPermissions,
  natsUser,
  nodeQueues,
  nodeSubjects,
  nodeWorkStream,
  nodeWorkSubjects,
  subjects,
} from "@csi/contracts";
import { csiClient, initFleet, natsConnectOptions, type RedisAccess } from "@csi/runtime";
import {
  blockCap,
  CSICTL_BIN,
  type LocalServer,
  loadJournalFunctionsAt,
  type ServiceProcess,
  spawnService,
  startServer,
  tempDir,
  withoutServerEnv,
  writeClustersFile,
} from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const CLUSTERS = ["c1", "c2"];
const N1 = "n1.example.com";
const N2 = "n2.example.com";
const MiB = 1024 * 1024;
const roles: NatsRole[] = [
  ...CLUSTERS.map((cluster) => ({ kind: "journal" as const, cluster })),
  { kind: "controller" },
  { kind: "admin" },
  { kind: "node", nodeId: N1 },
  { kind: "node", nodeId: N2 },
];
const fleet: NatsRole = { kind: "fleet" };

/** A subject of a stream and the one role that may write it (undefined: none of `roles`). */
interface Target {
  subject: string;
  stream: string;
  owner?: string;
}

/** The subjects an attacker aims at: one of every stream, each with a fresh uuid per attacker so a hit is attributed. */
function targets(attacker: NatsRole): Target[] {
  const u = randomUUID();
  const t = (subject: string, stream: string, owner?: NatsRole): Target => ({ subject, stream, ...(owner ? { owner: natsUser(owner) } : {}) });
  return [
    ...CLUSTERS.map((c) => t(subjects.volumeEvents(c, u), subjects.streamName(c), { kind: "journal", cluster: c })),
    t(subjects.reports("c1", N2, u), nodeQueues.reports("c1").stream, { kind: "node", nodeId: N2 }),
    t(subjects.reports("c2", N1, u), nodeQueues.reports("c2").stream, { kind: "node", nodeId: N1 }),
    t(nodeSubjects.registration(N2), NODES_STREAM, { kind: "node", nodeId: N2 }),
    t(nodeWorkSubjects.forNode(N2), nodeWorkStream(N2), { kind: "controller" }),
  ].filter((x) => x.owner !== natsUser(attacker));
}

/** A concrete subject for a permission or import pattern. */
const instantiate = (pattern: string) => pattern.replace(/\*/g, "x").replace(/>$/, "x");

/** The stream subjects a role writes by design (its registration and reports, the controller's node work). */
const OWN_WRITES = [nodeSubjects.wildcard, nodeWorkSubjects.wildcard, "csi.*.report.>"];
const isOwnWrite = (subject: string) =>
  OWN_WRITES.some((w) => new RegExp(`^${w.replace(/\./g, "\\.").replace(/\*/g, "[^.]+").replace(/>$/, ".+")}$`).test(subject));

/**
 * Every request an attacker can send: its account's imports, JetStream API calls, commands,
 * discovery. Its own writes (its registration, its reports, node work) are left out here: they
 * land on its own subjects by design (the last test sends them with a foreign reply subject).
 */
/** Every stream of the deployment, and every JetStream API prefix any account reaches one through. */
const ALL_STREAMS = [
  ...CLUSTERS.map((c) => subjects.streamName(c)),
  NODES_STREAM,
  nodeWorkStream(N1),
  nodeWorkStream(N2),
  ...CLUSTERS.map((c) => nodeQueues.reports(c).stream),
];
const ALL_APIS = ["$JS.API", FLEET_API, ...CLUSTERS.map(clusterLogApi)];

function requests(attacker: NatsRole): string[] {
  const spec = natsAccountSpecs(CLUSTERS, [N1, N2]).find((a) => a.roles.some((r) => natsUser(r) === natsUser(attacker)));
  const streams = ALL_STREAMS;
  const apis = ALL_APIS;
  // Pulls of every node's work consumer, through every prefix (an attacker's own is answered only onto its inbox).
  const pulls = [N1, N2].flatMap((n) => apis.map((a) => `${a}.CONSUMER.MSG.NEXT.${nodeQueues.work(n).stream}.${nodeQueues.work(n).consumer}`));
  return [
    ...(spec?.imports ?? []).map((i) => instantiate(i.to ?? i.subject)).filter((sub) => !isOwnWrite(sub)),
    ...apis.flatMap((a) => [`${a}.INFO`, ...streams.flatMap((s) => [`${a}.STREAM.INFO.${s}`, `${a}.STREAM.MSG.GET.${s}`])]),
    ...pulls,
    ...CLUSTERS.flatMap((c) => [subjects.command(c, "volume.get"), `$SRV.PING.${subjects.journalServiceName(c)}`]),
    "$SRV.PING",
  ];
}

/** Every way of making a push consumer that delivers onto `deliver`, through every API, on every stream. */
function consumerCreates(deliver: string, n: number): { subject: string; body: string }[] {
  const streams = ALL_STREAMS;
  const apis = ALL_APIS;
  return apis.flatMap((a) =>
    streams.flatMap((s) => {
      const name = `evil${n}`;
      const config = { name, durable_name: name, deliver_subject: deliver, ack_policy: "none", deliver_policy: "all" };
      const body = JSON.stringify({ stream_name: s, config });
      return [
        { subject: `${a}.CONSUMER.CREATE.${s}.${name}`, body },
        { subject: `${a}.CONSUMER.CREATE.${s}`, body },
        { subject: `${a}.CONSUMER.DURABLE.CREATE.${s}.${name}`, body },
      ];
    }),
  );
}

interface Layout {
  natsConfig: string;
  redisArgs: string[];
  /** Who loads the journal's Redis function library (the admin of a locked-down Redis). */
  redisAdmin: Omit<RedisAccess, "redisUrl">;
  env(role: NatsRole): Record<string, string>;
  access(role: NatsRole): ReturnType<typeof natsAccessFrom>;
}

/** What `csictl auth init` writes: both walls. */
function generated(dir: string): Layout {
  execFileSync(process.execPath, [CSICTL_BIN, "--json", "auth", "init", "--out", dir, "--nodes", `${N1},${N2}`, "--clusters", CLUSTERS.join(",")], {
    encoding: "utf8",
    env: withoutServerEnv(process.env),
  });
  return {
    natsConfig: path.join(dir, "auth.conf"),
    redisArgs: ["--aclfile", path.join(dir, "users.acl")],
    redisAdmin: redisAccessFrom(dir, REDIS_ADMIN_USER),
    env: (r) => accessEnv(dir, r),
    access: (r) => natsAccessFrom(dir, r),
  };
}

/** The accounts alone: every user's own permissions opened to everything (`>`). */
function accountsOnly(dir: string): Layout {
  const open = { publish: { allow: [">"], deny: [] }, subscribe: { allow: [">"], deny: [] } };
  const users = [...roles, fleet].map((role) => ({ user: natsUser(role), role, password: `pw-${natsUser(role)}`, permissions: open }));
  const natsConfig = path.join(dir, "accounts-only.conf");
  mkdirSync(dir, { recursive: true });
  writeFileSync(natsConfig, natsAccountsConfig(natsAccountSpecs(CLUSTERS, [N1, N2]), users));
  // Sanity: these really are wider than what auth init gives.
  assert.ok(!natsPermissions({ kind: "node", nodeId: N1 }, CLUSTERS).publish.allow.includes(">"));
  const access = (r: NatsRole) => ({ natsUser: natsUser(r), natsPassword: `pw-${natsUser(r)}` });
  return {
    natsConfig,
    redisArgs: [],
    redisAdmin: {},
    env: (r) => ({ NATS_USER: natsUser(r), NATS_PASSWORD: `pw-${natsUser(r)}`, NATS_ACCOUNTS: "1" }),
    access,
  };
}

function attackSuite(name: string, layoutOf: (dir: string) => Layout) {
  describe(name, () => {
    let dir: string;
    let layout: Layout;
    let nats: LocalServer;
    let redis: LocalServer;
    const services: { name: string; start: () => Promise<ServiceProcess>; proc?: ServiceProcess }[] = [];
    const conns: NatsConnection[] = [];
    const aimed: Target[] = [];

    const connectAs = async (role: NatsRole) => {
      const nc = await connect(natsConnectOptions({ natsUrl: nats.url, ...layout.access(role) }, { inboxPrefix: inboxPrefix(role), reconnect: false }));
      nc.closed().catch(() => {});
      conns.push(nc);
      return nc;
    };
    /** messages and last sequence of every stream, read by each stream's owner. */
    const streamStates = async () => {
      const out: Record<string, { messages: number; last: number; subjects: Record<string, number> }> = {};
      const read = async (role: NatsRole, names: string[]) => {
        const jsm = await jetstreamManager(await connectAs(role));
        for (const s of names) {
          const i = await jsm.streams.info(s, { subjects_filter: ">" });
          out[s] = { messages: i.state.messages, last: i.state.last_seq, subjects: i.state.subjects ?? {} };
        }
      };
      for (const c of CLUSTERS) await read({ kind: "journal", cluster: c }, [subjects.streamName(c)]);
      await read(fleet, [NODES_STREAM, nodeWorkStream(N1), nodeWorkStream(N2), ...CLUSTERS.map((c) => nodeQueues.reports(c).stream)]);
      return out;
    };

    before(async () => {
      dir = await realpath(await tempDir("csi-accounts-"));
      layout = layoutOf(path.join(dir, "auth"));
      nats = await startServer("nats", path.join(dir, "nats"), undefined, ["-c", layout.natsConfig]);
      redis = await startServer("redis", path.join(dir, "redis"), undefined, layout.redisArgs);
      await initFleet(await connectAs(fleet), CLUSTERS, [N1, N2]);
      await loadJournalFunctionsAt(redis.url, layout.redisAdmin);
      const clustersFile = await writeClustersFile(
        dir,
        CLUSTERS.map((clusterID) => ({ clusterID, pools: ["default"] })),
      );
      const base = { NATS_URL: nats.url, REDIS_URL: redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: dir };
      const sock = (s: string) => `unix://${path.join(dir, `${s}.sock`)}`;
      for (const cluster of CLUSTERS)
        services.push({
          name: `journal ${cluster}`,
          start: () => spawnService("journal", { ...base, ...layout.env({ kind: "journal", cluster }), CLUSTER_ID: cluster }),
        });
      services.push({
        name: "controller",
        start: () => spawnService("controller", { ...base, ...layout.env({ kind: "controller" }) }, { args: ["--endpoint", sock("controller")] }),
      });
      services.push({
        name: "node-agent n1",
        start: () =>
          spawnService(
            "node-agent",
            { ...base, ...layout.env({ kind: "node", nodeId: N1 }), NODE_STATE_DIR: path.join(dir, "node-state"), HEARTBEAT_MS: "1000" },
            { args: ["--endpoint", sock("node"), "--nodeid", N1] },
          ),
      });
      for (const s of services) s.proc = await s.start();
    });

    after(async () => {
      for (const nc of conns) await nc.close().catch(() => {});
      await Promise.all(services.map((s) => s.proc?.stop()));
      await Promise.all([nats?.stop(), redis?.stop()]);
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    test("the services work across accounts: create in both clusters, publish to n1, n1's registration read", async () => {
      const ctrl = csiClient(`unix://${path.join(dir, "controller.sock")}`, "Controller");
      try {
        for (const clusterID of CLUSTERS) {
          const cap = blockCap();
          const v = await ctrl.CreateVolume({
            name: `pvc-${clusterID}`,
            volume_capabilities: [cap],
            capacity_range: { required_bytes: String(MiB) },
            parameters: { clusterID },
          });
          const id = v.volume?.volume_id ?? "";
          assert.match(id, new RegExp(`-${clusterID}-`));
          const pub = await ctrl.ControllerPublishVolume({ volume_id: id, node_id: N1, volume_capability: cap, readonly: false });
          assert.ok(pub.publish_context?.imagePath, "the controller read n1's registration from the fleet");
        }
      } finally {
        ctrl.close();
      }
    });

    test("no role puts a message into a stream it does not own — by subject, reply subject or deliver subject — and every service restarts", async (t) => {
      const before = await streamStates();
      let tries = 0;
      for (const attacker of roles) {
        const nc = await connectAs(attacker);
        const aims = targets(attacker);
        aimed.push(...aims);
        const asks = requests(attacker);
        for (const [i, aim] of aims.entries()) {
          const creates = consumerCreates(aim.subject, i);
          nc.publish(aim.subject, JSON.stringify({ type: "VolumeDeleted", forged: true }));
          for (const r of asks) nc.publish(r, "{}", { reply: aim.subject });
          for (const c of creates) nc.publish(c.subject, c.body, { reply: aim.subject });
          tries += 1 + asks.length + creates.length;
        }
        await nc.flush().catch(() => {}); // a connection closed for its violations has sent what it could
      }
      assert.ok(tries > 1000, `${tries} attempts`);
      t.diagnostic(`${tries} forbidden writes tried by ${roles.length} roles`);
      // Every service restarts cleanly (and has long answered whatever it was asked meanwhile).
      for (const s of services) {
        await s.proc?.stop();
        s.proc = await s.start();
      }
      const now = await streamStates();
      const landed = aimed.filter((t) => (now[t.stream]?.subjects[t.subject] ?? 0) > (before[t.stream]?.subjects[t.subject] ?? 0));
      assert.deepEqual(
        landed.map((t) => `${t.subject} (${t.stream})`),
        [],
        "nothing landed on a subject its writer does not own",
      );
      for (const s of [
        ...CLUSTERS.map((c) => subjects.streamName(c)),
        nodeWorkStream(N1),
        nodeWorkStream(N2),
        ...CLUSTERS.map((c) => nodeQueues.reports(c).stream),
      ])
        assert.deepEqual(now[s], before[s], `${s} did not change`);
      assert.deepEqual(Object.keys(now[NODES_STREAM]?.subjects ?? {}), [nodeSubjects.registration(N1)], "only n1's own registration");
    });

    test("a node's own publish is stored; its acknowledgement, sent to a reply subject on the log, is not", async () => {
      // The positive control (the attack above would have been seen), and the last reply path: n2
      // writes its own registration with the reply subject set to cluster c1's log.
      const nc = await connectAs({ kind: "node", nodeId: N2 });
      const reg = nodeSubjects.registration(N2);
      const ack = await jetstream(nc).publish(reg, "{}");
      assert.equal(ack.stream, NODES_STREAM);
      const target = subjects.volumeEvents("c1", randomUUID());
      const before = await streamStates();
      nc.publish(reg, "{}", { reply: target });
      await jetstream(nc).publish(reg, "{}"); // in order after the one above: it has been stored and acknowledged
      const states = await streamStates();
      assert.ok((states[NODES_STREAM]?.last ?? 0) >= (before[NODES_STREAM]?.last ?? 0) + 2, "both stored as n2's registration");
      assert.equal(states[subjects.streamName("c1")]?.subjects[target], undefined, "the acknowledgement did not land in the log");
      assert.deepEqual(states[subjects.streamName("c1")], before[subjects.streamName("c1")]);
      assert.equal(nameToken(N2), reg.split(".").pop());
    });
  });
}

attackSuite("accounts alone (per-user permissions opened wide)", accountsOnly);
attackSuite("auth init's layout (accounts and per-user permissions)", generated);
