/**
 * The floors: what one bare call of each part costs on this machine, measured in the same run as
 * the scenarios — a grpc-js unary call over a unix socket (no protobuf, no middleware), a NATS
 * request/reply, a JetStream publish + ack (file storage), a Redis round trip (PING).
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { AckedPublisher, redisConnectOptions } from "@csi/runtime";
import type { LocalServer } from "@csi/testkit";
import * as grpc from "@grpc/grpc-js";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { cpuLine, cpuMeter } from "./cpu.js";
import { type Figures, measure, row } from "./measure.js";

export interface Floors {
  grpc: Figures;
  nats: Figures;
  jetstream: Figures;
  /** The same JetStream publish + ack through the runtime's AckedPublisher (what the journal uses). */
  ackedPublish: Figures;
  redis: Figures;
}

const raw = { serialize: (b: Buffer) => b, deserialize: (b: Buffer) => b };

async function bareGrpc(): Promise<{ call: () => Promise<unknown>; close: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "csi-floor-"));
  const address = `unix://${path.join(dir, "floor.sock")}`;
  const def = {
    Echo: {
      path: "/floor.Floor/Echo",
      requestStream: false,
      responseStream: false,
      requestSerialize: raw.serialize,
      requestDeserialize: raw.deserialize,
      responseSerialize: raw.serialize,
      responseDeserialize: raw.deserialize,
    },
  };
  const server = new grpc.Server();
  server.addService(def as unknown as grpc.ServiceDefinition, {
    Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
  });
  await new Promise<void>((resolve, reject) => server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const payload = Buffer.alloc(100);
  return {
    call: () =>
      new Promise((resolve, reject) =>
        client.makeUnaryRequest("/floor.Floor/Echo", raw.serialize, raw.deserialize, payload, (err, res) => (err ? reject(err) : resolve(res))),
      ),
    close: async () => {
      client.close();
      server.forceShutdown();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Each primitive at c=1 and c=16 (n calls each); prints a row with CPU ms per call. */
export async function measureFloors(nats: LocalServer, redis: LocalServer, n: number): Promise<Floors> {
  const procs = { bench: process.pid, nats: nats.pid, redis: redis.pid };
  const nc = await connect({ servers: nats.url, noAsyncTraces: true });
  const responder = await connect({ servers: nats.url, noAsyncTraces: true });
  responder.subscribe("floor.echo", {
    callback: (_err, m) => {
      m.respond(m.data);
    },
  });
  await responder.flush();
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "FLOOR", subjects: ["floor.js.>"] });
  const js = jetstream(nc);
  const acked = new AckedPublisher(nc);
  const r = new Redis(redis.url, redisConnectOptions({ redisUrl: redis.url }));
  const g = await bareGrpc();
  const payload = new Uint8Array(100);
  const ops: Record<keyof Floors, () => Promise<unknown>> = {
    grpc: g.call,
    nats: () => nc.request("floor.echo", payload),
    jetstream: () => js.publish("floor.js.x", payload),
    ackedPublish: () => acked.publish("floor.js.x", payload),
    redis: () => r.ping(),
  };
  console.log("\nfloors: one bare call of each part (no application code)");
  const out = {} as Floors;
  try {
    for (const [name, op] of Object.entries(ops) as [keyof Floors, () => Promise<unknown>][]) {
      for (const c of [1, 16]) {
        const cpu = cpuMeter(procs);
        const f = await measure(n, c, op);
        if (f.errors > 0) throw new Error(`floor ${name}: ${f.errors} calls failed`);
        console.log(row(`${name} c=${c}`, f), `  cpu ms/op: ${cpuLine(cpu.perOp(n))}`);
        if (c === 1) out[name] = f;
      }
    }
  } finally {
    await g.close();
    r.disconnect();
    await jsm.streams.delete("FLOOR").catch(() => {});
    await responder.close();
    await nc.close();
  }
  return out;
}
