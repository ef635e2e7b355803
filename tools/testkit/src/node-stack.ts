/**
 * A node stack for tests that drive the node-agent end to end: real nats-server and
 * redis-server, one journal (cluster "c1", pool "default"), the controller, and a node-agent
 * process, each on its own socket under one temporary directory. `stop()` stops them and then
 * unmounts and detaches everything under that directory before removing it — also after a
 * failed test.
 */
import { mkdirSync } from "node:fs";
import { realpath } from "node:fs/promises";
import path from "node:path";
import { type AccessMode, DeviceStateReported, decomposeVolumeId, type NodeWork, nodeWorkStream, nodeWorkSubjects } from "@csi/contracts";
import { type CsiClient, csiClient, JournalClient } from "@csi/runtime";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { cleanupUnder, hasXfs } from "./machine.js";
import { type ServiceProcess, spawnService, type TestPool, writeClustersFile } from "./processes.js";
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

export type DeviceReportEvent = ReturnType<typeof DeviceStateReported.parse>;

export class NodeStack {
  readonly journal: JournalClient;
  node: CsiClient<"Node">;
  /** Environment of the service processes (NATS_URL, REDIS_URL, CLUSTERS_FILE, DATA_DIR). */
  readonly base: Record<string, string>;

  private constructor(
    readonly env: TestServers,
    /** The temporary directory everything lives under (symlinks resolved). */
    readonly root: string,
    readonly nodeId: string,
    readonly clustersFile: string,
    readonly nc: NatsConnection,
    readonly ctrl: CsiClient<"Controller">,
    /** The journal and the controller (the agent is `agent`). */
    private readonly procs: ServiceProcess[],
    public agent: ServiceProcess,
  ) {
    this.base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: root };
    this.journal = new JournalClient(nc, 10_000);
    this.node = csiClient(NodeStack.nodeSocket(root), "Node");
  }

  private static nodeSocket = (root: string) => `unix://${path.join(root, "node.sock")}`;

  private static spawnAgent(
    base: Record<string, string>,
    root: string,
    nodeId: string,
    extra: Record<string, string> = {},
    waitReady = true,
  ): Promise<ServiceProcess> {
    const env = { ...base, NODE_STATE_DIR: path.join(root, "node-state"), HEARTBEAT_MS: "1000", ...extra };
    return spawnService("node-agent", env, { args: ["--endpoint", NodeStack.nodeSocket(root), "--nodeid", nodeId], waitReady });
  }

  /** The ops listeners (/metrics, /healthz, /readyz) of the journal, the controller and the agent running now. */
  metricsUrls(): { journal?: string; controller?: string; agent?: string } {
    return { journal: this.procs[0]?.metricsUrl, controller: this.procs[1]?.metricsUrl, agent: this.agent.metricsUrl };
  }

  /** `agentEnv`: more environment for the node-agent (e.g. LOG_LEVEL, NODE_OP_TIMEOUT_MS); `pools`: cluster c1's pools (default: one file pool, "default"; the first is the default pool). */
  static async start(opts: { nodeId?: string; agentEnv?: Record<string, string>; pools?: TestPool[] } = {}): Promise<NodeStack> {
    const env = await startTestServers();
    const root = await realpath(env.dir);
    const nodeId = opts.nodeId ?? "node-a";
    const procs: ServiceProcess[] = [];
    let nc: NatsConnection | undefined;
    try {
      const clustersFile = await writeClustersFile(root, [{ clusterID: CLUSTER, pools: opts.pools ?? ["default"] }]);
      const base = { NATS_URL: env.nats.url, REDIS_URL: env.redis.url, CLUSTERS_FILE: clustersFile, DATA_DIR: root };
      procs.push(await spawnService("journal", { ...base, CLUSTER_ID: CLUSTER }));
      const ctrlSock = `unix://${path.join(root, "controller.sock")}`;
      procs.push(await spawnService("controller", base, { args: ["--endpoint", ctrlSock] }));
      const agent = await NodeStack.spawnAgent(base, root, nodeId, opts.agentEnv);
      procs.push(agent);
      nc = await connect({ servers: env.nats.url });
      return new NodeStack(env, root, nodeId, clustersFile, nc, csiClient(ctrlSock, "Controller"), procs.slice(0, 2), agent);
    } catch (err) {
      await Promise.all(procs.map((p) => p.stop()));
      await nc?.close();
      await NodeStack.release(env, root);
      throw err;
    }
  }

  /**
   * A path under the stack's fake kubelet directory, whose parent directory exists: the CO
   * creates the parent of a staging or target path, the node-agent only the last component.
   */
  kubelet(...parts: string[]): string {
    const p = path.join(this.root, "kubelet", ...parts);
    mkdirSync(path.dirname(p), { recursive: true });
    return p;
  }

  /**
   * Stop the agent (SIGKILL with `kill`), run `meanwhile` (what happens behind its back), start it
   * again (with `env` added to its environment, for this run only), and wait until it is ready
   * (its READY_FILE) unless `waitReady` is false.
   */
  async restartAgent(opts: { kill?: boolean; meanwhile?: () => Promise<void>; env?: Record<string, string>; waitReady?: boolean } = {}): Promise<void> {
    if (opts.kill) await this.agent.kill();
    else await this.agent.stop();
    await opts.meanwhile?.();
    this.agent = await NodeStack.spawnAgent(this.base, this.root, this.nodeId, opts.env, opts.waitReady);
    this.node.close();
    this.node = csiClient(NodeStack.nodeSocket(this.root), "Node");
  }

  /** CreateVolume + ControllerPublishVolume to this node. */
  async createAndPublish(name: string, cap: object, sizeBytes: number): Promise<PublishedVolume> {
    const v = (await this.ctrl.CreateVolume({ name, volume_capabilities: [cap], capacity_range: { required_bytes: String(sizeBytes) } })).volume!;
    const pub = await this.ctrl.ControllerPublishVolume({ volume_id: v.volume_id, node_id: this.nodeId, volume_capability: cap, readonly: false });
    return { id: v.volume_id, uuid: decomposeVolumeId(v.volume_id).uuid, ctx: pub.publish_context as Record<string, string> };
  }

  /** The DeviceStateReported events of a volume's history, waiting (up to ~5 s) until `want` says they are all there. */
  async deviceReports(uuid: string, want: (reports: DeviceReportEvent[]) => boolean): Promise<DeviceReportEvent[]> {
    for (let i = 0; ; i++) {
      const h = await this.journal.call(CLUSTER, "volume.history", { uuid });
      const reports = h.events.flatMap((e) => (e.event.type === "DeviceStateReported" ? [DeviceStateReported.parse(e.event)] : []));
      if (want(reports) || i >= 50) return reports;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Send node work to this node over NATS (addressed to it, unless `w.nodeId` says otherwise) and wait (up to ~10 s) until the agent has acknowledged everything on its queue. */
  async work(w: Omit<NodeWork, "nodeId"> & { nodeId?: string }): Promise<void> {
    await jetstream(this.nc).publish(nodeWorkSubjects.forNode(this.nodeId), JSON.stringify({ nodeId: this.nodeId, ...w }), { msgID: w.id });
    const jsm = await jetstreamManager(this.nc);
    const stream = nodeWorkStream(this.nodeId);
    for (let i = 0; i < 100 && (await jsm.streams.info(stream)).state.messages > 0; i++) await new Promise((r) => setTimeout(r, 100));
  }

  /** Stop everything, then unmount and detach whatever is left under `root` before removing it. */
  async stop(): Promise<void> {
    this.ctrl.close();
    this.node.close();
    try {
      await Promise.all([...this.procs, this.agent].map((p) => p.stop()));
      await this.nc.close();
    } finally {
      await NodeStack.release(this.env, this.root);
    }
  }

  /**
   * The servers stopped, then everything under `root` released and removed. The servers keep their
   * data under `root` too: removing it while a nats-server still wrote there failed (ENOTEMPTY) and
   * left both servers running, which kept the test process alive for ever (seen in a busy full run).
   */
  private static async release(env: TestServers, root: string): Promise<void> {
    try {
      await env.stopServers();
    } finally {
      await cleanupUnder(root);
    }
  }
}
