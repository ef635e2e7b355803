/**
 * One process of the bare chain (bench/lib/bare-chain.ts): a CreateVolume's hops and round trips
 * with no application code. `front` stands where the controller does (a gRPC unary method over a
 * unix socket → one NATS request), `back` where the journal does (per request: the journal's own
 * lock-and-read function (the name's and a fresh uuid's locks), the pool's durable file create, three
 * events published together and acked by JetStream (the name and the reservation fenced, the
 * created event right behind the reservation), the journal's apply-and-unlock function, the reply; both functions of the journal's Redis function library, FCALL). Transport settings are the services' own (connectNats'
 * write coalescing, AckedPublisher, ioredis auto-pipelining). Prints "ready" when it serves.
 *
 * node [--conditions=source --import tsx] bench/lib/bare-process.ts front <socket path> <nats url>
 * node [--conditions=source --import tsx] bench/lib/bare-process.ts back <nats url> <redis url> <pool dir>
 * (with BARE_SUBJECT, BARE_METHOD and BARE_EVENTS in the environment; bench/lib/bare-chain.ts starts both)
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { createDurableFile } from "@csi/journal/pools";
import { CallKeys, ensureJournalFunctions, JOURNAL_FUNCTIONS } from "@csi/journal/redis";
import { AckedPublisher, connectNats, DirSync, redisConnectOptions } from "@csi/runtime";
import * as grpc from "@grpc/grpc-js";
import { createInbox, type Msg } from "@nats-io/nats-core";
import { Redis } from "ioredis";

// Its names come from bench/lib/bare-chain.ts in the environment: this file imports nothing local,
// so plain node (type stripping) runs it on the built packages, as the services run from dist/.
const BARE_SUBJECT = process.env.BARE_SUBJECT as string;
const BARE_METHOD = process.env.BARE_METHOD as string;
const BARE_EVENTS = process.env.BARE_EVENTS as string;

const raw = (b: Buffer) => b;

async function front(socket: string, natsUrl: string): Promise<void> {
  const nc = await connectNats({ servers: natsUrl, noAsyncTraces: true });
  // Requests on one wildcard reply subscription, without nats.js's request objects and timers
  // (the leanest request/reply there is).
  const prefix = createInbox();
  const waiting = new Map<number, (data: Uint8Array) => void>();
  let next = 0;
  nc.subscribe(`${prefix}.*`, {
    callback: (_err, m) => {
      const id = Number(m.subject.slice(prefix.length + 1));
      const answer = waiting.get(id);
      waiting.delete(id);
      answer?.(m.data);
    },
  });
  const server = new grpc.Server();
  const def = {
    Create: {
      path: BARE_METHOD,
      requestStream: false,
      responseStream: false,
      requestSerialize: raw,
      requestDeserialize: raw,
      responseSerialize: raw,
      responseDeserialize: raw,
    },
  };
  server.addService(def as unknown as grpc.ServiceDefinition, {
    Create: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const id = next++;
      waiting.set(id, (data) => cb(null, Buffer.from(data)));
      nc.publish(BARE_SUBJECT, call.request, { reply: `${prefix}.${id}` });
    },
  });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
}

/** An event of about the size the journal writes (300–500 bytes of JSON). */
function event(type: string, uuid: string, name: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    type,
    uuid,
    name,
    pool: "default",
    poolId: "0001",
    imageName: `csi-vol-${uuid}`,
    sizeBytes: 1048576,
    meta: { requestId: name, actor: { role: "journal", id: "bench" }, time: new Date().toISOString() },
    ...extra,
  });
}

async function back(natsUrl: string, redisUrl: string, poolDir: string): Promise<void> {
  const nc = await connectNats({ servers: natsUrl, noAsyncTraces: true });
  const pub = new AckedPublisher(nc);
  const r = new Redis(redisUrl, { ...redisConnectOptions({ redisUrl }), enableAutoPipelining: true });
  await ensureJournalFunctions(r);
  const p = "{bare}:projection";
  await r.hset(p, "complete", "1");
  const poolSync = new DirSync(poolDir);
  const handle = async (m: Msg) => {
    const { name } = JSON.parse(m.string()) as { name: string };
    const token = randomUUID();
    const uuid = randomUUID();
    const lock = `{bare}:lock.name.volume.${name}`;
    const uuidLock = `{bare}:lock.volume.${uuid}`;
    const [dir, dirSeq] = ["{bare}:dir.volume", "{bare}:dirseq.volume"];
    await r.fcall(JOURNAL_FUNCTIONS.lockAndRead, 5, p, lock, uuidLock, dir, dirSeq, token, 30_000, 2, 0, 2, 0, "{bare}:volume.", "", "", name, name);
    // As the file pool makes an image: the file and its directory entry fsynced before the events.
    await createDurableFile(path.join(poolDir, `bare-${uuid}`), 1048576, 0o644, poolSync);
    const [, , createdSeq] = await Promise.all([
      pub.publish(`${BARE_EVENTS}.name.${name}`, event("NameReserved", uuid, name), { expectedLastSubjectSequence: 0 }),
      pub.publish(`${BARE_EVENTS}.volume.${uuid}`, event("VolumeReserved", uuid, name, { digest: "x".repeat(64) }), { expectedLastSubjectSequence: 0 }),
      pub.publish(`${BARE_EVENTS}.volume.${uuid}`, event("VolumeCreated", uuid, name, { imageId: "1" })),
    ]);
    const rec = `{bare}:volume.${uuid}`;
    const k = new CallKeys(p, "{bare}:projection.keys");
    const muts = [
      { g: [k.at(dirSeq), name], s: createdSeq, o: [["HSET", k.at(dir), name, uuid]] },
      {
        g: [k.at(rec), "seq"],
        s: createdSeq,
        o: [["HSET", k.at(rec), "name", name, "pool", "default", "image", `csi-vol-${uuid}`, "size", "1048576", "state", "created"]],
      },
    ];
    const locks = [
      [k.at(lock), token],
      [k.at(uuidLock), token],
    ];
    await r.fcall(JOURNAL_FUNCTIONS.applyAndUnlock, k.keys.length, ...k.keys, JSON.stringify(muts), JSON.stringify(locks), "{}");
    m.respond(JSON.stringify({ uuid, name, sizeBytes: 1048576, pool: "default", imageName: `csi-vol-${uuid}` }));
  };
  nc.subscribe(BARE_SUBJECT, { queue: "bare", callback: (_err, m) => void handle(m).catch((err: Error) => m.respond(`error: ${err.message}`)) });
  await nc.flush();
}

const [role, ...args] = process.argv.slice(2);
if (role === "front") await front(args[0] as string, args[1] as string);
else if (role === "back") await back(args[0] as string, args[1] as string, args[2] as string);
else throw new Error(`unknown role ${role}`);
// SIGTERM ends it through exit, so a --cpu-prof profile is written.
process.once("SIGTERM", () => process.exit(0));
console.log("ready");
