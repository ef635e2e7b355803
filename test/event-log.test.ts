/**
 * The EventLog contract (test/contracts/event-log.contract.ts) held against both logs: the
 * JetStream log on a real nats-server (default configuration, as deployed: max_payload is
 * MAX_EVENT_BYTES), a fresh stream per test, raw records put there with a plain JetStream publish;
 * and the in-memory log.
 */
import { after } from "node:test";
import { JetStreamLog, MemoryLog } from "@csi/journal/log";
import { startTestServers, type TestServers } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { eventLogContract } from "./contracts/event-log.contract.js";

let env: TestServers | undefined;
let nc: NatsConnection | undefined;
after(async () => {
  await nc?.close();
  await env?.dispose();
});

/** The servers, started by the first test that needs them (none when only the MemoryLog's tests run). */
async function connection(): Promise<NatsConnection> {
  env ??= await startTestServers();
  nc ??= await connect({ servers: env.nats.url });
  return nc;
}

let streams = 0;
eventLogContract("JetStreamLog", async () => {
  const nc = await connection();
  const cluster = `el${++streams}`;
  const log = new JetStreamLog(nc, { cluster });
  await log.ensureStream();
  const js = jetstream(nc);
  return {
    log,
    cluster,
    putRaw: async (subject, data) => (await js.publish(subject, data)).seq,
    close: async () => void (await (await jetstreamManager(nc)).streams.delete(log.stream)),
  };
});

eventLogContract("MemoryLog", async () => {
  const cluster = "mem";
  const log = new MemoryLog({ cluster });
  return { log, cluster, putRaw: async (subject, data) => log.putRaw(subject, data), close: async () => {} };
});
