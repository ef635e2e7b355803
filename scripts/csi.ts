/**
 * A small CSI client for people: call any CSI RPC on a socket with a JSON request.
 *
 *   npm run csi -- controller CreateVolume '{"name":"pvc-1","volume_capabilities":[{"access_mode":{"mode":"SINGLE_NODE_WRITER"},"mount":{}}]}'
 *   npm run csi -- group CreateVolumeGroupSnapshot '{"name":"grp-1","source_volume_ids":["<volume_id>","<volume_id>"]}'
 *   npm run csi -- node NodeGetInfo
 *   npm run csi -- identity Probe --endpoint unix:///path/to.sock
 *
 * Defaults: controller/group → unix://$PWD/run/csi-controller.sock, node/identity → the node socket
 * (identity can be asked of either with --endpoint).
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { type CsiService, csiClient, methodsOf } from "@csi/runtime";

const { positionals, values } = parseArgs({ allowPositionals: true, options: { endpoint: { type: "string" } } });
const [which, method, body] = positionals;
const services: Record<string, CsiService> = { controller: "Controller", group: "GroupController", node: "Node", identity: "Identity" };
const service = services[which ?? ""];
if (!service || !method || !(methodsOf(service) as string[]).includes(method)) {
  console.error("usage: npm run csi -- controller|group|node|identity <Method> ['<json request>'] [--endpoint unix:///…]");
  if (service) console.error(`${service} methods: ${methodsOf(service).join(", ")}`);
  process.exit(2);
}
const runDir = process.env.RUN_DIR ?? path.resolve("run");
const endpoint =
  values.endpoint ?? `unix://${path.join(runDir, service === "Controller" || service === "GroupController" ? "csi-controller.sock" : "csi-node.sock")}`;
const client = csiClient(endpoint, service) as unknown as Record<string, (req: unknown) => Promise<unknown>> & { close(): void };
try {
  const res = await client[method]?.(body ? JSON.parse(body) : {});
  console.log(JSON.stringify(res, null, 2));
} catch (err) {
  const e = err as { code?: number; details?: string };
  console.error(`error ${e.code}: ${e.details ?? String(err)}`);
  process.exitCode = 1;
} finally {
  client.close();
}
