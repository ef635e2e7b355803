/**
 * `node --conditions=source --import tsx bench/trace.ts`: where one CreateVolume's time goes at c=1 — the client's
 * latency against the controller's and the journal's own handling time (their debug log lines),
 * so the rest is transport and scheduling between the processes.
 */
import { mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { csiClient } from "@csi/runtime";
import { startServer } from "@csi/testkit";
import { prepareDataDir } from "../scripts/lib/data-dir.js";
import { csiCap } from "./lib/measure.js";
import { startServices } from "./lib/services.js";

const N = Number(process.env.BENCH_N ?? 500);
const root = path.resolve(import.meta.dirname, "..", ".data");
prepareDataDir(root);
const dir = await mkdtemp(path.join(root, "trace-"));
const nats = await startServer("nats", path.join(dir, "nats"));
const redis = await startServer("redis", path.join(dir, "redis"));
const svc = await startServices(dir, nats, redis, 1, { LOG_LEVEL: "debug" });
const ctrl = csiClient(svc.sock, "Controller");
const client: number[] = [];
try {
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    await ctrl.CreateVolume({ name: `t-${i}`, volume_capabilities: [csiCap], capacity_range: { required_bytes: String(1 << 20) } });
    client.push(performance.now() - t);
  }
} finally {
  ctrl.close();
  await svc.stop();
  await Promise.all([nats.stop(), redis.stop()]);
  await rm(dir, { recursive: true, force: true });
}
const msOf = (lines: string[], msg: string) =>
  lines.flatMap((l) => {
    try {
      const j = JSON.parse(l);
      return j.msg === msg && typeof j.ms === "number" ? [j.ms as number] : [];
    } catch {
      return [];
    }
  });
const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const ctl = msOf(svc.controller.logs, "response");
const jrn = msOf(svc.journals[0]?.logs ?? [], "ok");
console.log(
  `c=1 CreateVolume p50: client ${p50(client).toFixed(2)} ms, controller handler ${p50(ctl).toFixed(2)} ms (${ctl.length}), journal command ${p50(jrn).toFixed(2)} ms (${jrn.length})`,
);
