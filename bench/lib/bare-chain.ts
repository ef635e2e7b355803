/**
 * The bare chain: a CreateVolume's path with every hop, round trip and file of ours but none of
 * our code (bench/lib/bare-process.ts) — load generator → gRPC over a unix socket → a front
 * process → NATS request → a back process → Redis (the journal's two Lua scripts), JetStream (three
 * fenced events, two of them together), one pool file → the replies back. What the CSI path costs
 * above it, in the same run, is what our code (controller and journal) costs.
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { unlink } from "node:fs/promises";
import path from "node:path";
import { type LocalServer, RUN_BUILT, SOURCE_NODE_ARGS } from "@csi/testkit";
import * as grpc from "@grpc/grpc-js";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

export const BARE_SUBJECT = "bare.create";
export const BARE_METHOD = "/bare.Bare/Create";
export const BARE_EVENTS = "bare.ev";
const SCRIPT = path.join(import.meta.dirname, "bare-process.ts");

function spawnBare(args: string[]) {
  const prof = process.env.BENCH_PROFILE ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE] : [];
  // As the services: built (plain node, type stripping, the packages' dist/) when they run built, else through tsx.
  const child = spawn(process.execPath, [...prof, ...(RUN_BUILT ? [] : SOURCE_NODE_ARGS), SCRIPT, ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, BARE_SUBJECT, BARE_METHOD, BARE_EVENTS },
  });
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (b: Buffer) => b.toString().includes("ready") && resolve());
    child.once("exit", (code) => reject(new Error(`bare ${args[0]} exited with ${code} before it was ready`)));
  });
  return { child, ready };
}

/** Start the front and back processes; the back creates its files in `poolDir` (named bare-<uuid>). */
export async function startBareChain(dir: string, nats: LocalServer, redis: LocalServer, poolDir: string) {
  const nc = await connect({ servers: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "BARE", subjects: [`${BARE_EVENTS}.>`] });
  await nc.close();
  mkdirSync(poolDir, { recursive: true });
  const socket = path.join(dir, "bare.sock");
  const back = spawnBare(["back", nats.url, redis.url, poolDir]);
  const front = spawnBare(["front", socket, nats.url]);
  const stop = () => {
    back.child.kill();
    front.child.kill();
  };
  try {
    await Promise.all([back.ready, front.ready]);
  } catch (err) {
    stop();
    throw err;
  }
  const client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  const raw = (b: Buffer) => b;
  return {
    pids: { front: front.child.pid, back: back.child.pid },
    /** One bare create; resolves with the volume uuid the back process answered. */
    create: (name: string) =>
      new Promise<string>((resolve, reject) =>
        client.makeUnaryRequest(BARE_METHOD, raw, raw, Buffer.from(JSON.stringify({ name })), (err, res) => {
          if (err || !res) return reject(err ?? new Error("no answer"));
          const text = res.toString();
          if (text.startsWith("error:")) return reject(new Error(text));
          resolve((JSON.parse(text) as { uuid: string }).uuid);
        }),
      ),
    /** Remove a bare create's file (the cleanup between levels; not a measured operation). */
    remove: (uuid: string) => unlink(path.join(poolDir, `bare-${uuid}`)),
    stop: () => {
      client.close();
      stop();
    },
  };
}
