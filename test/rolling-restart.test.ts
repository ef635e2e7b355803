/**
 * Rolling restarts under load (issue 13, item 4; docs/operations.md, "Graceful stop and rolling
 * restarts"), on the real stack (scripts/lib/stack.ts): nats-server, redis-server, three journal
 * replicas, the controller and a node-agent, as separate processes.
 *
 * A steady load goes through the controller's CSI socket: churn workers create a volume, create
 * it again (must answer the same volume), and delete it (every fourth is kept); copy workers
 * clone their own source volume and delete the clone, each copy held 1.5 s in the journal
 * (JOURNAL_TEST_HOLD_COPY_MS) so that a journal always has commands in flight. The workers retry
 * as a CO does (UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED, with backoff; scripts/lib/chaos/co-client.ts).
 *
 * Meanwhile each journal replica in turn gets SIGTERM while it holds a copy, and a fresh one is
 * started; then the controller gets SIGTERM while a copy runs through it, and is started again;
 * last the node-agent gets SIGTERM. Asserted:
 *  - every stopped process exits 0 by itself within the grace period, its drain lines say what it
 *    waited for and that nothing was cut;
 *  - the copy a journal held at its SIGTERM was finished by that journal (its VolumeCreated event
 *    has that replica as actor), not cut and taken over by another replica, and no reservation
 *    in the whole run was undone (a cut create leaves one that its resend undoes) — what fails on
 *    the old stop, which drained NATS under the running commands and exited: the failover then
 *    undid or finished them on another replica (docs/operations.md);
 *  - the CSI call in flight through the controller at its SIGTERM succeeded at its first attempt;
 *  - zero lost requests: every call ended in success, at once or after retries of a retryable
 *    code (counted by phase and code and printed); the journal restarts cost the CO no retry;
 *  - zero corrupted answers: each CreateVolume reply is a volume ID of our cluster with the
 *    requested size (and source), a repeated create answers the same ID, and the log's
 *    reservation of that ID has the requested name and size;
 *  - zero half-done volumes: audit.verify (what `csictl verify` runs) finds no orphaned
 *    reservation, leaked or missing image, drift or stale claim; the journal lists exactly the
 *    volumes the CO holds, and the pool holds exactly their images.
 */
import assert from "node:assert/strict";
import { readdir, realpath, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { decomposeVolumeId, GrpcCode, subjects } from "@csi/contracts";
import { type ClientRequestOf, JournalClient } from "@csi/runtime";
import type { ServiceProcess } from "@csi/testkit";
import { tempDir } from "@csi/testkit";
import { jetstream } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { CallFailed, CoClient, CoStats, codeName } from "../scripts/lib/chaos/co-client.js";
import { seeded } from "../scripts/lib/random.js";
import { type Stack, type StackService, startStack } from "../scripts/lib/stack.js";

const REPLICAS = 3;
const GRACE_MS = 15_000;
const HOLD_MS = 1_500;
const MiB = 1024 * 1024;
const SIZE = 4 * MiB;
const CHURN_WORKERS = 3;
const COPY_WORKERS = 2;
/** Bounds for liveness only (a loaded, shared machine): never a pass/fail on speed. */
const WAIT_MS = 180_000;
/**
 * The journals' lock TTL. The default (1 s, renewed every 333 ms) lets a replica that a busy
 * machine stalls for 2/3 s lose the lock of a copy it holds: another replica takes the name over
 * and undoes the reservation (correct, fenced; a busy run saw "createdBy undefined, undone
 * true"). Whether a stall that long happens is the machine's speed; this test is about SIGTERM
 * draining, so no stall may take a lock away here.
 */
const LOCK_TTL_MS = 60_000;

const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] as string[] } };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let root: string;
let stack: Stack;
let nc: NatsConnection;
let journal: JournalClient;
let cluster: string;

before(async () => {
  root = await realpath(await tempDir("csi-rolling-"));
  stack = await startStack({
    dataDir: path.join(root, "data"),
    runDir: path.join(root, "run"),
    nodeId: "rolling-node",
    journalReplicas: REPLICAS,
    readyTimeoutMs: WAIT_MS,
    env: { SHUTDOWN_GRACE_MS: String(GRACE_MS), JOURNAL_TEST_HOLD_COPY_MS: String(HOLD_MS), METRICS_ADDR: "off", LOCK_TTL_MS: String(LOCK_TTL_MS) },
  });
  cluster = stack.clusters[0] ?? "local";
  nc = await connect({ servers: stack.natsUrl });
  journal = new JournalClient(nc, 30_000);
});

after(async () => {
  await nc?.close().catch(() => {});
  await stack?.stop();
  if (root) await rm(root, { recursive: true, force: true });
});

// ------------------------------------------------------------------ the event log, as it grows

interface Reservation {
  uuid: string;
  name: string;
  sizeBytes: number;
  source?: string;
  /** The replica that reserved it, and the one that recorded it created (if any). */
  reservedBy: string;
  createdBy?: string;
  undone: boolean;
}

/** Follows the cluster's event log (an ordered consumer: every event, in order) and keeps the volume reservations. */
async function followLog(nc: NatsConnection, cluster: string) {
  const volumes = new Map<string, Reservation>();
  const consumer = await jetstream(nc).consumers.get(subjects.streamName(cluster));
  const messages = await consumer.consume();
  const done = (async () => {
    for await (const m of messages) {
      const e = m.json() as { type: string; uuid?: string; name?: string; sizeBytes?: number; source?: { uuid: string }; actor: { replica: string } };
      if (!e.uuid) continue;
      if (e.type === "VolumeReserved")
        volumes.set(e.uuid, {
          uuid: e.uuid,
          name: e.name ?? "",
          sizeBytes: e.sizeBytes ?? 0,
          ...(e.source ? { source: e.source.uuid } : {}),
          reservedBy: e.actor.replica,
          undone: false,
        });
      const v = volumes.get(e.uuid);
      if (!v) continue;
      if (e.type === "VolumeCreated") v.createdBy = e.actor.replica;
      if (e.type === "ReservationUndone") v.undone = true;
    }
  })();
  const waitFor = async <T>(what: string, find: () => T | undefined): Promise<T> => {
    for (let i = 0; i < WAIT_MS / 25; i++) {
      const found = find();
      if (found !== undefined) return found;
      await sleep(25);
    }
    throw new Error(`timed out waiting for ${what}`);
  };
  return {
    volumes,
    /**
     * A copy (a clone) in flight on `replica` (any, if not given): the journal said "copying an
     * image" and its volume is not in the log yet (a create's events are appended in one write,
     * after its image: docs/journal.md, "A create in three round trips").
     */
    copyInFlight: (replica?: string) =>
      waitFor(`a copy in flight${replica ? ` on ${replica}` : ""}`, () => {
        for (const j of stack.journals.filter((x) => replica === undefined || x.name === replica)) {
          for (const l of (j.process as ServiceProcess | undefined)?.logs ?? []) {
            const line = parseLine(l);
            if (line.msg !== "copying an image" || line.op !== "clone") continue;
            const uuid = String(line.imageName).replace(/^csi-vol-/, "");
            if (!volumes.has(uuid)) return { uuid, name: String(line.name), replica: j.name };
          }
        }
        return undefined;
      }),
    /** The reservation once it is created or undone. */
    settled: (uuid: string) =>
      waitFor(`volume ${uuid} created or undone`, () =>
        volumes.get(uuid)?.createdBy !== undefined || volumes.get(uuid)?.undone ? volumes.get(uuid) : undefined,
      ),
    stop: async () => {
      await messages.close();
      await done.catch(() => {});
    },
  };
}

// ------------------------------------------------------------------ the load

type Phase = "warm-up" | "journal restarts" | "controller restart" | "cool-down";

interface Op {
  kind: "create" | "create-again" | "clone" | "delete";
  name: string;
  phase: Phase;
  attempts: number;
  /** The code of every failed attempt (retried). */
  retried: string[];
  ok: boolean;
  error?: string;
}

/** CO-like workers through the controller's socket; every call and its outcome is recorded. */
class Load {
  phase: Phase = "warm-up";
  readonly ops: Op[] = [];
  readonly corrupted: string[] = [];
  /** Volumes the CO holds at the end: name → { id, uuid, size }. */
  readonly kept = new Map<string, { id: string; uuid: string; sizeBytes: number }>();
  /** Every acknowledged create: uuid → the name and size asked for. */
  readonly acknowledged = new Map<string, { name: string; sizeBytes: number }>();
  #stopping = false;
  #workers: Promise<void>[] = [];

  constructor(private readonly stack: Stack) {}

  start(): void {
    for (let w = 0; w < CHURN_WORKERS; w++) this.#workers.push(this.#churn(w));
    for (let w = 0; w < COPY_WORKERS; w++) this.#workers.push(this.#copies(w));
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await Promise.all(this.#workers);
  }

  done(phase?: Phase): Op[] {
    return this.ops.filter((o) => o.ok && (phase === undefined || o.phase === phase));
  }

  /** One call with CO retries on a worker's own client, recorded as an op. */
  async #call<T>(co: CoClient, stats: CoStats, kind: Op["kind"], name: string, run: (co: CoClient) => Promise<T>): Promise<T | undefined> {
    const before = { attempts: stats.attempts, errors: new Map(stats.attemptErrors) };
    const op: Op = { kind, name, phase: this.phase, attempts: 0, retried: [], ok: false };
    try {
      const result = await run(co);
      op.ok = true;
      return result;
    } catch (err) {
      op.error = err instanceof CallFailed ? err.message : String(err);
      return undefined;
    } finally {
      op.phase = this.phase; // the phase it ended in
      op.attempts = stats.attempts - before.attempts;
      for (const [code, n] of stats.attemptErrors) for (let i = before.errors.get(code) ?? 0; i < n; i++) op.retried.push(code);
      if (!op.ok) op.retried.pop(); // the last failed attempt was the final answer, not a retry
      this.ops.push(op);
    }
  }

  #client(seed: number): { co: CoClient; stats: CoStats } {
    const stats = new CoStats();
    const co = new CoClient({
      controllerEndpoint: this.stack.controllerEndpoint,
      nodeEndpoint: this.stack.nodeEndpoint,
      random: seeded(seed),
      stats,
      budgetMs: 120_000,
    });
    return { co, stats };
  }

  /** Checks a CreateVolume reply against what was asked; returns the volume's id and uuid. */
  #check(name: string, res: Awaited<ReturnType<CoClient["controller"]>>, sourceId?: string) {
    const v = (res as { volume?: { volume_id: string; capacity_bytes: string; content_source?: { volume?: { volume_id: string } } } }).volume;
    const id = v?.volume_id ?? "";
    let uuid = "";
    try {
      const parts = decomposeVolumeId(id);
      uuid = parts.uuid;
      if (parts.clusterID !== cluster) this.corrupted.push(`${name}: volume of cluster ${parts.clusterID}`);
    } catch {
      this.corrupted.push(`${name}: not a volume id: ${JSON.stringify(id)}`);
    }
    if (v?.capacity_bytes !== String(SIZE)) this.corrupted.push(`${name}: capacity ${v?.capacity_bytes}, asked ${SIZE}`);
    if (sourceId && v?.content_source?.volume?.volume_id !== sourceId) this.corrupted.push(`${name}: content source ${JSON.stringify(v?.content_source)}`);
    if (uuid) this.acknowledged.set(uuid, { name, sizeBytes: SIZE });
    return { id, uuid };
  }

  #request(name: string, sourceId?: string): ClientRequestOf<"Controller", "CreateVolume"> {
    return {
      name,
      capacity_range: { required_bytes: String(SIZE) },
      volume_capabilities: [cap],
      ...(sourceId ? { volume_content_source: { volume: { volume_id: sourceId } } } : {}),
    };
  }

  async #churn(w: number): Promise<void> {
    const { co, stats } = this.#client(100 + w);
    try {
      for (let n = 0; !this.#stopping; n++) {
        const name = `rr-c${w}-${n}`;
        const req = this.#request(name);
        const res = await this.#call(co, stats, "create", name, (c) => c.controller("CreateVolume", req));
        if (!res) continue;
        const { id, uuid } = this.#check(name, res);
        const again = await this.#call(co, stats, "create-again", name, (c) => c.controller("CreateVolume", req));
        if (again && again.volume?.volume_id !== id) this.corrupted.push(`${name}: created as ${id}, created again as ${again.volume?.volume_id}`);
        if (n % 4 === 3) {
          this.kept.set(name, { id, uuid, sizeBytes: SIZE });
          continue;
        }
        await this.#call(co, stats, "delete", name, (c) => c.controller("DeleteVolume", { volume_id: id }));
      }
    } finally {
      co.close();
    }
  }

  async #copies(w: number): Promise<void> {
    const { co, stats } = this.#client(200 + w);
    try {
      const sourceName = `rr-src-${w}`;
      const src = await this.#call(co, stats, "create", sourceName, (c) => c.controller("CreateVolume", this.#request(sourceName)));
      if (!src) return;
      const source = this.#check(sourceName, src);
      this.kept.set(sourceName, { ...source, sizeBytes: SIZE });
      for (let n = 0; !this.#stopping; n++) {
        const name = `rr-k${w}-${n}`;
        const res = await this.#call(co, stats, "clone", name, (c) => c.controller("CreateVolume", this.#request(name, source.id)));
        if (!res) continue;
        const { id } = this.#check(name, res, source.id);
        await this.#call(co, stats, "delete", name, (c) => c.controller("DeleteVolume", { volume_id: id }));
      }
    } finally {
      co.close();
    }
  }
}

// ------------------------------------------------------------------ stopping a service

/** A service's JSON log line (another line, e.g. a runtime warning on stderr: nothing). */
function parseLine(l: string): Record<string, unknown> {
  try {
    return JSON.parse(l);
  } catch {
    return {};
  }
}

interface Drained {
  code: number | null;
  waitingFor: Record<string, number>;
  cut: Record<string, number>;
  ms: number;
}

/** SIGTERM to the service's process; waits (bounded) for it to exit by itself and reads its drain lines. */
async function terminate(s: StackService): Promise<Drained> {
  const p = s.process as ServiceProcess;
  assert.ok(p, `${s.name} runs`);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((r) => {
    timer = setTimeout(() => r("late"), GRACE_MS + 20_000);
  });
  const code = await Promise.race([p.stop(), late]);
  clearTimeout(timer);
  if (code === "late") {
    await p.kill();
    assert.fail(`${s.name} did not exit within its grace period after SIGTERM`);
  }
  const line = (msg: RegExp) => p.logs.map(parseLine).find((l) => typeof l.msg === "string" && msg.test(l.msg));
  const started = line(/^draining/);
  const ended = line(/^drained/);
  return {
    code,
    waitingFor: (started?.waitingFor ?? {}) as Record<string, number>,
    cut: (ended?.cut ?? { "no drained line": 1 }) as Record<string, number>,
    ms: Number(ended?.ms ?? Number.NaN),
  };
}

// ------------------------------------------------------------------ the test

test("rolling restarts under a create/delete load: no lost request, no corrupted answer, no half-done volume", { timeout: 900_000 }, async (t) => {
  const log = await followLog(nc, cluster);
  const load = new Load(stack);
  load.start();
  try {
    for (let i = 0; i < WAIT_MS / 50 && load.done().length < 10; i++) await sleep(50);
    assert.ok(load.done().length >= 10, "the load runs");

    // Each journal replica in turn: SIGTERM while it holds a copy; a fresh one in its place.
    load.phase = "journal restarts";
    for (const j of stack.journals) {
      const held = await log.copyInFlight(j.name);
      const drained = await terminate(j);
      t.diagnostic(`${j.name}: SIGTERM with ${JSON.stringify(drained.waitingFor)} in flight, drained in ${drained.ms} ms, cut ${JSON.stringify(drained.cut)}`);
      assert.equal(drained.code, 0, `${j.name} exits 0 by itself`);
      const copy = await log.settled(held.uuid);
      assert.deepEqual(
        { createdBy: copy.createdBy, undone: copy.undone },
        { createdBy: j.name, undone: false },
        `the copy ${copy.name} that ${j.name} held at SIGTERM was finished by it, not cut and taken over`,
      );
      assert.deepEqual(drained.cut, {}, `${j.name} finished everything in flight`);
      assert.ok((drained.waitingFor["journal commands"] ?? 0) >= 1, `${j.name} had commands in flight`);
      await j.start();
    }

    // The controller: SIGTERM while a copy runs through it; the CO retries UNAVAILABLE until a new one serves.
    load.phase = "controller restart";
    const through = await log.copyInFlight();
    const drained = await terminate(stack.controller);
    t.diagnostic(`controller: SIGTERM with ${JSON.stringify(drained.waitingFor)} in flight, drained in ${drained.ms} ms, cut ${JSON.stringify(drained.cut)}`);
    assert.equal(drained.code, 0, "the controller exits 0 by itself");
    assert.deepEqual(drained.cut, {}, "the controller finished every call in flight");
    assert.ok((drained.waitingFor["gRPC calls"] ?? 0) >= 1, "the controller had calls in flight");
    await sleep(500); // calls refused meanwhile are retried by the CO
    await stack.controller.start();
    load.phase = "cool-down";
    for (let i = 0; i < WAIT_MS / 50 && load.done("cool-down").length < 10; i++) await sleep(50);
    await load.stop();
    const inFlightCall = load.ops.find((o) => o.name === through.name && o.kind === "clone");
    assert.ok(inFlightCall, `the call of ${through.name} was recorded`);
    assert.deepEqual(
      { ok: inFlightCall.ok, attempts: inFlightCall.attempts },
      { ok: true, attempts: 1 },
      `the call in flight through the controller at its SIGTERM (${through.name}) succeeded at once`,
    );
  } finally {
    await load.stop();
    await log.stop();
  }

  // What the CO saw.
  const byPhase = new Map<string, { ops: number; retried: Map<string, number> }>();
  for (const o of load.ops) {
    const p = byPhase.get(o.phase) ?? { ops: 0, retried: new Map() };
    p.ops++;
    for (const code of o.retried) p.retried.set(code, (p.retried.get(code) ?? 0) + 1);
    byPhase.set(o.phase, p);
  }
  for (const [phase, p] of byPhase) t.diagnostic(`${phase}: ${p.ops} calls, retried attempts ${JSON.stringify(Object.fromEntries(p.retried))}`);
  const lost = load.ops.filter((o) => !o.ok);
  assert.deepEqual(
    lost.map((o) => `${o.kind} ${o.name}: ${o.error}`),
    [],
    "no lost request",
  );
  for (const o of load.ops)
    for (const code of o.retried)
      assert.ok([codeName(GrpcCode.UNAVAILABLE), codeName(GrpcCode.ABORTED), codeName(GrpcCode.DEADLINE_EXCEEDED), "CONNECTION"].includes(code), code);
  assert.deepEqual(Object.fromEntries(byPhase.get("journal restarts")?.retried ?? []), {}, "the journal restarts cost the CO no retry");
  assert.deepEqual(load.corrupted, [], "no corrupted answer");
  const undone = [...log.volumes.values()].filter((v) => v.undone);
  t.diagnostic(`${log.volumes.size} reservations in the log, ${undone.length} undone`);
  assert.deepEqual(
    undone.map((v) => v.name),
    [],
    "no command was cut half-way (a cut create leaves a reservation that the retry undoes)",
  );
  for (const [uuid, asked] of load.acknowledged) {
    const r = log.volumes.get(uuid);
    assert.deepEqual(r && { name: r.name, sizeBytes: r.sizeBytes }, asked, `the log's reservation of ${uuid} is what was asked`);
  }

  // No half-done volume: what csictl verify checks, the journal's list, the pool's files.
  const verify = await journal.call(cluster, "audit.verify", { olderThanMs: 0 });
  assert.deepEqual(
    verify.counts,
    { leakedImages: 0, orphanedReservations: 0, missingImages: 0, projectionDrift: 0, staleClaims: 0, foreignRecords: 0 },
    JSON.stringify(verify.findings),
  );
  const listed = (await journal.call(cluster, "volume.list", { maxEntries: 1000 })).entries;
  assert.deepEqual(
    listed.map((v) => `${v.name} ${v.uuid} ${v.sizeBytes}`).sort(),
    [...load.kept].map(([name, v]) => `${name} ${v.uuid} ${v.sizeBytes}`).sort(),
    "the journal lists exactly the volumes the CO holds",
  );
  const pool = listed[0]?.pool ?? "default";
  const poolDir = path.join(root, "data", "pools", cluster, pool);
  // (Its binding to the log, .csi-pool.json, is no image.)
  assert.deepEqual(
    (await readdir(poolDir)).filter((f) => f !== ".csi-pool.json").sort(),
    listed.map((v) => `${v.imageName}.img`).sort(),
    "the pool holds exactly their images",
  );

  // The node-agent drains too (no node work runs here: it exits at once).
  const node = await terminate(stack.nodeAgent);
  assert.equal(node.code, 0, "the node-agent exits 0 by itself");
  assert.deepEqual(node.cut, {});
});
