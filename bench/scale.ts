/**
 * The scale scenario of `npm run bench`: the same calls with 100 and then BENCH_SCALE (100,000)
 * volumes already in the journal — create+delete (c=16), ControllerGetVolume of an existing
 * volume, the first and a deep ListVolumes page (100 entries) — and what one volume costs in Redis
 * memory and JetStream bytes. The volumes are seeded as the journal's own events appended straight
 * to its stream (the journal, started after, brings its projection up to the log).
 */
import { randomUUID } from "node:crypto";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { composeVolumeId, type EventBody, JournalEvent, subjects } from "@csi/contracts";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import { volumeReservedBody } from "@csi/journal/test-support";
import { type CsiClient, connectNats, csiClient, redisConnectOptions } from "@csi/runtime";
import { startServer } from "@csi/testkit";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { cpuMeter, type Processes } from "./lib/cpu.js";
import { check, csiCap, type Figures, measure } from "./lib/measure.js";
import { startServices } from "./lib/services.js";

const SCALE = Number(process.env.BENCH_SCALE ?? 100_000);
const SMALL = 100;
const CLUSTER = "bench";
const MiB = 1024 * 1024;
const PAGE = 100;
const hex = (n: number, width: number) => n.toString(16).padStart(width, "0");
const uuidOf = (i: number) => `${hex(i, 8)}-0000-4000-8000-${hex(i, 12)}`;

/** Volumes [from, to) as the journal records a create: NameReserved, VolumeReserved, VolumeCreated. */
async function seed(nc: NatsConnection, from: number, to: number): Promise<void> {
  await new EventLog(nc, { cluster: CLUSTER }).ensureStream();
  const js = jetstream(nc);
  const meta = { v: 1 as const, time: new Date().toISOString(), requestId: "bench-seed", actor: { service: "bench", replica: "1" } };
  let pending: Promise<unknown>[] = [];
  const put = async (subject: string, body: EventBody) => {
    pending.push(js.publish(subject, JSON.stringify(JournalEvent.parse({ ...body, ...meta }))));
    if (pending.length >= 2000) {
      await Promise.all(pending);
      pending = [];
    }
  };
  for (let i = from; i < to; i++) {
    const uuid = uuidOf(i);
    const name = `seed-${i}`;
    await put(subjects.nameEvents(CLUSTER, "vol", "default", name), { type: "NameReserved", kind: "volume", name, uuid });
    await put(subjects.volumeEvents(CLUSTER, uuid), volumeReservedBody(uuid, name, { digest: "0123456789abcdef0123456789abcdef", parameters: {} }));
    await put(subjects.volumeEvents(CLUSTER, uuid), { type: "VolumeCreated", uuid, imageId: hex(i, 6), sizeBytes: MiB });
  }
  await Promise.all(pending);
}

type Report = (label: string, f: Figures, cpu: Record<string, number>) => void;
type Controller = CsiClient<"Controller">;

/** Warm-up, not measured (as in the ops step): the services' code compiled before the first figure. */
async function warmUp(ctrl: Controller, tag: string): Promise<void> {
  const warm: string[] = [];
  const warmed = [
    await measure(300, 16, async (i) => {
      const v = await ctrl.CreateVolume({ name: `w-${tag}-${i}`, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(MiB) } });
      warm[i] = v.volume?.volume_id ?? "";
    }),
    await measure(300, 16, (i) => ctrl.DeleteVolume({ volume_id: warm[i] as string })),
    await measure(100, 16, () => ctrl.ListVolumes({ max_entries: PAGE })),
  ];
  check(
    warmed.every((f) => f.errors === 0),
    `warm-up: ${warmed.flatMap((f) => f.firstErrors).join("; ")}`,
  );
}

/** The measured calls with `size` volumes in the journal: create, delete, get, the first and a deep list page. */
async function measureAt(ctrl: Controller, size: number, n: number, procs: Processes, report: Report): Promise<void> {
  const tag = randomUUID().slice(0, 8);
  await warmUp(ctrl, tag);
  const ids: string[] = [];
  /** One figure: `run` measured with the processes' CPU per operation. */
  const figure = async (label: string, run: (i: number) => Promise<unknown>) => {
    const cpu = cpuMeter(procs);
    report(label, await measure(n, 16, run), cpu.perOp(n));
  };
  await figure("create  c=16", async (i) => {
    const v = (await ctrl.CreateVolume({ name: `s-${tag}-${i}`, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(MiB) } })).volume;
    check(!!v?.volume_id, "CreateVolume answered no volume");
    ids[i] = v?.volume_id ?? "";
  });
  await figure("delete  c=16", (i) => ctrl.DeleteVolume({ volume_id: ids[i] as string }));
  await figure("ControllerGetVolume c=16", async (i) => {
    const k = (i * 7919) % size;
    const id = composeVolumeId({ clusterID: CLUSTER, poolID: 1, uuid: uuidOf(k) });
    const v = await ctrl.ControllerGetVolume({ volume_id: id });
    check(v.volume?.volume_id === id, `GetVolume ${id}`);
  });
  await figure(`ListVolumes first page (${PAGE}) c=16`, async () => {
    const r = await ctrl.ListVolumes({ max_entries: PAGE });
    check(r.entries.length === PAGE, "ListVolumes first page");
  });
  // A deep page: the token after walking half-way through (at most 50 pages).
  let token = "";
  for (let p = 0; p < Math.min(50, size / PAGE / 2); p++) token = (await ctrl.ListVolumes({ max_entries: PAGE, starting_token: token })).next_token;
  await figure(`ListVolumes deep page c=16`, async () => {
    const r = await ctrl.ListVolumes({ max_entries: PAGE, starting_token: token });
    check(r.entries.length === PAGE, "ListVolumes deep page");
  });
}

export async function scaleScenario(dir: string, report: Report): Promise<void> {
  const nats = await startServer("nats", path.join(dir, "scale-nats"));
  const redisServer = await startServer("redis", path.join(dir, "scale-redis"));
  const nc = await connectNats({ servers: nats.url, noAsyncTraces: true }); // as the controller connects
  const redis = new Redis(redisServer.url, redisConnectOptions({ redisUrl: redisServer.url }));
  const n = Math.min(1000, Number(process.env.BENCH_N ?? 2000));
  try {
    let seeded = 0;
    for (const size of [SMALL, SCALE]) {
      const t = performance.now();
      await seed(nc, seeded, size);
      seeded = size;
      const svcDir = path.join(dir, `scale-${size}`);
      await mkdir(svcDir, { recursive: true });
      const svc = await startServices(svcDir, nats, redisServer);
      const ctrl = csiClient(svc.sock, "Controller");
      const procs = { bench: process.pid, ctl: svc.controller.child.pid, jrn: svc.journals[0]?.child.pid, nats: nats.pid, redis: redisServer.pid };
      try {
        console.log(`\nscale: ${size} volumes in the journal (seeded and projected in ${((performance.now() - t) / 1000).toFixed(1)} s)`);
        await measureAt(ctrl, size, n, procs, report);
      } finally {
        ctrl.close();
        await svc.stop();
      }
    }
    const mem = Number(/used_memory:(\d+)/.exec(await redis.info("memory"))?.[1]);
    const jsm = await jetstreamManager(nc);
    let bytes = 0;
    for await (const s of jsm.streams.list()) bytes += s.state.bytes;
    console.log(`per volume at ${SCALE}: Redis ${(mem / SCALE).toFixed(0)} bytes (used_memory), JetStream ${(bytes / SCALE).toFixed(0)} bytes (3 events)`);
  } finally {
    await nc.close();
    redis.disconnect();
    await Promise.all([nats.stop(), redisServer.stop()]);
  }
}
