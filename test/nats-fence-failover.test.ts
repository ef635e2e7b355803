/**
 * The JetStream sequence fence on a replicated stream, across a stream-leader change, on the
 * nats-server the tests run (the system's, or NATS_SERVER_BIN: docs/operations.md, "Which
 * nats-server"). The journal fences every append with Nats-Expected-Last-Subject-Sequence; the
 * first event of an aggregate expects 0 (an empty subject). Older servers were reported to let two
 * such publishes through on a clustered stream: concurrent ones (nats-io/nats-server#4320, fixed in
 * 2.9.21), expected 0 (#5644, fixed in 2.10.x), a new leader that has not applied what it inherited
 * (#6194, 2.11).
 *
 * A 3-node cluster (scripts/lib/ha-servers.ts), a stream at 3 replicas, two writers A and B, each
 * on one of the followers (the kill never cuts their connections; their publishes reach the leader
 * over different routes). Each round, on a fresh subject, both publish with expected sequence 0:
 * A first and B after A's ack, or both at once; with the stream leader SIGKILLed after A (and B)
 * or not. B is sent again until the (new) leader answers it (stored or refused), the old leader is
 * restarted and the stream healed. The subject must then hold exactly one message: two would be two
 * writers both let through by a fence that expected an empty subject.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { AckedPublisher, PublishRefused, PublishUnacked } from "@csi/runtime";
import { type LocalServer, natsServerVersion, tempDir } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { placementSeen, QUIET_MS, startJetStreamCluster, streamHealedOf, streamLedOf, untilSeen, withJetStream } from "../scripts/lib/ha-servers.js";

const STREAM = "FENCE";
/** JetStream's "wrong last sequence" API error. */
const WRONG_LAST_SEQUENCE = 10071;
const fence = { expectedLastSubjectSequence: 0 };

let dir: string;
/** n1, n2, n3 (filled as they start, so a failed start still stops them). */
const nodes: LocalServer[] = [];
let nc: NatsConnection;

before(async () => {
  dir = await tempDir("csi-fence-failover-");
  await startJetStreamCluster(path.join(dir, "servers"), {}, nodes);
  nc = await connect({ servers: nodes.map((n) => n.url), maxReconnectAttempts: -1 });
  await (await jetstreamManager(nc)).streams.add({ name: STREAM, subjects: ["fence.>"], num_replicas: 3 });
});

after(async () => {
  await nc?.close();
  await Promise.all(nodes.map((n) => n.stop()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Messages the stream holds on `subject` (asked through the nodes that run, on a new connection). */
const stored = (subject: string) =>
  withJetStream(nodes, async (jsm) => (await jsm.streams.info(STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0);

type Answer = "stored" | "refused" | "no answer";

/** One publish fenced on an empty subject: stored, refused by the fence, or unanswered (no leader, timeout). */
async function fencedPublish(pub: AckedPublisher, subject: string, data: string): Promise<Answer> {
  try {
    await pub.publish(subject, data, fence);
    return "stored";
  } catch (err) {
    if (err instanceof PublishRefused && err.errCode === WRONG_LAST_SEQUENCE) return "refused";
    if (err instanceof PublishUnacked) return "no answer";
    throw err;
  }
}

interface Round {
  a: Answer;
  b: Answer;
  messages: number;
}

/**
 * How a round goes: A's ack awaited before B is sent, or A and B sent together (racing, B
 * then does not wait for A); the stream leader SIGKILLed after A (and B, when racing) or not.
 */
interface Kind {
  name: string;
  racing: boolean;
  kill: boolean;
  /** The leader asked to step down (a planned restart's first step) instead of killed. */
  stepDown?: boolean;
  rounds: number;
}

const KINDS: Kind[] = [
  { name: "A and B racing, no failover", racing: true, kill: false, rounds: 20 },
  { name: "A acked, then the leader killed, then B", racing: false, kill: true, rounds: 2 },
  { name: "A and B racing, the leader killed at once", racing: true, kill: true, rounds: 2 },
  { name: "A acked, then the leader stepped down, then B", racing: false, kill: false, stepDown: true, rounds: 20 },
  { name: "A and B racing, the leader stepped down at once", racing: true, kill: false, stepDown: true, rounds: 20 },
];

async function round(kind: Kind, i: number): Promise<Round> {
  const subject = `fence.${KINDS.indexOf(kind)}.${i}`;
  // Every wait below goes on while the cluster's view of the stream changes (scripts/lib/ha-servers.ts,
  // untilSeen): on a loaded machine a new leader or a restarted node's catch-up has no promised time.
  const leader = await streamLedOf(nodes, STREAM);
  // A and B are two writers (two journal replicas), each connected to one of the followers: the
  // kill never cuts their connections, and their publishes reach the leader over different routes.
  const followers = nodes.filter((n) => n !== leader && n.running);
  assert.equal(followers.length, 2, "two followers");
  const conns = await Promise.all(followers.map((f) => connect({ servers: f.url, maxReconnectAttempts: -1 })));
  try {
    const [pubA, pubB] = conns.map((c) => new AckedPublisher(c, 2000)) as [AckedPublisher, AckedPublisher];
    const a = fencedPublish(pubA, subject, "A");
    if (!kind.racing) assert.equal(await a, "stored", "A stored before B is sent");
    const racingB = kind.racing ? fencedPublish(pubB, subject, "B") : undefined;
    if (kind.kill) {
      await Promise.all(conns.map((c) => c.flush())); // what was sent has reached the followers, which forward it to the leader
      await leader.kill();
    }
    if (kind.stepDown) await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${STREAM}`, "", { timeout: 5000 }).catch(() => {});
    // B again until the (new) leader answers it, as the journal's retry would.
    let b: Answer = (await racingB) ?? "no answer";
    if (b === "no answer") {
      await untilSeen("a definite answer to B", async () => {
        b = await fencedPublish(pubB, subject, "B");
        return { done: b !== "no answer", seen: await placementSeen(nodes, STREAM) };
      });
    }
    const answerA = await a;
    if (kind.kill) {
      await leader.restart();
      await streamHealedOf(nodes, STREAM);
    }
    return { a: answerA, b, messages: await stored(subject) };
  } finally {
    await Promise.all(conns.map((c) => c.close()));
    // A round that failed leaves the cluster whole for the next test.
    if (!leader.running) await leader.restart();
  }
}

for (const kind of KINDS) {
  // The timeout is a safety net against a wait that never ends, not a schedule: each round's waits
  // give up on their own once the cluster stands still for QUIET_MS.
  const timeout = kind.rounds * 4 * QUIET_MS;
  test(`expected-last-subject-sequence 0 on a 3-replica stream, ${kind.name}: one message, ${kind.rounds} rounds`, { timeout }, async (t) => {
    const rounds: Round[] = [];
    for (let i = 0; i < kind.rounds; i++) rounds.push(await round(kind, i));
    const tally = new Map<string, number>();
    for (const r of rounds) {
      const k = `A ${r.a}, B ${r.b}, ${r.messages} stored`;
      tally.set(k, (tally.get(k) ?? 0) + 1);
    }
    t.diagnostic(`nats-server ${natsServerVersion().text}: ${[...tally].map(([k, n]) => `${n}× ${k}`).join("; ")}`);
    for (const [i, r] of rounds.entries())
      assert.equal(r.messages, 1, `round ${i}: A ${r.a}, B ${r.b}: ${r.messages} messages on a subject both expected empty`);
  });
}
