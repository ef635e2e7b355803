/**
 * The runner's image steps (commands/runner.ts): an act's effects at once (the first failure is
 * the act's), each image made or removed learned as an Acted (commands/run-state.ts), and what a
 * failed step is told to the decider as (Failure).
 */
import { liveRecord } from "../fold/evolve.js";
import { imageOwner } from "../fold/kinds.js";
import { isFenced, isUncertain } from "../log/port.js";
import type { ImageOwner, PoolBackend } from "../pools/port.js";
import type { Effect, Failure } from "./decider.js";
import { poolOf } from "./deciders/volumes.js";
import type { RunIO, RunnerDeps } from "./run-deps.js";
import type { Acted } from "./run-state.js";

/** An effect's failure (told to the decider as an effect step's). */
export class EffectFailed extends Error {
  readonly step = "effect";
  constructor(
    override readonly cause: Error,
    readonly effect: Effect,
  ) {
    super(cause?.message ?? String(cause));
  }
}

/** The failure a step's error is told to the decider as. */
export function failureOf(err: unknown): Failure {
  const error = err instanceof Error ? err : new Error(String(err));
  const step = (err as { step?: Failure["step"] }).step ?? "append";
  const effect = error instanceof EffectFailed ? { effect: error.effect } : {};
  return { step, ...effect, error: error instanceof EffectFailed ? error.cause : error, fenced: isFenced(err), uncertain: isUncertain(err) };
}

export const poolIn = (d: RunnerDeps, name: string): PoolBackend => poolOf(d.pools, d.cluster.clusterID, name);

/**
 * Run the effects at once: what they did (also those done when another failed), and the first
 * failure (an EffectFailed), for the caller to learn and throw.
 */
export async function runEffects(io: RunIO, effects: Effect[] = []): Promise<{ acted: Acted; failed?: EffectFailed }> {
  const acted: Acted & Required<Pick<Acted, "images" | "made">> = { type: "Acted", images: [], made: [] };
  const done = await Promise.allSettled(effects.map((e) => effect(io, e, acted)));
  const i = done.findIndex((x) => x.status === "rejected");
  const failed = done[i];
  return failed?.status === "rejected" ? { acted, failed: new EffectFailed(failed.reason, effects[i] as Effect) } : { acted };
}

async function effect(io: RunIO, e: Effect, acted: Required<Pick<Acted, "images" | "made">>): Promise<void> {
  const { d } = io;
  const ref = { pool: e.pool, imageName: e.imageName };
  if (e.op === "delete") {
    const pools = e.pool === "*" ? [...d.pools.values()] : [poolIn(d, e.pool)];
    for (const p of pools)
      await p.deleteImage(e.imageName, { ...(e.copied === undefined ? {} : { copied: e.copied }), ...(e.quarantine ? { quarantine: true } : {}) });
    acted.images.push([ref, null]);
    await d.afterEffect?.(e);
    return;
  }
  const pool = poolIn(d, e.pool);
  const owner = e.op === "resize" ? undefined : ownerOf(io, e.imageName, e.name);
  // A copy is the one long step of a command (seconds to minutes): said when it starts.
  if (e.op === "clone" || e.op === "snapshot")
    d.logger.info({ requestId: io.requestId, op: e.op, pool: e.pool, from: e.from, imageName: e.imageName, name: e.name }, "copying an image");
  const made =
    e.op === "create"
      ? await pool.createImage(e.imageName, e.sizeBytes, owner)
      : e.op === "clone"
        ? await pool.cloneImage(e.from, e.imageName, e.sizeBytes, owner)
        : e.op === "snapshot"
          ? await pool.snapshotImage(e.from, e.imageName, owner)
          : await pool.resizeImage(e.imageName, e.sizeBytes);
  acted.images.push([ref, made]);
  if (e.op !== "resize") acted.made.push(ref);
  await d.afterEffect?.(e);
}

/** Whose image this is (the aggregate its name says, with its request name): written on the image where the pool can. */
function ownerOf(io: RunIO, imageName: string, requestName?: string): ImageOwner | undefined {
  const a = imageOwner(imageName);
  if (!a) return undefined;
  const name = requestName ?? liveRecord(io.state.fold.state(a), a.kind)?.name;
  return { ...a, clusterID: io.d.cluster.clusterID, ...(name ? { name } : {}) };
}
