/**
 * Locked-down transports on real servers (docs/security.md): `csictl auth init` generates one
 * NATS user per role and the journal's Redis ACL; nats-server and redis-server run with them; a
 * journal, a controller and a node-agent run with their own credentials and the CSI calls work.
 * Then each forbidden action is tried with a role's real credentials and must be refused by the
 * server: a node-agent publishing another node's report or registration, appending an event,
 * answering a journal command, making a consumer, pulling another node's work; the controller
 * appending an event; the journal's Redis user running FLUSHALL, CONFIG or touching other keys.
 * Last, the same services over TLS (a CA made here with openssl) to nats-server and redis-server.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { realpath, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { accessEnv, natsAccessFrom, REDIS_ADMIN_USER, redisAccessFrom } from "@csi/cli/auth-files";
import {
  clusterLogApi,
  DeviceStateReported,
  decomposeVolumeId,
  FLEET_API,
  inboxPrefix,
  type NatsRole,
  nodeQueues,
  nodeSubjects,
  nodeWorkSubjects,
  subjects,
} from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient, lastMessageOf, natsConnectOptions, redisConnectOptions } from "@csi/runtime";
import {
  blockCap,
  CSICTL_BIN,
  cleanupsOf,
  cleanupUnder,
  type LocalServer,
  runStack,
  type ServiceProcess,
  spawnService,
  startServer,
  tempDir,
  whyNoDevices,
  withoutServerEnv,
  writeClustersFile,
} from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection, PermissionViolationError } from "@nats-io/transport-node";
import { Redis } from "ioredis";

const CLUSTER = "c1";
const N1 = "n1.example.com";
const N2 = "n2.example.com";
const MiB = 1024 * 1024;
const journalRole: NatsRole = { kind: "journal", cluster: CLUSTER };
const controllerRole: NatsRole = { kind: "controller" };
const adminRole: NatsRole = { kind: "admin" };
const n1Role: NatsRole = { kind: "node", nodeId: N1 };
const noDevices = whyNoDevices();

interface AuthInit {
  dir: string;
  natsConfig: string;
  redisAcl: string;
  users: { user: string; credential: string }[];
}

/** `csictl auth init` as an operator runs it; its output is checked to hold no secret. */
function authInit(out: string, more: string[] = []): AuthInit {
  const stdout = execFileSync(
    process.execPath,
    [CSICTL_BIN, "--json", "auth", "init", "--out", out, "--nodes", `${N1},${N2}`, "--clusters", CLUSTER, ...more],
    { encoding: "utf8" },
  );
  const result = JSON.parse(stdout) as AuthInit;
  for (const u of result.users) {
    const secret = readFileSync(u.credential, "utf8").trim();
    assert.ok(secret.length >= 32, `${u.user}: a long random secret`);
    assert.ok(!stdout.includes(secret), `${u.user}'s secret is not printed`);
    assert.equal(statSync(u.credential).mode & 0o777, 0o600, `${u.credential} is 0600`);
  }
  for (const f of [result.natsConfig, result.redisAcl]) assert.equal(statSync(f).mode & 0o777, 0o600, `${f} is 0600`);
  return result;
}

/** `csictl fleet init` as an operator runs it, as the fleet user of the auth directory. */
function fleetInit(natsUrl: string, authDir: string): void {
  execFileSync(process.execPath, [CSICTL_BIN, "--nats", natsUrl, "fleet", "init", "--auth-dir", authDir], {
    encoding: "utf8",
    env: withoutServerEnv(process.env),
  });
}

/** `csictl redis load-functions` as the Redis admin, as an operator runs it before the journals start (docs/security.md). */
function loadFunctions(redisUrl: string, authDir: string, env: Record<string, string> = {}): void {
  const admin = redisAccessFrom(authDir, REDIS_ADMIN_USER);
  execFileSync(process.execPath, [CSICTL_BIN, "redis", "load-functions"], {
    encoding: "utf8",
    env: { ...withoutServerEnv(process.env), REDIS_URL: redisUrl, REDIS_USERNAME: admin.redisUsername, REDIS_PASSWORD: admin.redisPassword, ...env },
  });
}

/** A rejection by the server's permissions (nats.js turns the -ERR into a PermissionViolationError). */
function isViolation(op: "publish" | "subscription", subject: string) {
  return (err: unknown) => {
    const e = err instanceof PermissionViolationError ? err : (err as { cause?: unknown })?.cause;
    assert.ok(e instanceof PermissionViolationError, `expected a permissions violation, got ${String(err)}`);
    assert.equal(e.operation, op);
    assert.equal(e.subject, subject);
    return true;
  };
}

/** A subscription the server refuses is closed with the violation. */
async function subscriptionRefused(nc: NatsConnection, subject: string, queue?: string): Promise<void> {
  const sub = nc.subscribe(subject, queue ? { queue } : {});
  const closed = await Promise.race([sub.closed, new Promise<"open">((r) => setTimeout(() => r("open"), 5000))]);
  assert.notEqual(closed, "open", `subscribing to ${subject} is refused`);
  isViolation("subscription", subject)(closed);
}

const report = (nodeId: string, uuid: string, state = "attached") => ({
  requestId: `sec-${Math.random().toString(36).slice(2)}`,
  uuid,
  nodeId,
  state,
  via: "grpc",
  at: new Date().toISOString(),
});

describe("locked down: one NATS user per role, the journal's Redis ACL", () => {
  let dir: string;
  let auth: AuthInit;
  let nats: LocalServer;
  let redis: LocalServer;
  const procs: ServiceProcess[] = [];
  const conns: NatsConnection[] = [];
  let ctrl: CsiClient<"Controller">;
  let node: CsiClient<"Node">;
  let admin: JournalClient;

  const connectAs = async (role: NatsRole) => {
    const nc = await connect(natsConnectOptions({ natsUrl: nats.url, ...natsAccessFrom(auth.dir, role) }, { inboxPrefix: inboxPrefix(role) }));
    conns.push(nc);
    return nc;
  };

  before(async () => {
    dir = await realpath(await tempDir("csi-security-"));
    auth = authInit(path.join(dir, "auth"));
    // One after the other: a server that fails to start must not leave the other one running.
    nats = await startServer("nats", path.join(dir, "nats"), undefined, ["-c", auth.natsConfig]);
    redis = await startServer("redis", path.join(dir, "redis"), undefined, ["--aclfile", auth.redisAcl]);
    fleetInit(nats.url, auth.dir);
    loadFunctions(redis.url, auth.dir);
    const clustersFile = await writeClustersFile(dir, [{ clusterID: CLUSTER, pools: ["default"] }]);
    const base = { NATS_URL: nats.url, REDIS_URL: redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: dir };
    procs.push(await spawnService("journal", { ...base, ...accessEnv(auth.dir, journalRole), CLUSTER_ID: CLUSTER }));
    const ctrlSock = `unix://${path.join(dir, "controller.sock")}`;
    const nodeSock = `unix://${path.join(dir, "node.sock")}`;
    procs.push(await spawnService("controller", { ...base, ...accessEnv(auth.dir, controllerRole) }, { args: ["--endpoint", ctrlSock] }));
    procs.push(
      await spawnService(
        "node-agent",
        { ...base, ...accessEnv(auth.dir, n1Role), NODE_STATE_DIR: path.join(dir, "node-state"), HEARTBEAT_MS: "1000" },
        { args: ["--endpoint", nodeSock, "--nodeid", N1] },
      ),
    );
    ctrl = csiClient(ctrlSock, "Controller");
    node = csiClient(nodeSock, "Node");
    admin = new JournalClient(await connectAs(adminRole), 10_000);
  });

  after(async () => {
    ctrl?.close();
    node?.close();
    for (const nc of conns) await nc.close().catch(() => {});
    await Promise.all(procs.map((p) => p.stop()));
    await Promise.all([nats?.stop(), redis?.stop()]); // their data is under dir: stopped before it is removed
    if (dir) await cleanupUnder(dir);
  });

  /** A volume created and published to n1 through the controller. */
  const createAndPublish = async (name: string) => {
    const cap = blockCap();
    const v = (await ctrl.CreateVolume({ name, volume_capabilities: [cap], capacity_range: { required_bytes: String(8 * MiB) } })).volume!;
    const pub = await ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: N1, volume_capability: cap, readonly: false });
    return { id: v.volume_id, uuid: decomposeVolumeId(v.volume_id).uuid, ctx: pub.publish_context as Record<string, string> };
  };

  /** The device reports in a volume's history, waiting (bounded) until `want` holds. */
  const reports = async (uuid: string, want: (r: { nodeId: string; state: string; requestId: string }[]) => boolean) => {
    for (let i = 0; ; i++) {
      const h = await admin.call(CLUSTER, "volume.history", { uuid });
      const rs = h.events.flatMap((e) => (e.event.type === "DeviceStateReported" ? [DeviceStateReported.parse(e.event)] : []));
      if (want(rs) || i >= 100) return rs;
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  test("with their own credentials, a journal, a controller and a node-agent create, publish and stage", async (t) => {
    // Ready: the controller pings the journal's service ($SRV.PING), the node reads its registration back.
    for (const sock of ["controller.sock", "node.sock"]) {
      const identity = csiClient(`unix://${path.join(dir, sock)}`, "Identity");
      try {
        assert.equal((await identity.Probe({})).ready?.value, true, `${sock} is ready`);
      } finally {
        identity.close();
      }
    }
    const v = await createAndPublish("pvc-secure");
    assert.ok(v.uuid);
    if (noDevices) return void t.skip(`stage: ${noDevices}`);
    const staging = path.join(dir, "kubelet", "staging", v.uuid);
    execFileSync("mkdir", ["-p", path.dirname(staging)]);
    await node.NodeStageVolume({ volume_id: v.id, staging_target_path: staging, volume_capability: blockCap(), publish_context: v.ctx });
    const rs = await reports(v.uuid, (r) => r.some((x) => x.state === "staged"));
    assert.deepEqual(
      rs.map((r) => `${r.nodeId}:${r.state}`),
      [`${N1}:attached`, `${N1}:staged`],
      "the node's reports reached the journal through its own subject",
    );
    await node.NodeUnstageVolume({ volume_id: v.id, staging_target_path: staging });
  });

  test("no credentials, no connection", async () => {
    await assert.rejects(connect({ servers: nats.url, reconnect: false }), /Authorization Violation/i);
    const r = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    const errors: string[] = [];
    r.on("error", (e: Error) => errors.push(e.message));
    await assert.rejects(r.connect().then(() => r.ping()));
    r.disconnect();
    assert.ok(
      errors.some((m) => /NOAUTH|WRONGPASS|NOPERM/.test(m)),
      `refused for want of credentials: ${errors.join("; ")}`,
    );
  });

  describe("as node-agent n1", () => {
    let nc: NatsConnection;
    const uuid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    before(async () => {
      nc = await connectAs(n1Role);
    });

    test("publishing n2's report is refused", async () => {
      const subject = subjects.reports(CLUSTER, N2, uuid);
      await assert.rejects(jetstream(nc).publish(subject, JSON.stringify(report(N2, uuid))), isViolation("publish", subject));
    });

    test("n2's work cannot be reached: acks, naks, terms and nexts on n1's own ack subject touch n1's stream only; n2's ack subject is refused; n2's item stays, never delivered to n1", async () => {
      const own = nodeQueues.work(N1);
      const other = nodeQueues.work(N2);
      const fleet = await jetstreamManager(await connectAs({ kind: "fleet" }));
      // The controller queues a work item for n2 (n2's agent is not running: it waits in n2's own stream).
      const item = {
        id: `w-${randomUUID()}`,
        nodeId: N2,
        op: "stage",
        volumeId: "x",
        stagingPath: "/var/lib/kubelet/n2",
        capability: { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" },
      };
      const stored = await jetstream(await connectAs(controllerRole)).publish(nodeWorkSubjects.forNode(N2), JSON.stringify(item), { msgID: item.id });
      const before = await fleet.streams.info(other.stream);
      for (const body of ["+ACK", "-NAK", "+TERM", "+NXT", ""]) {
        // The server's ack subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
        nc.publish(`$JS.ACK.${own.stream}.${own.consumer}.1.${stored.seq}.1.0.0`, body);
        const theirs = `$JS.ACK.${other.stream}.${other.consumer}.1.${stored.seq}.1.0.0`;
        await assert.rejects(nc.request(theirs, body, { timeout: 3000 }), isViolation("publish", theirs));
      }
      await nc.flush();
      const after = await fleet.streams.info(other.stream);
      assert.deepEqual([after.state.messages, after.state.last_seq], [before.state.messages, before.state.last_seq], "n2's item is still queued");
      const c = await fleet.consumers.info(other.stream, other.consumer);
      assert.deepEqual([c.num_pending, c.delivered.stream_seq], [1, 0], "pending for n2, delivered to nobody");
    });

    test("publishing n2's registration is refused", async () => {
      const subject = nodeSubjects.registration(N2);
      await assert.rejects(jetstream(nc).publish(subject, "{}"), isViolation("publish", subject));
    });

    test("appending an event (publishing to the events stream's subjects) is refused", async () => {
      const subject = subjects.volumeEvents(CLUSTER, uuid);
      const event = { type: "VolumeDeleted", uuid, v: 1, requestId: "forged", actor: { service: "journal", replica: "x" }, time: new Date().toISOString() };
      await assert.rejects(jetstream(nc).publish(subject, JSON.stringify(event)), isViolation("publish", subject));
      const reader = jetstreamManager(await connectAs(adminRole), { apiPrefix: clusterLogApi(CLUSTER), checkAPI: false });
      const stored = await lastMessageOf(reader, subjects.streamName(CLUSTER), subject);
      assert.equal(stored, undefined, "nothing landed in the log");
    });

    test("answering a journal command (its subject, its queue group) is refused", async () => {
      await subscriptionRefused(nc, subjects.command(CLUSTER, "volume.create"), subjects.journalQueue(CLUSTER));
      await subscriptionRefused(nc, subjects.commandWildcard(CLUSTER));
    });

    test("making a consumer (a push consumer could deliver anywhere) and pulling n2's work are refused", async () => {
      const own = nodeQueues.work(N1);
      const jsm = await jetstreamManager(nc, { checkAPI: false });
      const create = `$JS.API.CONSUMER.CREATE.${own.stream}.evil.${own.filterSubject}`;
      await assert.rejects(
        jsm.consumers.add(own.stream, { name: "evil", filter_subject: own.filterSubject, deliver_subject: subjects.volumeEvents(CLUSTER, uuid) }),
        isViolation("publish", create),
      );
      const other = nodeQueues.work(N2);
      const next = `${FLEET_API}.CONSUMER.MSG.NEXT.${other.stream}.${other.consumer}`;
      await assert.rejects(nc.request(next, JSON.stringify({ batch: 1, expires: 1e9 }), { timeout: 3000 }), isViolation("publish", next));
    });

    test("reading another role's inbox is refused", async () => {
      await subscriptionRefused(nc, `${inboxPrefix(controllerRole)}.>`);
    });

    test("a claim check goes to the journal as n1 itself only: n1's own is answered across the accounts, asking as n2 is refused", async () => {
      const cap = { accessType: "block" as const, accessMode: "SINGLE_NODE_WRITER" as const };
      const v = await admin.call(CLUSTER, "volume.create", { requestId: "sec-claim", name: "pvc-sec-claim", sizeBytes: MiB, capabilities: [cap] });
      const ask = async (nodeId: string) => (await nc.request(subjects.claims(CLUSTER, nodeId), JSON.stringify({ uuid: v.uuid }), { timeout: 5000 })).json();
      assert.deepEqual(await ask(N1), { claimed: false }, "no claim yet");
      await admin.call(CLUSTER, "volume.publish", { requestId: "sec-claim-p", uuid: v.uuid, nodeId: N1, capability: cap, readOnly: false });
      assert.deepEqual(await ask(N1), { claimed: true, accessMode: "SINGLE_NODE_WRITER", readOnly: false });
      const theirs = subjects.claims(CLUSTER, N2);
      await assert.rejects(ask(N2), isViolation("publish", theirs));
      await subscriptionRefused(nc, subjects.claimsWildcard(CLUSTER));
    });

    test("a report of n2 sent on n1's own subject is dropped by the journal", async () => {
      const js = jetstream(nc);
      // A volume n1 has business with (its claim): the journal records only such reports.
      const cap = { accessType: "block" as const, accessMode: "SINGLE_NODE_WRITER" as const };
      const v = await admin.call(CLUSTER, "volume.create", { requestId: "sec-v", name: "pvc-sec-reports", sizeBytes: MiB, capabilities: [cap] });
      await admin.call(CLUSTER, "volume.publish", { requestId: "sec-p", uuid: v.uuid, nodeId: N1, capability: cap, readOnly: false });
      const uuid = v.uuid;
      const forged = report(N2, uuid, "attached");
      const real = report(N1, uuid, "detached");
      await js.publish(subjects.reports(CLUSTER, N1, uuid), JSON.stringify(forged));
      await js.publish(subjects.reports(CLUSTER, N1, uuid), JSON.stringify(real));
      // The queue keeps order (one in flight): once the real one is in the history, the forged one was handled.
      const rs = await reports(uuid, (r) => r.some((x) => x.requestId === real.requestId));
      assert.ok(
        rs.some((x) => x.requestId === real.requestId),
        "n1's own report arrives",
      );
      assert.ok(!rs.some((x) => x.requestId === forged.requestId || x.nodeId === N2), "the forged one does not");
    });
  });

  describe("as the controller", () => {
    test("appending an event is refused", async () => {
      const nc = await connectAs(controllerRole);
      const subject = subjects.volumeEvents(CLUSTER, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e");
      await assert.rejects(jetstream(nc).publish(subject, "{}"), isViolation("publish", subject));
    });
    test("answering a journal command is refused", async () => {
      const nc = await connectAs(controllerRole);
      await subscriptionRefused(nc, subjects.command(CLUSTER, "volume.delete"), subjects.journalQueue(CLUSTER));
    });
  });

  describe("the journal's Redis user", () => {
    let r: Redis;
    before(() => {
      r = new Redis(redis.url, { ...redisConnectOptions({ redisUrl: redis.url, ...redisAccessFrom(auth.dir) }), maxRetriesPerRequest: 1 });
    });
    after(() => r?.disconnect());
    test("can read its projection", async () => {
      assert.equal(await r.hget(`{${CLUSTER}}:projection`, "complete"), "1");
    });
    test("FLUSHALL is refused", async () => {
      await assert.rejects(r.flushall(), /NOPERM/);
      assert.equal(await r.hget(`{${CLUSTER}}:projection`, "complete"), "1", "nothing was flushed");
    });
    test("CONFIG is refused", async () => {
      await assert.rejects(r.config("GET", "dir"), /NOPERM/);
      await assert.rejects(r.config("SET", "appendonly", "no"), /NOPERM/);
    });
    test("keys of other clusters (or none) are refused", async () => {
      await assert.rejects(r.set("{c2}:projection", "x"), /NOPERM/);
      await assert.rejects(r.set("plain", "x"), /NOPERM/);
    });
  });
});

describe("nkey users (csictl auth init --nkeys)", () => {
  test("a node-agent's seed file given as NATS_CREDS connects; its permissions hold", async () => {
    const dir = await realpath(await tempDir("csi-nkeys-"));
    let nats: LocalServer | undefined;
    let nc: NatsConnection | undefined;
    try {
      const auth = authInit(path.join(dir, "auth"), ["--nkeys"]);
      assert.match(readFileSync(auth.natsConfig, "utf8"), /nkey: "U[A-Z2-7]{55}"/);
      nats = await startServer("nats", path.join(dir, "nats"), undefined, ["-c", auth.natsConfig]);
      const access = natsAccessFrom(auth.dir, n1Role);
      assert.ok(access.natsCreds?.endsWith(".nk") && !access.natsUser, "a seed file, no user/password");
      nc = await connect(natsConnectOptions({ natsUrl: nats.url, ...access }, { inboxPrefix: inboxPrefix(n1Role), reconnect: false }));
      const subject = subjects.reports(CLUSTER, N2, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
      await assert.rejects(jetstream(nc).publish(subject, "{}"), isViolation("publish", subject));
    } finally {
      await nc?.close();
      await nats?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/** openssl, and redis-server built with TLS: else the part that needs it is skipped, saying why. */
const noOpenssl = (() => {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "openssl is not on this machine";
  }
})();

/** A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA. */
function makeCerts(dir: string) {
  const f = (n: string) => path.join(dir, n);
  const ssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore", cwd: dir });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  ssl("req", "-x509", ...ec, "-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "1", "-subj", "/CN=csi-test-ca");
  // nats.js checks a server reached by IP address against the name "localhost" (it sends no SNI for an IP).
  writeFileSync(f("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  for (const who of ["server", "client"]) {
    ssl("req", ...ec, "-keyout", f(`${who}.key`), "-out", f(`${who}.csr`), "-subj", `/CN=csi-test-${who}`);
    ssl(
      "x509",
      "-req",
      "-in",
      f(`${who}.csr`),
      "-CA",
      f("ca.pem"),
      "-CAkey",
      f("ca.key"),
      "-CAcreateserial",
      "-out",
      f(`${who}.pem`),
      "-days",
      "1",
      ...(who === "server" ? ["-extfile", f("server.ext")] : []),
    );
  }
  return { ca: f("ca.pem"), cert: f("server.pem"), key: f("server.key"), clientCert: f("client.pem"), clientKey: f("client.key") };
}

describe("over TLS: nats-server (client certificates required) and redis-server", { skip: noOpenssl }, () => {
  let dir: string;
  let nats: LocalServer;
  let redis: LocalServer | undefined;
  let noRedisTls: string | undefined;
  const procs: ServiceProcess[] = [];
  let certs: ReturnType<typeof makeCerts>;
  let auth: AuthInit;

  before(async () => {
    dir = await realpath(await tempDir("csi-tls-"));
    certs = makeCerts(dir);
    auth = authInit(path.join(dir, "auth"));
    const tls = { cert: certs.cert, key: certs.key, ca: certs.ca };
    nats = await startServer("nats", path.join(dir, "nats"), undefined, ["-c", auth.natsConfig, "--tlsverify"], { tls });
    try {
      redis = await startServer("redis", path.join(dir, "redis"), undefined, ["--aclfile", auth.redisAcl], { tls });
    } catch (err) {
      // Debian's redis-server is built with TLS; a build without it says so and exits.
      if (!/Bad directive.*tls|TLS.*not (available|supported|compiled)/i.test(String(err))) throw err;
      noRedisTls = `redis-server has no TLS support here: ${
        String(err)
          .split("\n")
          .find((l) => /tls/i.test(l)) ?? ""
      }`;
    }
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await Promise.all([nats?.stop(), redis?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const natsTls = () => ({ NATS_TLS_CA: certs.ca, NATS_TLS_CERT: certs.clientCert, NATS_TLS_KEY: certs.clientKey });

  test("without the CA and a client certificate, no NATS connection", async () => {
    await assert.rejects(connect(natsConnectOptions({ natsUrl: nats.url, ...natsAccessFrom(auth.dir, adminRole) }, { reconnect: false })));
    const trustedNoCert = natsConnectOptions({ natsUrl: nats.url, natsTlsCa: certs.ca, ...natsAccessFrom(auth.dir, adminRole) }, { reconnect: false });
    await assert.rejects(connect(trustedNoCert));
  });

  test("a journal and a controller with their credentials, over TLS to both servers, create a volume", async (t) => {
    if (noRedisTls || !redis) return void t.skip(noRedisTls);
    assert.match(redis.url, /^rediss:\/\//);
    const clustersFile = await writeClustersFile(dir, [{ clusterID: CLUSTER, pools: ["default"] }]);
    loadFunctions(redis.url, auth.dir, { REDIS_TLS_CA: certs.ca });
    const base = { NATS_URL: nats.url, REDIS_URL: redis.url, REDIS_TLS_CA: certs.ca, CLUSTERS_FILE: clustersFile, DATA_DIR: dir, ...natsTls() };
    procs.push(await spawnService("journal", { ...base, ...accessEnv(auth.dir, journalRole), CLUSTER_ID: CLUSTER }));
    const sock = `unix://${path.join(dir, "controller.sock")}`;
    procs.push(await spawnService("controller", { ...base, ...accessEnv(auth.dir, controllerRole) }, { args: ["--endpoint", sock] }));
    const ctrl = csiClient(sock, "Controller");
    try {
      const v = await ctrl.CreateVolume({ name: "pvc-tls", volume_capabilities: [blockCap()], capacity_range: { required_bytes: String(MiB) } });
      assert.ok(v.volume?.volume_id);
    } finally {
      ctrl.close();
    }
    // And the plain protocol is not spoken on either port.
    const plain = new Redis(redis.url.replace("rediss://", "redis://"), {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 2000,
    });
    plain.on("error", () => {});
    await assert.rejects(plain.connect().then(() => plain.ping()));
    plain.disconnect();
    assert.ok(existsSync(certs.ca));
  });
});

describe("SECURE=1 npm start", () => {
  test("locked down: anonymous connections refused, csictl finds its credentials through stack.json, no secret printed", async (t) => {
    const cleanups = cleanupsOf(t);
    const stack = await runStack(cleanups, { SECURE: "1" });
    const stackJson = readFileSync(path.join(stack.runDir, "stack.json"), "utf8");
    assert.equal(statSync(path.join(stack.runDir, "stack.json")).mode & 0o777, 0o600);
    const { authDir, natsUrl, redisUrl } = JSON.parse(stackJson) as { authDir: string; natsUrl: string; redisUrl: string };
    assert.ok(authDir, "stack.json names the credentials directory");
    const secrets = ["nats", "redis"].flatMap((d) => readdirSync(path.join(authDir, d)).map((f) => readFileSync(path.join(authDir, d, f), "utf8").trim()));
    assert.ok(secrets.length >= 5, "a secret per role");

    await assert.rejects(connect({ servers: natsUrl, reconnect: false }), /Authorization Violation/i);
    const anon = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    anon.on("error", () => {});
    await assert.rejects(anon.connect().then(() => anon.ping()));
    anon.disconnect();

    // csictl: NATS as admin (journal discovery, the log) and Redis as the journal's user (the projection).
    const out = execFileSync(process.execPath, [CSICTL_BIN, "--json", "clusters"], {
      encoding: "utf8",
      env: { ...withoutServerEnv(process.env), RUN_DIR: stack.runDir },
    });
    const rows = (JSON.parse(out) as { items: { cluster: string; replicas: number; projection: string }[] }).items;
    assert.equal(rows[0]?.replicas, 1, out);
    // The log's backup reads as admin; its restore writes as the cluster's journal (here refused only because the log is not empty).
    const backup = path.join(stack.runDir, "backup.jsonl");
    const csictl = (...args: string[]) =>
      spawnSync(process.execPath, [CSICTL_BIN, ...args], {
        encoding: "utf8",
        env: { ...withoutServerEnv(process.env), RUN_DIR: stack.runDir },
      });
    const created = csictl("--json", "volume", "create", "pvc-secure", "--size", "1Mi");
    assert.equal(created.status, 0, created.stderr);
    // The attacks of issue 21 on this stack: a node-agent's allowed request and a controller's journal
    // command, each with its reply subject on the new volume's log subject. Nothing may land there:
    // the volume's delete (fenced on that subject) still succeeds.
    const volumeId = (JSON.parse(created.stdout) as { volume: { volumeId: string } }).volume.volumeId;
    const { uuid, poolID } = decomposeVolumeId(volumeId);
    const getVolume = { uuid, poolId: poolID };
    const target = subjects.volumeEvents("local", uuid);
    const asRole = async (role: NatsRole) =>
      connect(natsConnectOptions({ natsUrl, ...natsAccessFrom(authDir, role) }, { inboxPrefix: inboxPrefix(role), reconnect: false }));
    const nodeConn = await asRole({ kind: "node", nodeId: (JSON.parse(stackJson) as { nodeId: string }).nodeId });
    const ctrlConn = await asRole(controllerRole);
    const logBefore = await lastMessageOf(
      jetstreamManager(await asRole(adminRole), { apiPrefix: clusterLogApi("local"), checkAPI: false }),
      subjects.streamName("local"),
      target,
    );
    nodeConn.publish("$JS.API.INFO", "", { reply: target });
    nodeConn.publish(`${FLEET_API}.STREAM.INFO.CSI_NODES`, "", { reply: target });
    ctrlConn.publish(subjects.command("local", "volume.get"), JSON.stringify(getVolume), { reply: target });
    await Promise.all([nodeConn.flush(), ctrlConn.flush()]);
    await new JournalClient(ctrlConn, 10_000).call("local", "volume.get", getVolume); // answered after the one above
    const logAfter = await lastMessageOf(
      jetstreamManager(await asRole(adminRole), { apiPrefix: clusterLogApi("local"), checkAPI: false }),
      subjects.streamName("local"),
      target,
    );
    assert.equal(logAfter?.seq, logBefore?.seq, "nothing landed on the volume's subject");
    await Promise.all([nodeConn.close(), ctrlConn.close()]);
    const exported = csictl("--json", "log", "export", backup);
    assert.equal(exported.status, 0, exported.stderr);
    assert.ok(JSON.parse(exported.stdout).lastSeq >= 3, exported.stdout);
    const restore = csictl("log", "import", "--insecure-no-mac", backup);
    assert.equal(restore.status, 1, restore.stderr);
    assert.match(restore.stderr, /is not empty/, "the journal role may create and read the stream");
    const deleted = csictl("volume", "delete", volumeId);
    assert.equal(deleted.status, 0, `the delete is not fenced off: ${deleted.stderr}`);
    for (const secret of secrets) {
      assert.ok(!stackJson.includes(secret), "stack.json holds no secret");
      assert.ok(!stack.output().includes(secret), "npm start prints no secret");
      assert.ok(!out.includes(secret), "csictl prints no secret");
    }
  });
});
