/**
 * The facts the RBD mapping choice is made from (domain/rbd-mapping.ts), read once at start:
 * kernel modules (/sys; `modprobe` when a module is not loaded), binaries on the PATH, device nodes.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { MappingFacts } from "../domain/rbd-mapping.js";
import { run } from "./exec.js";

const onPath = (bin: string) =>
  [...(process.env.PATH ?? "").split(":"), "/usr/bin", "/usr/sbin", "/bin", "/sbin"].filter(Boolean).some((d) => existsSync(path.join(d, bin)));

/** Whether `marker` exists, or appears after `modprobe <module>` (which fails where the kernel has no such module). */
async function moduleThere(module: string, marker: string): Promise<boolean> {
  if (existsSync(marker)) return true;
  if (!onPath("modprobe")) return false;
  const ok = await run("modprobe", [module], { timeoutMs: 10_000 }).then(
    () => true,
    () => false,
  );
  return ok && existsSync(marker);
}

export async function readMappingFacts(): Promise<MappingFacts> {
  return {
    rbdModule: await moduleThere("rbd", "/sys/bus/rbd"),
    rbdBinary: onPath("rbd"),
    nbdModule: await moduleThere("nbd", "/sys/module/nbd"),
    rbdNbdBinary: onPath("rbd-nbd"),
    rbdFuseBinary: onPath("rbd-fuse"),
    fuseDevice: existsSync("/dev/fuse"),
    loopControl: existsSync("/dev/loop-control"),
  };
}
