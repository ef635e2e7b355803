/**
 * A node stack for tests that drive the node-agent end to end: real nats-server and
 * redis-server, one journal (cluster "c1", pool "default"), the controller, and a node-agent
 * process, each on its own socket under one temporary directory. `stop()` stops them and then
 * unmounts and detaches everything under that directory before removing it — also after a
 * failed test.
 */
import { realpath } from "node:fs/promises";
import path from "node:path";
import { type AccessMode, DeviceStateReported, decomposeVolumeId } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { cleanupUnder, hasXfs } from "./machine.js";
import { type ServiceProcess, spawnService, writeClustersFile } from "./processes.js";
import { startTestServers, type TestServers } from "./servers.js";

export const MiB = 1024 * 1024;
export const CLUSTER = "c1";
/** xfs when the machine has it: it grows online without CAP_SYS_RESOURCE. */
export const FS_TYPE = hasXfs ? "xfs" : "ext4";
/** The smallest volume FS_TYPE accepts (xfs wants 300 MiB). */
export const FS_MIN_BYTES = hasXfs ? 320 * MiB : 32 * MiB;

export const mountCap = (mode: AccessMode = "SINGLE_NODE_WRITER", fs: string = FS_TYPE) => ({ access_mode: { mode }, mount: { fs_type: fs, mount_flags: [] } });
export const blockCap = (mode: AccessMode = "SINGLE_NODE_WRITER") => ({ access_mode: { mode }, block: {} });
/** The gRPC status code of a call (0 when it succeeds). */
export const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );

export interface PublishedVolume {
  id: string;
  uuid: string;
  /** The publish context ControllerPublishVolume returned (imageName, imagePath, ...). */
  ctx: Record<string, string>;
}

export interface NodeStack {
  env: TestServers;
  /** The temporary directory everything lives under (symlinks resolved). */
  root: string;
  nodeId: string;
  /** Environment of the service processes (NATS_URL, REDIS_URL, CLUSTERS_FILE, DATA_DIR). */
  base: Record<string, string>;
  clustersFile: string;
  nc: NatsConnection;
  journal: JournalClient;
  ctrl: CsiClient<"Controller">;
  node: CsiClient<"Node">;
  agent: ServiceProcess;
  /** A path under the stack's fake kubelet directory. */
  kubelet(...parts: string[]): string;
  /** CreateVolume + ControllerPublishVolume to this node. */
  createAndPublish(name: string, cap: object, sizeBytes: number): Promise<PublishedVolume>;
  /** The DeviceStateReported events of a volume, waiting (up to ~5 s) until `want` says they are all there. */
  deviceReports(uuid: string, want: (reports: DeviceReportEvent[]) => boolean): Promise<DeviceReportEvent[]>;
  stop(): Promise<void>;
}

export type DeviceReportEvent = ReturnType<typeof DeviceStateReported.parse>;

export async function startNodeStack(opts: { nodeId?: string } = {}): Promise<NodeStack> {
  const env = await startTestServers();
  const root = await realpath(env.dir);
  const procs: ServiceProcess[] = [];
  const nodeId = opts.nodeId ?? "node-a";
  let nc: NatsConnection | undefined;
  let ctrl: CsiClient<"Controller"> | undefined;
  let node: CsiClient<"Node"> | undefined;
  const stop = async () => {
    ctrl?.close();
    node?.close();
    await Promise.all(procs.map((p) => p.stop()));
    await nc?.close();
    await cleanupUnder(root); // unmount + detach before anything is removed
    await env.dispose();
  };
  try {
    const clustersFile = await writeClustersFile(root, [{ clusterID: CLUSTER, pools: ["default"] }]);
    const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: root };
    procs.push(await spawnService("journal", { ...base, CLUSTER_ID: CLUSTER }));
    const ctrlSock = `unix://${path.join(root, "controller.sock")}`;
    procs.push(await spawnService("controller", base, { args: ["--endpoint", ctrlSock] }));
    const nodeSock = `unix://${path.join(root, "node.sock")}`;
    const agent = await spawnService(
      "node-agent",
      { ...base, NODE_STATE_DIR: path.join(root, "node-state") },
      { args: ["--endpoint", nodeSock, "--nodeid", nodeId] },
    );
    procs.push(agent);
    ctrl = csiClient(ctrlSock, "Controller");
    node = csiClient(nodeSock, "Node");
    nc = await connect({ servers: env.nats.url });
    const journal = new JournalClient(nc, 10_000);
    const c = ctrl;
    return {
      env,
      root,
      nodeId,
      base,
      clustersFile,
      nc,
      journal,
      ctrl,
      node,
      agent,
      kubelet: (...parts) => path.join(root, "kubelet", ...parts),
      createAndPublish: async (name, cap, sizeBytes) => {
        const v = (await c.CreateVolume({ name, volume_capabilities: [cap], capacity_range: { required_bytes: String(sizeBytes) } })).volume!;
        const pub = await c.ControllerPublishVolume({ volume_id: v.volume_id, node_id: nodeId, volume_capability: cap, readonly: false });
        return { id: v.volume_id, uuid: decomposeVolumeId(v.volume_id).uuid, ctx: pub.publish_context as Record<string, string> };
      },
      deviceReports: async (uuid, want) => {
        for (let i = 0; ; i++) {
          const h = await journal.call(CLUSTER, "volume.history", { uuid });
          const reports = h.events.flatMap((e) => (e.event.type === "DeviceStateReported" ? [DeviceStateReported.parse(e.event)] : []));
          if (want(reports) || i >= 50) return reports;
          await new Promise((r) => setTimeout(r, 100));
        }
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
