/**
 * The power cut of the chaos run (`npm run chaos -- --power-cut`, docs/chaos.md): the stack's data
 * directory (NATS store, Redis, the pools, the node's state) lives on the power-cut harness
 * (testkit's powercut: a FUSE layer that keeps only what was fsynced). A cut, at once:
 *
 *   1. freezes what the disk would hold now (every write and name not made durable is gone);
 *   2. kills every process of the stack (servers and services: SIGKILL, as the power does);
 *   3. drops the node's kernel state, as a reboot does: every mount under the kubelet directory,
 *      every loop device attached to an image;
 *   4. puts the durable tree back at the same path (a new backing directory, the harness mounted on it);
 *   5. starts the servers (with `--ha` all three NATS nodes: they were cut together) and the
 *      services again over it; the node-agent's healer puts back what its state says.
 */
import { mkdir } from "node:fs/promises";
import { run } from "@csi/node-agent/testing";
import { type LocalServer, loopsUnder, mountPowercut, type PowercutLosses, type PowercutMount, type PowercutRule, releaseUnder } from "@csi/testkit";
import type { Stack } from "../stack.js";

/** A new NATS stream leader and every replica current after the servers restart. */
const HEAL_MS = 120_000;

export class PowerCuts {
  #mount: PowercutMount;
  #n = 0;

  private constructor(
    readonly root: string,
    readonly mountpoint: string,
    readonly rule: PowercutRule,
    mount: PowercutMount,
  ) {
    this.#mount = mount;
  }

  /** Mounts the harness at `mountpoint` over `<root>/disk-0`. */
  static async start(root: string, mountpoint: string, rule: PowercutRule = "ext4"): Promise<PowerCuts> {
    const backing = `${root}/disk-0`;
    await Promise.all([mkdir(backing, { recursive: true }), mkdir(mountpoint, { recursive: true })]);
    return new PowerCuts(root, mountpoint, rule, await mountPowercut({ backing, mountpoint, rule }));
  }

  /** How many cuts so far. */
  get cuts(): number {
    return this.#n;
  }

  /** Steps 1–4 (above); the caller starts the stack again. Resolves with what the cut dropped. */
  async cut(stack: Stack, kubeletDir: string): Promise<PowercutLosses> {
    // Frozen first: no process of the stack sees the disk fail (and answers for it) before it dies.
    const pids = pidsOf(stack);
    signalAll(pids, "SIGSTOP");
    let losses: PowercutLosses;
    try {
      losses = await this.#mount.cut();
    } finally {
      await killAll(stack); // SIGKILL ends a stopped process as it is
    }
    await releaseUnder(kubeletDir);
    await detachAllUnder(this.mountpoint);
    const next = `${this.root}/disk-${++this.#n}`;
    await mkdir(next);
    await this.#mount.reconstruct(next);
    await this.#mount.unmount();
    this.#mount = await mountPowercut({ backing: next, mountpoint: this.mountpoint, rule: this.rule });
    return losses;
  }

  /** Unmounts the harness (the stack stopped first), its loop devices detached before (after, the kernel no longer names their files by this path). */
  async end(kubeletDir: string): Promise<void> {
    await releaseUnder(kubeletDir).catch(() => {});
    await detachAllUnder(this.mountpoint).catch(() => {});
    await this.#mount.unmount();
  }
}

/** How many looks for loop devices left on the mount before a cut gives up on them. */
const DETACH_LOOKS = 50;

/**
 * Every loop device on a file under `dir` detached — looked at again until none is left (a device a
 * dying process still held is freed a moment later), else an error: once the mount is gone the kernel
 * names its files relative to it, and nothing could find the device to detach it.
 */
async function detachAllUnder(dir: string): Promise<void> {
  for (let look = 0; look < DETACH_LOOKS; look++) {
    const left = await loopsUnder(dir);
    if (left.length === 0) return;
    for (const d of left) await run("losetup", ["--detach", d.device]).catch(() => {});
    await new Promise((r) => setTimeout(r, 100));
  }
  const left = await loopsUnder(dir);
  if (left.length > 0) throw new Error(`loop devices still on the power-cut mount: ${left.map((d) => d.device).join(", ")}`);
}

function pidsOf(stack: Stack): number[] {
  const services = [...stack.journals, stack.controller, stack.nodeAgent].map((s) => s.process?.child.pid);
  return [...services, ...serversOf(stack).map((s) => s.pid)].filter((p): p is number => p !== undefined);
}

function signalAll(pids: readonly number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // gone already
    }
  }
}

/** Every server and service of the stack, SIGKILLed at once. */
async function killAll(stack: Stack): Promise<void> {
  const services = [...stack.journals, stack.controller, stack.nodeAgent];
  await Promise.all([...services.map((s) => s.kill()), ...serversOf(stack).map((s) => s.kill())]);
}

function serversOf(stack: Stack): LocalServer[] {
  const { nats, redis, ha } = stack.servers;
  return [nats, redis, ...(ha?.named().map((n) => n.server) ?? [])].filter((s): s is LocalServer => s !== undefined);
}

/** Step 5: the servers, then (with `--ha`, once every stream is whole again) the services. */
export async function powerOn(stack: Stack, startService: (s: Stack["controller"]) => Promise<unknown>): Promise<void> {
  const ha = stack.servers.ha;
  // NATS nodes together (a cluster needs its quorum to come up), then Redis, then the sentinels.
  const servers = serversOf(stack);
  await Promise.all(servers.filter((s) => s.kind === "nats").map((s) => s.restart()));
  for (const s of servers.filter((x) => x.kind !== "nats")) await s.restart();
  await ha?.streamsHealed(HEAL_MS);
  for (const s of [...stack.journals, stack.controller, stack.nodeAgent]) await startService(s);
}

/**
 * Holds new operations back while a cut is being checked, and tells when the operations in flight
 * at the cut have all ended (each retried, as a CO does, until the stack answered it again).
 */
export class OpGate {
  #closed: { promise: Promise<void>; open: () => void } | undefined;
  #inFlight = 0;
  #drained: (() => void)[] = [];

  /** Waits while the gate is closed, then counts the caller in. */
  async enter(): Promise<void> {
    while (this.#closed) await this.#closed.promise;
    this.#inFlight++;
  }

  leave(): void {
    this.#inFlight--;
    if (this.#inFlight === 0) for (const f of this.#drained.splice(0)) f();
  }

  close(): void {
    if (this.#closed) return;
    let open = () => {};
    const promise = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.#closed = { promise, open };
  }

  open(): void {
    const c = this.#closed;
    this.#closed = undefined;
    c?.open();
  }

  /** Resolves once no operation is in flight. */
  drained(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }
}

export interface PowerCutRound {
  power: PowerCuts;
  stack: Stack;
  kubeletDir: string;
  gate: OpGate;
  startService: (s: Stack["controller"]) => Promise<unknown>;
  /** Both CSI sockets ready. */
  ready: () => Promise<void>;
  /** What must hold now (after-cut.ts): its violations. */
  check: (label: string) => Promise<string[]>;
  /** Where each cut's violations go. */
  violations: string[];
}

/** One power cut of the chaos run, mid-load: cut, power on, the operations in flight answered, checked; the note of its record. */
export async function powerCutRound(r: PowerCutRound): Promise<string> {
  r.gate.close();
  try {
    const t0 = Date.now();
    const lost = await r.power.cut(r.stack, r.kubeletDir);
    await powerOn(r.stack, r.startService);
    await r.ready();
    const upMs = Date.now() - t0;
    await r.gate.drained();
    const label = `after power cut ${r.power.cuts}`;
    r.violations.push(...(await r.check(label)).map((v) => `${label}: ${v}`));
    return `dropped ${lost.droppedBytes} unsynced bytes in ${lost.droppedFiles} files and ${lost.droppedNames} names; serving again after ${(upMs / 1000).toFixed(1)} s`;
  } finally {
    r.gate.open();
  }
}
