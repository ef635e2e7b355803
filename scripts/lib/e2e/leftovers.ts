/**
 * What the end-to-end run must leave as it found: no container, volume, plugin or image of ours in
 * the engine (the cached base images aside), no loop device or mount that was not there before, and
 * the host's network state put back (engine.ts).
 */
import { readFile } from "node:fs/promises";
import type { Engine } from "./engine.js";
import { BASE_REPO } from "./images.js";
import { sh } from "./sh.js";

export interface MachineMarks {
  loops: string[];
  mounts: string[];
}

/**
 * The loop devices (device and backing file) whose file is under one of `roots`, and the mount
 * points under them, now: what the run may leave (the engine's roots, the cache, the kubelet
 * directory), not what other work on the machine does meanwhile.
 */
export async function machineMarks(roots: readonly string[]): Promise<MachineMarks> {
  const under = (p: string) => roots.some((r) => p === r || p.startsWith(`${r}/`));
  const loops = (await sh("losetup", ["--list", "--noheadings", "--output", "NAME,BACK-FILE"], { allowFail: true })).stdout
    .split("\n")
    .map((l) => l.trim().replace(/\s+/g, " "))
    .filter((l) => under(l.split(" ")[1] ?? ""));
  const mounts = (await readFile("/proc/self/mountinfo", "utf8"))
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((x): x is string => x !== undefined && under(x));
  return { loops: loops.sort(), mounts: mounts.sort() };
}

/** Loop devices and mounts in `after` that `before` did not have, one line each. */
export function newMarks(before: MachineMarks, after: MachineMarks): string[] {
  const added = (a: string[], b: string[]) => {
    const left = [...b];
    return a.filter((x) => {
      const i = left.indexOf(x);
      if (i < 0) return true;
      left.splice(i, 1);
      return false;
    });
  };
  return [...added(after.loops, before.loops).map((l) => `loop device left: ${l}`), ...added(after.mounts, before.mounts).map((m) => `mount left: ${m}`)];
}

/** Our objects still in the engine: containers, volumes, plugins, and images other than the cached base images (images.ts: csi-e2e/<name>:<key>). */
export async function engineLeftovers(engine: Engine): Promise<string[]> {
  const list = async (args: string[]) =>
    (await engine.docker(args)).stdout
      .split("\n")
      .map((l) => l.trim())
      .filter(Boolean);
  const images = (await list(["images", "--format", "{{.Repository}}:{{.Tag}}"])).filter((i) => !i.startsWith(`${BASE_REPO}/`));
  return [
    ...(await list(["ps", "-a", "--format", "{{.Names}}"])).map((c) => `container left: ${c}`),
    ...(await list(["volume", "ls", "--format", "{{.Name}}"])).map((v) => `volume left: ${v}`),
    ...(await list(["plugin", "ls", "--format", "{{.Name}}"])).map((p) => `plugin left: ${p}`),
    ...images.map((i) => `image left: ${i}`),
  ];
}
