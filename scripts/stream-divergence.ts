/**
 * Do the replicas of a 3-replica JetStream stream stay one log through node faults? Nothing of the
 * driver runs: a 3-node cluster (scripts/lib/ha-servers.ts), one stream, three publishers (one per
 * node) appending fenced as the journal does (Nats-Expected-Last-Subject-Sequence on 40 subjects),
 * and a fault every few seconds — SIGKILL of the stream's leader (restarted 8 s later), or SIGSTOP
 * of the leader or of a follower for 11 s — each followed by a wait until every replica is current.
 * Then each node's copy is read (streamCopiesOf: each node made the leader in turn) and compared,
 * and every acknowledged publish is looked for at its acknowledged sequence in each copy.
 *
 *   node --conditions=source --import tsx scripts/stream-divergence.ts [--rounds 4] [--faults kill-leader,freeze-leader,freeze-other]
 *   NATS_SERVER_BIN=/path/to/nats-server …   (another binary: scripts/install-nats-server.sh)
 *
 * Exits 1 when the copies differ or an acknowledged publish is missing (docs/operations.md, "The
 * replicas of a stream diverge on 2.9.10").
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { natsServerVersion } from "@csi/testkit";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startJetStreamCluster, streamCopiesOf, streamHealedOf, streamLeaderOf } from "./lib/ha-servers.js";
import { copiesDisagree, recordOf } from "./lib/stream-copies.js";

const FAULTS = ["kill-leader", "freeze-leader", "freeze-other"] as const;
const { values } = parseArgs({ options: { rounds: { type: "string" }, faults: { type: "string" } } });
const rounds = Number(values.rounds ?? 4);
const faults = (values.faults ?? FAULTS.join(",")).split(",");
if (!Number.isSafeInteger(rounds) || rounds < 1 || faults.some((f) => !(FAULTS as readonly string[]).includes(f))) {
  console.error(`usage: stream-divergence.ts [--rounds N] [--faults ${FAULTS.join(",")}]`);
  process.exit(2);
}
const STREAM = "DIVERGENCE";
const SUBJECTS = 40;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const say = (m: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${m}`);

const dir = mkdtempSync(path.join(os.tmpdir(), "stream-divergence-"));
say(`nats-server ${natsServerVersion().text}: ${rounds} rounds of ${faults.join(", ")}`);
const nats = await startJetStreamCluster(dir);
let bad = false;
try {
  const admin = await connect({ servers: nats.map((n) => n.url), maxReconnectAttempts: -1 });
  const jsm = await jetstreamManager(admin);
  await jsm.streams.add({ name: STREAM, subjects: ["div.>"], storage: StorageType.File, num_replicas: 3 });
  /** Each acknowledged publish at the sequence its ack named (recordOf). */
  const acked = new Map<number, string>();
  const counts = { acked: 0, fenced: 0, failed: 0 };
  let running = true;
  const publishers = nats.map(async (node, w) => {
    const nc = await connect({ servers: node.url, maxReconnectAttempts: -1 });
    const js = jetstream(nc, { timeout: 5000 });
    const last = new Map<string, number>();
    for (let i = 0; running; i++) {
      const subject = `div.s${(i * 7 + w) % SUBJECTS}`;
      const data = `w${w}-${i}`;
      try {
        const ack = await js.publish(subject, data, { expect: { lastSubjectSequence: last.get(subject) ?? 0 } });
        last.set(subject, ack.seq);
        acked.set(ack.seq, recordOf(subject, data));
        counts.acked++;
      } catch (err) {
        if (!/wrong last sequence/.test(String((err as Error).message))) {
          counts.failed++;
          await sleep(50);
          continue;
        }
        counts.fenced++;
        last.set(subject, (await jsm.streams.getMessage(STREAM, { last_by_subj: subject }).catch(() => undefined))?.seq ?? 0);
      }
    }
    await nc.close();
  });
  for (let r = 0; r < rounds; r++) {
    await sleep(2000);
    const kind = faults[r % faults.length];
    const leader = await streamLeaderOf(nats, STREAM);
    const target = kind === "freeze-other" ? (nats.find((n) => n !== leader) ?? leader) : leader;
    say(`round ${r + 1}: ${kind} n${nats.indexOf(target) + 1} (so far ${JSON.stringify(counts)})`);
    if (kind === "kill-leader") {
      await target.kill();
      await sleep(8000);
      await target.restart();
    } else {
      process.kill(target.pid as number, "SIGSTOP");
      await sleep(11_000);
      process.kill(target.pid as number, "SIGCONT");
    }
    await streamHealedOf(nats, STREAM, 60_000);
  }
  running = false;
  await Promise.all(publishers);
  await streamHealedOf(nats, STREAM, 60_000);
  say(`publishing done: ${JSON.stringify(counts)}; reading each node's copy`);
  const copies = (await streamCopiesOf(nats, STREAM)).map((copy, i) => ({ name: `n${i + 1}`, copy }));
  for (const d of copiesDisagree(copies)) say(`DIFFERS: ${d}`);
  bad = copiesDisagree(copies).length > 0;
  for (const { name, copy } of copies) {
    if (!copy) continue;
    const missing = [...acked].filter(([seq, v]) => copy.get(seq) !== v);
    say(`${name}: ${copy.size} records; acknowledged publishes not at their acknowledged sequence: ${missing.length} of ${acked.size}`);
    bad ||= missing.length > 0;
  }
  say(bad ? "the replicas diverged" : "the replicas hold one log");
  await admin.close();
} finally {
  await Promise.all(nats.map((n) => n.stop()));
  rmSync(dir, { recursive: true, force: true });
}
process.exit(bad ? 1 : 0);
