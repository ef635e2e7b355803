/**
 * The CSI stack on three hosts made of network namespaces (`npm run chaos -- --ha --hosts`,
 * docs/chaos.md "Hosts, not processes"): the replicated servers placed as servers.ts says, and
 *
 *   host a   journal-a   controller   node-agent <nodeId>-a
 *   host b   journal-b                node-agent <nodeId>   (the node the chaos workload drives)
 *   host c   journal-c                node-agent <nodeId>-c
 *
 * Every service talks to its own host's NATS node only (NATS_URL: one URL; a client of a node
 * across a cut link would sit on a dead connection until its pings time out) and asks its own
 * host's sentinel first. Its ops listener is on its host's address (the chaos driver scrapes it
 * from the root namespace). The CSI endpoints are unix sockets under runDir, which the CO client
 * reaches whatever the packet filters say; the node-agents share the machine's mounts and loop
 * devices, each with its own node id and state directory.
 *
 * Returned as a Stack (stack.ts), so the chaos run drives it as it drives `startStack`'s.
 */
import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { resolveClusters } from "@csi/contracts";
import { loadJournalFunctionsAt, type ServiceName, type ServiceProcess, spawnService } from "@csi/testkit";
import { type Stack, type StackService, settleAll, stackService } from "../stack.js";
import { type Host, type HostNet, makeHosts } from "./netns.js";
import { type HostServers, startHostServers } from "./servers.js";

export interface HostStackOptions {
  dataDir: string;
  runDir: string;
  /** The node id of host b's node-agent; a's and c's are `<nodeId>-a`, `<nodeId>-c`. */
  nodeId: string;
  clustersFile: string;
  env?: Record<string, string>;
  readyTimeoutMs?: number;
  onLine?: ((line: string) => void) | undefined;
  signal?: AbortSignal;
}

export interface HostStack extends Stack {
  net: HostNet;
  servers: Stack["servers"] & { ha: HostServers };
}

export async function startHostStack(opts: HostStackOptions): Promise<HostStack> {
  mkdirSync(opts.runDir, { recursive: true });
  const net = makeHosts();
  const managed: StackService[] = [];
  let servers: HostServers | undefined;
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await Promise.all(managed.map((s) => s.stop()));
      await servers?.stop();
      net.remove();
    })();
    return stopped;
  };
  try {
    servers = await abortable(startHostServers(net.hosts, path.join(opts.dataDir, "hosts")), opts.signal);
    const ha = servers;
    const primary = ha.redis[0];
    if (!primary) throw new Error("no Redis primary");
    await loadJournalFunctionsAt(primary.url);
    const resolved = resolveClusters(JSON.parse(readFileSync(opts.clustersFile, "utf8")), opts.dataDir);
    let exitedBySelf: (code: number | null) => void = () => {};
    const exited = new Promise<number | null>((resolve) => {
      exitedBySelf = resolve;
    });
    const { journals, controller, nodeAgent, others, controllerEndpoint, nodeEndpoint } = hostServices(opts, ha, resolved.defaultCluster, (name, launch) => {
      const s = stackService(name, launch, (code) => exitedBySelf(code));
      managed.push(s);
      return s;
    });
    await settleAll(journals.map((j) => j.start()));
    opts.signal?.throwIfAborted();
    await settleAll([controller.start(), nodeAgent.start(), ...others.map((s) => s.start())]);
    opts.signal?.throwIfAborted();
    return {
      controllerEndpoint,
      nodeEndpoint,
      nodeId: opts.nodeId,
      natsUrl: ha.natsUrl,
      redisUrl: primary.url,
      redisSentinels: ha.sentinelAddrs,
      redisMasterName: ha.masterName,
      redisAccess: { redisUrl: primary.url, redisSentinels: ha.sentinelAddrs, redisMasterName: ha.masterName },
      clustersFile: opts.clustersFile,
      clusters: [resolved.defaultCluster],
      get services() {
        return managed.flatMap((s) => (s.process && s.running ? [s.process] : []));
      },
      journals,
      controller,
      nodeAgent,
      metricsUrls: () => Object.fromEntries(managed.flatMap((s) => (s.running && s.metricsUrl ? [[s.name, s.metricsUrl]] : []))),
      servers: { ha },
      net,
      exited,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The services on the hosts (not started): a journal on each, the controller on a, a node-agent on each (the workload's on b). */
function hostServices(
  opts: HostStackOptions,
  ha: HostServers,
  cluster: string,
  service: (name: string, launch: () => Promise<ServiceProcess>) => StackService,
) {
  const on = (host: Host, name: string, kind: ServiceName, env: Record<string, string>, args: string[]) =>
    service(name, () =>
      spawnService(
        kind,
        { ...hostEnv(opts, ha, host), READY_FILE: path.join(opts.runDir, `${name}.ready.json`), ...env },
        { args, wrap: host.wrap, onLine: opts.onLine, ...(opts.readyTimeoutMs === undefined ? {} : { readyTimeoutMs: opts.readyTimeoutMs }) },
      ),
    );
  const [a, b, c] = ha.hosts as [Host, Host, Host];
  const journals = ha.hosts.map((h) => on(h, `journal-${h.name}`, "journal", { REPLICA_ID: `journal-${h.name}`, CLUSTER_ID: cluster }, []));
  const controllerEndpoint = `unix://${path.join(opts.runDir, "csi-controller.sock")}`;
  const nodeEndpoint = `unix://${path.join(opts.runDir, "csi-node.sock")}`;
  const controller = on(a, "controller", "controller", {}, ["--endpoint", controllerEndpoint]);
  const agent = (h: Host, id: string, endpoint: string) =>
    on(h, id === opts.nodeId ? "node-agent" : `node-agent-${h.name}`, "node-agent", {}, ["--endpoint", endpoint, "--nodeid", id]);
  const nodeAgent = agent(b, opts.nodeId, nodeEndpoint);
  const others = [a, c].map((h) => agent(h, `${opts.nodeId}-${h.name}`, `unix://${path.join(opts.runDir, `csi-node-${h.name}.sock`)}`));
  return { journals, controller, nodeAgent, others, controllerEndpoint, nodeEndpoint };
}

/**
 * `p`, or a rejection as soon as `signal` aborts: the servers' waits take no signal, and stop() then
 * removes the namespaces, which SIGKILLs whatever was started in them.
 */
function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  p.catch(() => {});
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason ?? new Error("aborted"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** What every service on `host` gets: its own NATS node (and its monitor, for the fsync check), its sentinel first, its address for /metrics. */
function hostEnv(opts: HostStackOptions, ha: HostServers, host: Host): Record<string, string> {
  const node = ha.nats[ha.hosts.indexOf(host)];
  if (!node?.monitorUrl) throw new Error(`no NATS node on host ${host.name}`);
  return {
    ...ha.env,
    NATS_URL: node.url,
    NATS_MONITOR_URL: node.monitorUrl,
    REDIS_URL: ha.redis[0]?.url ?? "",
    REDIS_SENTINELS: ha.sentinelsFrom(host),
    ...(process.env.CSI_UNSAFE_NO_FSYNC === "1" ? { LOG_FSYNC: "off" } : {}),
    DATA_DIR: opts.dataDir,
    LOG_LEVEL: process.env.LOG_LEVEL ?? "info",
    CLUSTERS_FILE: opts.clustersFile,
    METRICS_ADDR: `${host.addr}:0`,
    ...opts.env,
  };
}
