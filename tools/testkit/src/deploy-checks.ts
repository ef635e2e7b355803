/**
 * Checks that the deployment files (deploy/kubernetes, deploy/nomad, docker-compose.yml) agree
 * with the code: every service's env names and flags come from its settings table and its real
 * config loader accepts them; the CSI socket is the same file for the driver and each sidecar;
 * probes, ports, images, driver name, class parameters and the shared pool directory line up;
 * whatever runs our image runs plain node on a file `npm run build` makes (no tsx).
 * Pure: documents in, one line per problem out (empty = all agree). test/deploy.test.ts runs them
 * on the real files and on broken copies of them.
 */
import path from "node:path";
import { type Clusters, PLUGIN_NAME, parseMutableParameters, resolveClusters } from "@csi/contracts";
import { controllerConfig } from "@csi/controller";
import { CONTROLLER_SETTINGS, createLimits, splitParameters } from "@csi/controller/testing";
import { JOURNAL_SETTINGS, journalConfig } from "@csi/journal";
import { nodeAgentConfig } from "@csi/node-agent";
import { NODE_AGENT_SETTINGS } from "@csi/node-agent/testing";
import { ConfigError, envNames, flagNames, parseListenAddr, REDIS_ACCESS_SETTINGS, type Settings } from "@csi/runtime";

// The shapes these checks read (Kubernetes objects, the compose file) live in deploy-shapes.ts, which the other checks share.
export type { Compose, Container, EnvVar, K8sObject, Pod, PodSpec, Probe, Volume } from "./deploy-shapes.js";

import { checkComposeKeys } from "./compose-keys.js";
import type { Compose, Container, K8sObject, Pod, PodSpec, Volume } from "./deploy-shapes.js";
import type { ServiceName } from "./processes.js";
import { checkDriverLiveness, checkScraping, checkSidecarFlags, checkSidecarPrivilege, flagValue, metricsPorts, portOf, SIDECAR_RE } from "./sidecar-checks.js";

// ---------------------------------------------------------------------------------------------
// The services, from their own settings tables and config loaders.

interface EffectiveConfig {
  metricsAddr: string;
  shutdownGraceMs: number;
  clustersFile?: string | undefined;
  endpoint?: string;
  dataDir?: string;
}

interface ServiceSpec {
  settings: Settings<Record<string, unknown>>;
  load(argv: string[], env: NodeJS.ProcessEnv): EffectiveConfig;
  /** Settings a deployment must give explicitly (the defaults suit a developer's machine only). */
  required: string[];
}

export const SERVICES: Record<ServiceName, ServiceSpec> = {
  controller: { settings: CONTROLLER_SETTINGS, load: controllerConfig, required: ["natsUrl", "endpoint", "clustersFile"] },
  journal: { settings: JOURNAL_SETTINGS, load: journalConfig, required: ["natsUrl", "redisUrl", "clustersFile", "dataDir"] },
  "node-agent": { settings: NODE_AGENT_SETTINGS, load: nodeAgentConfig, required: ["natsUrl", "endpoint", "nodeId", "clustersFile", "dataDir"] },
};

/** A service's main as the image runs it: the JavaScript `npm run build` makes of services/<name>/src/main.ts. */
const MAIN_RE = /^services\/(controller|journal|node-agent)\/dist\/main\.js$/;

/** Which of our services a command line starts, and the arguments after its main. */
export function serviceOf(argv: readonly string[]): { service: ServiceName; args: string[] } | undefined {
  const i = argv.findIndex((a) => MAIN_RE.test(a));
  if (i < 0) return undefined;
  return { service: MAIN_RE.exec(argv[i] as string)?.[1] as ServiceName, args: argv.slice(i + 1) };
}

/** One run of a service, as a deployment file describes it. */
export interface ServiceRun {
  where: string;
  service: ServiceName;
  args: string[];
  /** Every env name set, with its value (a placeholder where the value comes from elsewhere). */
  env: Record<string, string>;
  /** Env names set only for another's value to refer to (Kubernetes `$(NAME)`), not settings of the service. */
  helpers?: ReadonlySet<string>;
}

/**
 * Env names and flags the service accepts, the required ones present, and its real config loader
 * accepts the whole. Returns the loaded config (undefined when it does not load).
 */
export function checkServiceRun(run: ServiceRun, problems: string[]): EffectiveConfig | undefined {
  const spec = SERVICES[run.service];
  const at = `${run.where} (${run.service})`;
  const envs = new Set(envNames(spec.settings));
  const flags = new Set(flagNames(spec.settings));
  for (const name of Object.keys(run.env))
    if (!envs.has(name) && !run.helpers?.has(name)) problems.push(`${at}: env ${name} is not a setting of the ${run.service}`);
  for (const a of run.args) {
    if (!a.startsWith("--")) continue;
    const flag = a.split("=")[0] as string;
    if (!flags.has(flag)) problems.push(`${at}: flag ${flag} is not a setting of the ${run.service}`);
  }
  for (const field of spec.required) {
    const s = (spec.settings as Record<string, { env?: string; flag?: string }>)[field];
    const given = (s?.env !== undefined && s.env in run.env) || (s?.flag !== undefined && flagValue(run.args, s.flag) !== undefined);
    if (!given) problems.push(`${at}: ${[s?.env, s?.flag && `--${s.flag}`].filter(Boolean).join(" / ")} must be set`);
  }
  try {
    return spec.load(run.args, run.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    for (const p of err.problems) problems.push(`${at}: the ${run.service} refuses its configuration: ${p}`);
    return undefined;
  }
}

/** "unix:///csi/x.sock" or "/csi/x.sock" → "/csi/x.sock"; anything else → undefined. */
export function unixSocketPath(endpoint: string | undefined): string | undefined {
  if (!endpoint) return undefined;
  if (endpoint.startsWith("unix://")) return endpoint.slice("unix://".length);
  return endpoint.startsWith("/") ? endpoint : undefined;
}

const isUnder = (p: string, dir: string) => p === dir || p.startsWith(dir.endsWith("/") ? dir : `${dir}/`);

/** The pools' roots of a clusters file, each of which must lie under `poolsDir`. */
export function checkPoolRoots(clusters: Clusters, poolsDir: string | undefined, where: string, problems: string[]): void {
  if (!poolsDir) return void problems.push(`${where}: no pool directory is mounted`);
  for (const c of clusters.clusters)
    for (const p of c.pools)
      if (p.root !== undefined && !isUnder(p.root, poolsDir))
        problems.push(`${where}: pool ${c.clusterID}/${p.name} root ${p.root} is not under the shared pool directory ${poolsDir}`);
}

/** Parse a clusters file's text the way the services do; problems if it does not parse. */
export function parseClusters(text: string | undefined, where: string, problems: string[]): Clusters | undefined {
  if (text === undefined) return void problems.push(`${where}: no clusters.json`);
  try {
    return resolveClusters(JSON.parse(text), "/var/lib/csi");
  } catch (err) {
    problems.push(`${where}: clusters.json: ${(err as Error).message}`);
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// The journal's Redis function library: loaded by `csictl redis load-functions` as the Redis admin
// before a journal starts (docs/security.md), in the journal's pod (an init container) or task
// group (a prestart task). The journal's own Redis user may not load it.

/** csictl as the image runs it (built). */
const CSICTL_RE = /^tools\/csictl\/dist\/main\.js$/;
const LOADER_ENVS = new Set(envNames(REDIS_ACCESS_SETTINGS));
/** What the loader must share with the journal: the same Redis server. */
const SAME_REDIS = ["REDIS_URL", "REDIS_SENTINELS", "REDIS_MASTER_NAME"];

/** Whether a command line runs `csictl redis load-functions`. */
export function loadsFunctions(argv: readonly string[]): boolean {
  const i = argv.findIndex((a) => CSICTL_RE.test(a));
  return i >= 0 && argv[i + 1] === "redis" && argv[i + 2] === "load-functions";
}

/** A run of the loader or of the journal: its image, env, and where its REDIS_USERNAME comes from (a Secret, a Nomad variable). */
interface RedisRun {
  image?: string | undefined;
  env: Record<string, string>;
  user?: string | undefined;
}

/** The loader next to a journal: csictl's Redis settings only, the journal's image and Redis server, not the journal's Redis user. */
function checkLoader(where: string, loader: RedisRun, journal: RedisRun, problems: string[]): void {
  for (const name of Object.keys(loader.env)) if (!LOADER_ENVS.has(name)) problems.push(`${where}: env ${name} is not a Redis setting of csictl`);
  if (loader.image !== journal.image) problems.push(`${where}: image ${loader.image} is not the journal's ${journal.image}`);
  for (const name of SAME_REDIS)
    if (loader.env[name] !== journal.env[name]) problems.push(`${where}: ${name} ${loader.env[name]} is not the journal's (${journal.env[name]})`);
  if (loader.user !== undefined && loader.user === journal.user)
    problems.push(`${where}: loads the functions as the journal's Redis user (${loader.user}), which may only call them: use the admin's`);
}

const WORKLOADS = new Set(["Deployment", "DaemonSet", "StatefulSet"]);

export function podsOf(docs: K8sObject[]): Pod[] {
  return docs
    .filter((d) => WORKLOADS.has(d.kind))
    .map((d) => ({
      where: `${d.kind}/${d.metadata.name}`,
      kind: d.kind,
      replicas: d.spec?.replicas,
      annotations: d.spec?.template?.metadata?.annotations ?? {},
      labels: d.spec?.template?.metadata?.labels ?? {},
      spec: d.spec?.template?.spec as PodSpec,
    }));
}

const byKind = (docs: K8sObject[], kind: string) => docs.filter((d) => d.kind === kind);
const find = (docs: K8sObject[], kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name);

/** The pod IP's placeholder (status.podIP). */
const POD_IP = "10.244.0.7";
/** Values for env taken from elsewhere: ConfigMaps are resolved from the documents; the rest are placeholders. */
const FIELD_PLACEHOLDERS: Record<string, string> = {
  "spec.nodeName": "node-1",
  "metadata.name": "pod-1",
  "metadata.namespace": "csi-event-driver",
  "status.podIP": POD_IP,
};

/** The host a "host:port" METRICS_ADDR binds (undefined for "off" or a bad one: the config loader says why). */
function bindHost(metricsAddr: string): string | undefined {
  const a = parseListenAddr(metricsAddr);
  return "error" in a || a.off ? undefined : a.host;
}

/**
 * A container's env as the kubelet sets it: values taken from ConfigMaps and fields, and `$(NAME)`
 * in a value replaced by the value of NAME listed above it (`$$` is a `$`); a reference to a name
 * not set above is a problem (the kubelet would leave it as written). The names referred to are
 * the helpers.
 */
function k8sEnv(c: Container, docs: K8sObject[], where: string, problems: string[]): { env: Record<string, string>; helpers: Set<string> } {
  const env: Record<string, string> = {};
  const helpers = new Set<string>();
  const expand = (name: string, value: string) =>
    value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, ref: string | undefined) => {
      if (ref === undefined) return "$";
      const v = env[ref];
      if (v === undefined) problems.push(`${where}: env ${name} refers to $(${ref}), which is not set above it`);
      else helpers.add(ref);
      return v ?? whole;
    });
  if (c.envFrom) problems.push(`${where}: envFrom hides which names are set; list them under env`);
  for (const e of c.env ?? []) {
    const from = e.valueFrom;
    if (e.value !== undefined) env[e.name] = expand(e.name, e.value);
    else if (from?.configMapKeyRef) {
      const { name, key, optional } = from.configMapKeyRef;
      const v = find(docs, "ConfigMap", name)?.data?.[key];
      if (v !== undefined) env[e.name] = String(v);
      else if (!optional) problems.push(`${where}: env ${e.name} reads ConfigMap ${name} key ${key}, which is not in the manifests`);
    } else if (from?.secretKeyRef) env[e.name] = "secret-value";
    else if (from?.fieldRef) env[e.name] = FIELD_PLACEHOLDERS[from.fieldRef.fieldPath] ?? "field-value";
    else problems.push(`${where}: env ${e.name} has no value`);
  }
  return { env, helpers };
}

/** Which volume (and path inside it) a container path is in: the longest mount that holds it. */
export function locate(c: Container, file: string): { volume: string; rel: string; mountPath: string } | undefined {
  let best: { volume: string; rel: string; mountPath: string } | undefined;
  for (const m of c.volumeMounts ?? [])
    if (isUnder(file, m.mountPath) && (!best || m.mountPath.length > best.mountPath.length))
      best = { volume: m.name, rel: path.posix.relative(m.mountPath, file), mountPath: m.mountPath };
  return best;
}

/** Our container of a pod (the one that runs services/<name>/dist/main.js), with its run. */
function ourContainer(pod: Pod): { c: Container; service: ServiceName; args: string[] } | undefined {
  for (const c of pod.spec.containers) {
    const s = serviceOf([...(c.command ?? []), ...(c.args ?? [])]);
    if (s) return { c, ...s };
  }
  return undefined;
}

/** The sidecar images each pod of ours must run. */
const SIDECARS: Partial<Record<ServiceName, string[]>> = {
  controller: ["csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "livenessprobe"],
  "node-agent": ["csi-node-driver-registrar", "livenessprobe"],
};
/** Sidecars that run as several replicas and must elect a leader. */
const LEADER_ELECTED = new Set(["csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"]);
const MIN_REPLICAS: Partial<Record<ServiceName, number>> = { controller: 2, journal: 2 };
const KUBELET_DIR = "/var/lib/kubelet";

/** Everything about one pod that runs one of our services. */
export function checkPod(pod: Pod, docs: K8sObject[], problems: string[]): { service: ServiceName; config?: EffectiveConfig; c: Container } | undefined {
  const ours = ourContainer(pod);
  if (!ours) return undefined;
  const { c, service, args } = ours;
  const where = `${pod.where} container ${c.name}`;
  const cfg = checkServiceRun({ where, service, args, ...k8sEnv(c, docs, where, problems) }, problems);
  const volumes = new Map((pod.spec.volumes ?? []).map((v) => [v.name, v]));

  // Replicas.
  const min = MIN_REPLICAS[service];
  if (min !== undefined && pod.kind !== "DaemonSet" && (pod.replicas ?? 1) < min)
    problems.push(`${pod.where}: ${pod.replicas ?? 1} replicas, at least ${min} wanted`);
  if (service === "node-agent" && pod.kind !== "DaemonSet") problems.push(`${pod.where}: the node-agent must run as a DaemonSet (one per node)`);
  if (!cfg) return { service, c };

  // Probes and the metrics port.
  const port = portOf(cfg.metricsAddr);
  if (port === undefined || port === 0) problems.push(`${where}: METRICS_ADDR ${cfg.metricsAddr} has no fixed port for the probes`);
  const named = c.ports?.find((p) => p.name === "metrics");
  if (named?.containerPort !== port) problems.push(`${where}: containerPort "metrics" is ${named?.containerPort}, METRICS_ADDR's port is ${port}`);
  const probePort = (p: number | string | undefined) => (typeof p === "string" ? c.ports?.find((x) => x.name === p)?.containerPort : p);
  // Liveness through the livenessprobe sidecar where the pod has one (checkDriverLiveness), else the service's own /healthz.
  const ownLiveness = !SIDECARS[service]?.includes("livenessprobe");
  for (const [kind, probe, want] of [
    ...(ownLiveness ? [["livenessProbe", c.livenessProbe, "/healthz"] as const] : []),
    ["readinessProbe", c.readinessProbe, "/readyz"] as const,
  ]) {
    if (probe?.httpGet?.path !== want) problems.push(`${where}: ${kind} must GET ${want} (has ${probe?.httpGet?.path})`);
    else if (probePort(probe.httpGet.port) !== port) problems.push(`${where}: ${kind} port ${probe.httpGet.port} is not the metrics port ${port}`);
  }
  const annotated = pod.annotations["prometheus.io/port"];
  if (annotated !== undefined && Number(annotated) !== port) problems.push(`${pod.where}: prometheus.io/port ${annotated} is not the metrics port ${port}`);
  // The bind address: the pod IP, which the kubelet's probes and Prometheus reach, and nothing wider.
  const host = bindHost(cfg.metricsAddr);
  if (host !== undefined && host !== POD_IP)
    problems.push(
      `${where}: METRICS_ADDR ${cfg.metricsAddr} does not bind the pod IP ("$(POD_IP):${port}", POD_IP from status.podIP): the probes cannot reach loopback, and a wildcard serves every interface of the pod`,
    );

  // Graceful stop: the kubelet's SIGKILL must come after the service's own drain.
  const grace = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (grace <= cfg.shutdownGraceMs / 1000)
    problems.push(`${pod.where}: terminationGracePeriodSeconds ${grace} is not above SHUTDOWN_GRACE_MS ${cfg.shutdownGraceMs} ms`);

  // The clusters file is the clusters ConfigMap's clusters.json.
  if (cfg.clustersFile) {
    const at = locate(c, cfg.clustersFile);
    const cm = at && volumes.get(at.volume)?.configMap;
    if (!cm || at.rel !== "clusters.json" || !find(docs, "ConfigMap", cm.name)?.data?.["clusters.json"])
      problems.push(`${where}: CLUSTERS_FILE ${cfg.clustersFile} is not a ConfigMap's clusters.json`);
  }

  // Ports: no two listeners of the pod on one port.
  const seen = new Map<number, string>();
  const claim = (n: number | undefined, who: string) => {
    if (n === undefined) return;
    const before = seen.get(n);
    if (before && before !== who) problems.push(`${pod.where}: port ${n} is used by both ${before} and ${who}`);
    seen.set(n, who);
  };
  for (const x of pod.spec.containers) {
    for (const p of x.ports ?? []) claim(p.containerPort, x.name);
    claim(portOf(flagValue(x.args ?? [], "http-endpoint")), x.name);
    const hp = flagValue(x.args ?? [], "health-port");
    if (hp !== undefined) claim(Number(hp), x.name);
  }

  checkSidecars(pod, c, service, cfg, volumes, problems);
  if (!ownLiveness) checkDriverLiveness(pod, c, problems);
  if (service === "node-agent") checkNodeHost(pod, c, volumes, problems);
  if (service === "journal") checkPodLoader(pod, c, docs, problems);
  return { service, config: cfg, c };
}

/** The sidecars: all present, pinned images, leader election, and the driver's socket as their --csi-address. */
function checkSidecars(pod: Pod, c: Container, service: ServiceName, cfg: EffectiveConfig, volumes: Map<string, Volume>, problems: string[]): void {
  const where = `${pod.where} container ${c.name}`;
  const socket = unixSocketPath(cfg.endpoint);
  const driverSocket = socket ? locate(c, socket) : undefined;
  const sidecars = pod.spec.containers.filter((x) => x !== c);
  if ((SIDECARS[service]?.length ?? 0) > 0) {
    if (!socket) problems.push(`${where}: endpoint ${cfg.endpoint} is not a unix socket`);
    else if (!driverSocket || !volumes.get(driverSocket.volume)) problems.push(`${where}: its socket ${socket} is not in a volume the sidecars can share`);
  }
  checkSidecarFlags(pod, problems);
  checkSidecarPrivilege(pod, c, driverSocket?.volume, problems);
  const images = new Set<string>();
  for (const x of sidecars) {
    const m = SIDECAR_RE.exec(x.image ?? "");
    if (!m) {
      problems.push(`${pod.where} container ${x.name}: image ${x.image} is not a pinned registry.k8s.io/sig-storage sidecar`);
      continue;
    }
    const name = m[1] as string;
    images.add(name);
    const args = x.args ?? [];
    if (LEADER_ELECTED.has(name) && !args.some((a) => a === "--leader-election" || a === "--leader-election=true"))
      problems.push(`${pod.where} container ${x.name}: --leader-election must be on`);
    const address = unixSocketPath(flagValue(args, "csi-address"));
    const at = address ? locate(x, address) : undefined;
    if (!at || !driverSocket || at.volume !== driverSocket.volume || at.rel !== driverSocket.rel)
      problems.push(`${pod.where} container ${x.name}: --csi-address ${address} is not the driver's socket ${socket}`);
    if (name === "csi-node-driver-registrar" && driverSocket) {
      const host = volumes.get(driverSocket.volume)?.hostPath?.path;
      const want = host ? path.posix.join(host, driverSocket.rel) : undefined;
      const got = flagValue(args, "kubelet-registration-path");
      if (!want || got !== want) problems.push(`${pod.where} container ${x.name}: --kubelet-registration-path ${got} is not the socket's host path ${want}`);
      if (host !== `${KUBELET_DIR}/plugins/${PLUGIN_NAME}`)
        problems.push(`${pod.where}: the socket's host directory ${host} is not ${KUBELET_DIR}/plugins/${PLUGIN_NAME}`);
      const reg = (x.volumeMounts ?? []).find((v) => v.mountPath === "/registration");
      if (volumes.get(reg?.name ?? "")?.hostPath?.path !== `${KUBELET_DIR}/plugins_registry`)
        problems.push(`${pod.where} container ${x.name}: /registration is not the host's ${KUBELET_DIR}/plugins_registry`);
    }
  }
  for (const want of SIDECARS[service] ?? []) if (!images.has(want)) problems.push(`${pod.where}: no ${want} sidecar`);
}

/** The journal's pod: one init container loads the function library (checkLoader). */
function checkPodLoader(pod: Pod, c: Container, docs: K8sObject[], problems: string[]): void {
  const loaders = (pod.spec.initContainers ?? []).filter((x) => loadsFunctions([...(x.command ?? []), ...(x.args ?? [])]));
  const x = loaders[0];
  if (!x || loaders.length > 1)
    return void problems.push(`${pod.where}: not one init container that loads the journal's Redis function library (csictl redis load-functions)`);
  const where = `${pod.where} init container ${x.name}`;
  const user = (y: Container) => y.env?.find((e) => e.name === "REDIS_USERNAME")?.valueFrom?.secretKeyRef?.name;
  checkLoader(
    where,
    { image: x.image, env: k8sEnv(x, docs, where, problems).env, user: user(x) },
    { image: c.image, env: k8sEnv(c, docs, where, []).env, user: user(c) },
    problems,
  );
}

/**
 * Why the node-agent's container needs a PID 1 that reaps orphans: the rbd-fuse processes it
 * starts daemonize, and node, as PID 1, would leave them as zombies when they exit.
 */
const REAPER = "a PID 1 that reaps orphans (rbd-fuse daemonizes)";

/** The node-agent's host access: privileged, host /dev, the kubelet directory with Bidirectional propagation, NODE_ID = node name; a reaping PID 1. */
function checkNodeHost(pod: Pod, c: Container, volumes: Map<string, Volume>, problems: string[]): void {
  const where = `${pod.where} container ${c.name}`;
  if (!c.securityContext?.privileged) problems.push(`${where}: must be privileged (losetup, mkfs, mount)`);
  if (pod.spec.shareProcessNamespace !== true) problems.push(`${pod.where}: shareProcessNamespace must be true: ${REAPER}`);
  const hostMount = (mountPath: string) => {
    const m = c.volumeMounts?.find((v) => v.mountPath === mountPath);
    return m && { m, host: volumes.get(m.name)?.hostPath?.path };
  };
  if (hostMount("/dev")?.host !== "/dev") problems.push(`${where}: the host's /dev is not mounted at /dev`);
  const kubelet = hostMount(KUBELET_DIR);
  if (kubelet?.host !== KUBELET_DIR || kubelet.m.mountPropagation !== "Bidirectional")
    problems.push(`${where}: ${KUBELET_DIR} must be the host's, with mountPropagation Bidirectional`);
  const nodeId = c.env?.find((e) => e.name === "NODE_ID");
  if (nodeId?.valueFrom?.fieldRef?.fieldPath !== "spec.nodeName") problems.push(`${where}: NODE_ID must come from spec.nodeName`);
}

/** Where a pod mounts the pool directory of our container, and what storage backs it. */
function poolMount(pod: Pod, c: Container, cfg: EffectiveConfig | undefined): { dir: string; source: string } | undefined {
  const dir = path.posix.join(cfg?.dataDir ?? "", "pools");
  const at = locate(c, dir);
  if (at?.rel !== "") return undefined;
  const v = (pod.spec.volumes ?? []).find((x) => x.name === at.volume);
  const source = v?.persistentVolumeClaim ? `pvc:${v.persistentVolumeClaim.claimName}` : v?.hostPath ? `hostPath:${v.hostPath.path}` : `other:${v?.name}`;
  return { dir, source };
}

/** Every check of a set of Kubernetes documents (one kustomize build, or a base). */
export function checkKubernetes(docs: K8sObject[], referenceClusters: string): string[] {
  const problems: string[] = [];
  const results = podsOf(docs).flatMap((pod) => {
    const r = checkPod(pod, docs, problems);
    return r ? [{ pod, ...r }] : [];
  });
  for (const s of ["controller", "journal", "node-agent"] as const) if (!results.some((r) => r.service === s)) problems.push(`no workload runs the ${s}`);

  // One image for every service.
  const images = new Set(results.map((r) => r.c.image));
  if (images.size > 1) problems.push(`the services run different images: ${[...images].join(", ")}`);
  // One version of each sidecar.
  const tags = new Map<string, Set<string>>();
  for (const pod of podsOf(docs))
    for (const x of pod.spec.containers) {
      const m = SIDECAR_RE.exec(x.image ?? "");
      if (m) tags.set(m[1] as string, (tags.get(m[1] as string) ?? new Set()).add(m[2] as string));
    }
  for (const [name, t] of tags) if (t.size > 1) problems.push(`${name} runs in several versions: ${[...t].join(", ")}`);

  // The clusters file, and the pool directory the journal and the node-agents share.
  const cm = docs.find((d) => d.kind === "ConfigMap" && d.data?.["clusters.json"] !== undefined);
  const clusters = parseClusters(cm?.data?.["clusters.json"], `ConfigMap/${cm?.metadata.name}`, problems);
  if (cm && JSON.stringify(JSON.parse(cm.data["clusters.json"])) !== JSON.stringify(JSON.parse(referenceClusters)))
    problems.push(`ConfigMap/${cm.metadata.name}: clusters.json differs from deploy/clusters.json`);
  const pools = results.filter((r) => r.service !== "controller").map((r) => ({ r, mount: poolMount(r.pod, r.c, r.config) }));
  for (const { r, mount } of pools) if (!mount) problems.push(`${r.pod.where}: no volume is mounted at <DATA_DIR>/pools`);
  const mounts = pools.flatMap((p) => (p.mount ? [p.mount] : []));
  if (new Set(mounts.map((m) => m.source)).size > 1 || new Set(mounts.map((m) => m.dir)).size > 1)
    problems.push(`the journal and the node-agent do not share one pool directory: ${mounts.map((m) => `${m.source} at ${m.dir}`).join(" / ")}`);
  if (clusters && mounts[0]) checkPoolRoots(clusters, mounts[0].dir, `ConfigMap/${cm?.metadata.name}`, problems);

  problems.push(
    ...checkScraping(
      docs,
      metricsPorts(
        results.map((r) => ({ pod: r.pod, driver: r.c })),
        problems,
      ),
    ),
  );
  problems.push(...checkDriverObjects(docs), ...checkClasses(docs, clusters), ...checkControllerRbac(docs));
  return problems;
}

/** The driver's name everywhere it appears, and the CSIDriver object's settings. */
export function checkDriverObjects(docs: K8sObject[]): string[] {
  const problems: string[] = [];
  const drivers = byKind(docs, "CSIDriver");
  if (drivers.length !== 1) problems.push(`${drivers.length} CSIDriver objects, 1 wanted`);
  for (const d of drivers) {
    if (d.metadata.name !== PLUGIN_NAME) problems.push(`CSIDriver/${d.metadata.name}: the plugin name is ${PLUGIN_NAME}`);
    if (d.spec?.attachRequired !== true)
      problems.push(`CSIDriver/${d.metadata.name}: attachRequired must be true (the controller implements ControllerPublishVolume)`);
    if (!d.spec?.volumeLifecycleModes?.includes("Persistent")) problems.push(`CSIDriver/${d.metadata.name}: volumeLifecycleModes must include Persistent`);
    if (d.spec?.podInfoOnMount !== true)
      problems.push(`CSIDriver/${d.metadata.name}: podInfoOnMount must be true (NodePublishVolume records which pod mounted the volume)`);
  }
  const named: [string, string][] = [
    ...byKind(docs, "StorageClass").map((d): [string, string] => [`StorageClass/${d.metadata.name} provisioner`, d.provisioner]),
    ...byKind(docs, "VolumeSnapshotClass").map((d): [string, string] => [`VolumeSnapshotClass/${d.metadata.name} driver`, d.driver]),
    ...byKind(docs, "VolumeAttributesClass").map((d): [string, string] => [`VolumeAttributesClass/${d.metadata.name} driverName`, d.driverName]),
  ];
  for (const [where, name] of named) if (name !== PLUGIN_NAME) problems.push(`${where} is ${name}, not ${PLUGIN_NAME}`);
  return problems;
}

/** Class parameters, run through the controller's own parameter code. */
export function checkClasses(docs: K8sObject[], clusters: Clusters | undefined): string[] {
  const problems: string[] = [];
  const invalid = (where: string, err: unknown) => problems.push(`${where}: the controller refuses the parameters: ${(err as Error).message}`);
  for (const sc of byKind(docs, "StorageClass")) {
    const where = `StorageClass/${sc.metadata.name}`;
    try {
      const { clusterID, pool, rest } = splitParameters(sc.parameters);
      const { parameters: unread } = createLimits(rest, {});
      for (const k of Object.keys(unread)) problems.push(`${where}: parameter ${k} is not one the controller reads`);
      const cluster = clusters?.get(clusterID ?? clusters.defaultCluster);
      if (clusters && !cluster) problems.push(`${where}: clusterID ${clusterID} is not in the clusters file`);
      if (cluster && pool !== undefined && !cluster.pools.some((p) => p.name === pool))
        problems.push(`${where}: pool ${pool} is not a pool of cluster ${cluster.clusterID}`);
    } catch (err) {
      invalid(where, err);
    }
  }
  for (const vac of byKind(docs, "VolumeAttributesClass")) {
    try {
      parseMutableParameters(vac.parameters ?? {});
    } catch (err) {
      invalid(`VolumeAttributesClass/${vac.metadata.name}`, err);
    }
  }
  for (const vsc of byKind(docs, "VolumeSnapshotClass"))
    for (const k of Object.keys(splitParameters(vsc.parameters).rest))
      problems.push(`VolumeSnapshotClass/${vsc.metadata.name}: parameter ${k} is not one the controller reads`);
  return problems;
}

/** What each sidecar of the controller pod must be allowed (a rule that only that sidecar's role grants), and leader election. */
const SIDECAR_GRANTS: [string, string, string, string][] = [
  ["external-provisioner", "", "persistentvolumes", "create"],
  ["external-attacher", "storage.k8s.io", "volumeattachments/status", "patch"],
  ["external-resizer", "", "persistentvolumeclaims/status", "patch"],
  ["external-snapshotter", "snapshot.storage.k8s.io", "volumesnapshotcontents/status", "update"],
];

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
}
const grants = (rules: Rule[], group: string, resource: string, verb: string) =>
  rules.some((r) => r.apiGroups?.includes(group) && r.resources?.includes(resource) && r.verbs?.includes(verb));

export function checkControllerRbac(docs: K8sObject[]): string[] {
  const problems: string[] = [];
  const controller = podsOf(docs).find((p) => ourContainer(p)?.service === "controller");
  const sa = controller?.spec.serviceAccountName;
  if (!controller) return problems;
  if (!sa || !find(docs, "ServiceAccount", sa)) return [`${controller.where}: ServiceAccount ${sa} is not in the manifests`];
  const boundTo = (kind: string) =>
    docs
      .filter((b) => b.kind === kind && b.subjects?.some((s: { kind: string; name: string }) => s.kind === "ServiceAccount" && s.name === sa))
      .flatMap((b) => (find(docs, b.roleRef.kind, b.roleRef.name)?.rules ?? []) as Rule[]);
  const clusterRules = boundTo("ClusterRoleBinding");
  for (const [sidecar, group, resource, verb] of SIDECAR_GRANTS)
    if (!grants(clusterRules, group, resource, verb)) problems.push(`ServiceAccount ${sa}: no ClusterRole lets the ${sidecar} ${verb} ${resource}`);
  if (!grants(boundTo("RoleBinding"), "coordination.k8s.io", "leases", "create"))
    problems.push(`ServiceAccount ${sa}: no Role allows leader election (leases)`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Kustomize structure.

export interface Kustomization {
  resources?: string[];
  components?: string[];
  patches?: { path?: string }[];
}

/** Every file or directory a kustomization names exists; a directory holds a kustomization. */
export function checkKustomization(dir: string, k: Kustomization, exists: (p: string) => boolean): string[] {
  const problems: string[] = [];
  const named = [...(k.resources ?? []), ...(k.components ?? []), ...(k.patches ?? []).flatMap((p) => (p.path ? [p.path] : []))];
  for (const rel of named) {
    const p = path.join(dir, rel);
    if (!exists(p)) problems.push(`${dir}/kustomization.yaml: ${rel} does not exist`);
    else if (!/\.ya?ml$/.test(rel) && !exists(path.join(p, "kustomization.yaml"))) problems.push(`${dir}/kustomization.yaml: ${rel} has no kustomization.yaml`);
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Nomad (JSON job specs, the API format `nomad job run -json` takes).

interface NomadTask {
  Name: string;
  Lifecycle?: { Hook: string; Sidecar?: boolean };
  Config: { image?: string; command?: string; args?: string[]; volumes?: string[]; privileged?: boolean; init?: boolean; ports?: string[] };
  Env?: Record<string, string>;
  Templates?: { DestPath: string; EmbeddedTmpl: string; Envvars?: boolean }[];
  CSIPluginConfig?: { ID: string; Type: string; MountDir: string };
  KillTimeout?: number;
}
interface NomadGroup {
  Name: string;
  Count?: number;
  Networks?: { DynamicPorts?: { Label: string; To?: number }[]; ReservedPorts?: { Label: string; Value: number; To?: number }[] }[];
  Services?: { PortLabel: string; Checks?: { Type: string; Path?: string; PortLabel?: string }[] }[];
  Tasks: NomadTask[];
}
export interface NomadJob {
  Job: { ID: string; Type: string; TaskGroups: NomadGroup[] };
}

const NOMAD_CSI_TYPE: Record<ServiceName, string | undefined> = { controller: "controller", "node-agent": "node", journal: undefined };
/** Nomad's interpolations (${node.unique.name}, ${NOMAD_ALLOC_NAME}) stand for some value at run time. */
const interpolated = (v: string) => v.replace(/\$\{[^}]+\}/g, "interpolated");

/** Docker volumes "host:container[:ro]" → the host path mounted at a container path. */
function dockerVolume(volumes: string[] | undefined, containerPath: string): string | undefined {
  for (const v of volumes ?? []) {
    const [host, inside] = v.split(":");
    if (inside === containerPath) return host;
  }
  return undefined;
}

/** A task's env: its Env (interpolations as placeholders) and the names its env templates set. */
function nomadEnv(task: NomadTask): Record<string, string> {
  const env = Object.fromEntries(Object.entries(task.Env ?? {}).map(([k, v]) => [k, interpolated(v)]));
  for (const t of task.Templates ?? []) if (t.Envvars) for (const m of t.EmbeddedTmpl.matchAll(/^([A-Z][A-Z0-9_]*)=/gm)) env[m[1] as string] = "template-value";
  return env;
}

/** Where a task's REDIS_USERNAME comes from: `<Nomad variable path>.<key>` of its env template. */
function nomadRedisUser(task: NomadTask): string | undefined {
  for (const t of task.Templates ?? []) {
    const key = /^REDIS_USERNAME=\{\{\s*\.(\w+)\s*\}\}/m.exec(t.EmbeddedTmpl)?.[1];
    if (key) return `${/nomadVar "([^"]+)"/.exec(t.EmbeddedTmpl)?.[1]}.${key}`;
  }
  return undefined;
}

/** The journal's task group: one prestart task (not a sidecar) loads the function library (checkLoader). */
function checkGroupLoader(where: string, group: NomadGroup, journal: NomadTask, problems: string[]): void {
  const loaders = group.Tasks.filter((t) => loadsFunctions([t.Config.command ?? "", ...(t.Config.args ?? [])]));
  const t = loaders[0];
  if (!t || loaders.length > 1)
    return void problems.push(`${where}: not one task that loads the journal's Redis function library (csictl redis load-functions)`);
  const at = `${where} task ${t.Name}`;
  if (t.Lifecycle?.Hook !== "prestart" || t.Lifecycle.Sidecar)
    problems.push(`${at}: must be a prestart task that ends (lifecycle hook prestart, not a sidecar)`);
  const run = (x: NomadTask): RedisRun => ({ image: x.Config.image, env: nomadEnv(x), user: nomadRedisUser(x) });
  checkLoader(at, run(t), run(journal), problems);
}

/** Every check of the Nomad jobs (all of them together: the pool directory is shared across jobs). */
export function checkNomad(jobs: NomadJob[], referenceClusters: string, image: string | undefined): string[] {
  const problems: string[] = [];
  const pools: { where: string; host: string | undefined; dir: string }[] = [];
  const seen = new Set<ServiceName>();
  for (const { Job: job } of jobs)
    for (const group of job.TaskGroups)
      for (const task of group.Tasks) {
        const where = `nomad job ${job.ID} task ${task.Name}`;
        const s = serviceOf([task.Config.command ?? "", ...(task.Config.args ?? [])]);
        if (!s) continue;
        seen.add(s.service);
        const env = nomadEnv(task);
        const cfg = checkServiceRun({ where, service: s.service, args: s.args, env }, problems);
        if (s.service === "journal") checkGroupLoader(`nomad job ${job.ID} group ${group.Name}`, group, task, problems);
        if (image !== undefined && task.Config.image !== image) problems.push(`${where}: image ${task.Config.image} is not ${image}`);
        const min = MIN_REPLICAS[s.service];
        if (min !== undefined && job.Type !== "system" && (group.Count ?? 1) < min)
          problems.push(`${where}: count ${group.Count ?? 1}, at least ${min} wanted`);
        if (s.service === "node-agent" && job.Type !== "system") problems.push(`${where}: the node plugin must be a system job (one per client)`);
        if (!cfg) continue;

        // The CSI plugin: our name, the right type, the socket Nomad expects (<mount_dir>/csi.sock).
        const csiType = NOMAD_CSI_TYPE[s.service];
        const plugin = task.CSIPluginConfig;
        if (csiType) {
          if (plugin?.ID !== PLUGIN_NAME) problems.push(`${where}: csi_plugin id ${plugin?.ID} is not ${PLUGIN_NAME}`);
          if (plugin?.Type !== csiType) problems.push(`${where}: csi_plugin type ${plugin?.Type} is not ${csiType}`);
          const socket = unixSocketPath(cfg.endpoint);
          if (!plugin || socket !== path.posix.join(plugin.MountDir, "csi.sock"))
            problems.push(`${where}: endpoint ${cfg.endpoint} is not <mount_dir>/csi.sock`);
        }
        if (s.service === "node-agent" && !task.Config.privileged) problems.push(`${where}: the node plugin must be privileged`);
        if (s.service === "node-agent" && task.Config.init !== true) problems.push(`${where}: init must be true: ${REAPER}`);

        // Metrics port (not on the container's loopback: the mapped port reaches its interface), checks, graceful stop.
        const bind = bindHost(cfg.metricsAddr);
        if (bind !== undefined && (bind.startsWith("127.") || bind === "::1" || bind === "localhost"))
          problems.push(`${where}: METRICS_ADDR ${cfg.metricsAddr} is loopback: the mapped port and the checks cannot reach it`);
        const port = portOf(cfg.metricsAddr);
        const label = [...(group.Networks ?? []).flatMap((n) => [...(n.DynamicPorts ?? []), ...(n.ReservedPorts ?? [])])].find((p) => p.To === port)?.Label;
        if (!label || !task.Config.ports?.includes(label)) problems.push(`${where}: no port maps to METRICS_ADDR's port ${port}`);
        const checks = (group.Services ?? []).filter((sv) => sv.PortLabel === label).flatMap((sv) => sv.Checks ?? []);
        for (const want of ["/healthz", "/readyz"])
          if (!checks.some((c) => c.Type === "http" && c.Path === want)) problems.push(`${where}: no http check of ${want}`);
        if ((task.KillTimeout ?? 5e9) / 1e9 <= cfg.shutdownGraceMs / 1000)
          problems.push(`${where}: KillTimeout is not above SHUTDOWN_GRACE_MS ${cfg.shutdownGraceMs} ms`);

        // The clusters file, rendered from a template of the reference file.
        const host = cfg.clustersFile ? dockerVolume(task.Config.volumes, cfg.clustersFile) : undefined;
        const tmpl = task.Templates?.find((t) => t.DestPath === host);
        if (!tmpl) problems.push(`${where}: CLUSTERS_FILE ${cfg.clustersFile} is not a rendered template`);
        else {
          const clusters = parseClusters(tmpl.EmbeddedTmpl, where, problems);
          if (clusters && JSON.stringify(JSON.parse(tmpl.EmbeddedTmpl)) !== JSON.stringify(JSON.parse(referenceClusters)))
            problems.push(`${where}: its clusters.json differs from deploy/clusters.json`);
          if (s.service !== "controller") {
            const dir = path.posix.join(cfg.dataDir ?? "", "pools");
            pools.push({ where, host: dockerVolume(task.Config.volumes, dir), dir });
            if (clusters) checkPoolRoots(clusters, dir, where, problems);
          }
        }
      }
  for (const s of ["controller", "journal", "node-agent"] as const) if (!seen.has(s)) problems.push(`no Nomad job runs the ${s}`);
  for (const p of pools) if (!p.host) problems.push(`${p.where}: no host directory is mounted at ${p.dir}`);
  if (new Set(pools.map((p) => `${p.host} at ${p.dir}`)).size > 1)
    problems.push(`the journal and the node plugin do not share one pool directory: ${pools.map((p) => `${p.host} at ${p.dir}`).join(" / ")}`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// docker-compose.yml

/** "${NAME:-default}" → default (compose's own substitution, with nothing set). */
const composeValue = (v: unknown) => String(v ?? "").replace(/\$\{[A-Z0-9_]+(?::?-([^}]*))?\}/g, (_m, d: string | undefined) => d ?? "");
/** Compose durations: "30s", "1m30s", "500ms". */
export function composeSeconds(d: string | undefined): number {
  if (d === undefined) return 10; // compose's default stop timeout
  let s = 0;
  for (const m of d.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g))
    s += Number(m[1]) * ({ h: 3600, m: 60, s: 1, ms: 0.001 } as Record<string, number>)[m[2] as string]!;
  return s;
}

export function checkCompose(compose: Compose, referenceClustersPath: string, readFile: (p: string) => string): string[] {
  const problems: string[] = checkComposeKeys(compose);
  const builds = new Set<string>();
  const pools: string[] = [];
  for (const [name, svc] of Object.entries(compose.services)) {
    const s = serviceOf(svc.command ?? []);
    if (!s) continue;
    const where = `docker-compose service ${name}`;
    builds.add(typeof svc.build === "string" ? svc.build : (svc.build?.context ?? "(no build)"));
    const envList = Array.isArray(svc.environment) ? svc.environment.map((e) => e.split("=") as [string, string]) : Object.entries(svc.environment ?? {});
    const env = Object.fromEntries(envList.map(([k, v]) => [k, composeValue(v)]));
    const cfg = checkServiceRun({ where, service: s.service, args: s.args, env }, problems);
    if (!cfg) continue;
    if (s.service === "node-agent" && svc.init !== true) problems.push(`${where}: init must be true: ${REAPER}`);
    if (composeSeconds(svc.stop_grace_period) <= cfg.shutdownGraceMs / 1000)
      problems.push(`${where}: stop_grace_period ${svc.stop_grace_period ?? "10s (default)"} is not above SHUTDOWN_GRACE_MS ${cfg.shutdownGraceMs} ms`);
    const mounts = (svc.volumes ?? []).map((v) => (typeof v === "string" ? { source: v.split(":")[0] as string, target: v.split(":")[1] as string } : v));
    const clustersMount = mounts.find((m) => m.target === cfg.clustersFile);
    if (!clustersMount) problems.push(`${where}: CLUSTERS_FILE ${cfg.clustersFile} is not mounted`);
    else if (path.normalize(clustersMount.source) !== path.normalize(referenceClustersPath))
      problems.push(`${where}: CLUSTERS_FILE is mounted from ${clustersMount.source}, not ${referenceClustersPath}`);
    if (s.service !== "controller") {
      const dir = path.posix.join(cfg.dataDir ?? "", "pools");
      const m = mounts.find((x) => x.target === dir);
      pools.push(`${m?.source ?? "(nothing)"} at ${dir}`);
      const clusters = parseClusters(clustersMount ? readFile(referenceClustersPath) : undefined, where, problems);
      if (clusters) checkPoolRoots(clusters, m ? dir : undefined, where, problems);
    }
  }
  if (builds.size !== 1) problems.push(`the services are not built from one image: ${[...builds].join(", ")}`);
  if (new Set(pools).size !== 1) problems.push(`the journal and the node-agent do not share one pool volume: ${pools.join(" / ")}`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// What runs our image: plain node on the JavaScript `npm run build` makes (docs/building.md).

/** One command line of our image, as a deployment file gives it. */
export interface CommandRun {
  where: string;
  /** The whole command (entrypoint and arguments); empty when the file sets none. */
  argv: string[];
}

/** Whether an image reference names our image (`csi-event-driver`, any tag). */
const isOurImage = (image: string | undefined, ours: string) => image !== undefined && image.split(":")[0] === ours;

/** Every container and init container of our image in pod templates (workloads, Jobs, CronJobs). */
export function kubernetesCommands(docs: K8sObject[], image: string): CommandRun[] {
  return docs.flatMap((d) => {
    const spec = (d.kind === "CronJob" ? d.spec?.jobTemplate?.spec?.template?.spec : d.spec?.template?.spec) as PodSpec | undefined;
    return [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])]
      .filter((c) => isOurImage(c.image, image))
      .map((c) => ({ where: `${d.kind}/${d.metadata.name} container ${c.name}`, argv: [...(c.command ?? []), ...(c.args ?? [])] }));
  });
}

/** Every task of our image in the Nomad jobs. */
export function nomadCommands(jobs: NomadJob[], image: string): CommandRun[] {
  return jobs.flatMap(({ Job: job }) =>
    job.TaskGroups.flatMap((g) =>
      g.Tasks.filter((t) => isOurImage(t.Config.image, image)).map((t) => ({
        where: `nomad job ${job.ID} task ${t.Name}`,
        argv: [...(t.Config.command ? [t.Config.command] : []), ...(t.Config.args ?? [])],
      })),
    ),
  );
}

/** Every compose service built from the repository (our image). */
export function composeCommands(compose: Compose): CommandRun[] {
  return Object.entries(compose.services)
    .filter(([, svc]) => svc.build !== undefined)
    .map(([name, svc]) => ({ where: `docker-compose service ${name}`, argv: svc.command ?? [] }));
}

/**
 * Each run is `node <file> [args]`: node with no options before the file (no loader, no
 * condition: production resolves the packages' default exports, their dist/*.js), the file one
 * that `npm run build` makes (`built`, relative paths), and no tsx anywhere.
 */
export function checkCommands(runs: CommandRun[], built: ReadonlySet<string>): string[] {
  const problems: string[] = [];
  for (const { where, argv } of runs) {
    if (argv.length === 0) {
      problems.push(`${where}: sets no command: say which built main it runs`);
      continue;
    }
    if (argv.some((a) => /\btsx\b/.test(a))) problems.push(`${where}: runs tsx (${argv.join(" ")}): the image has none; it runs the built JavaScript`);
    const [node, file] = argv;
    if (node !== "node") problems.push(`${where}: runs ${node}, not node <a built file>`);
    else if (file === undefined || file.startsWith("-")) problems.push(`${where}: node ${file ?? ""}: plain node on a built file, no options before it`);
    else if (!built.has(path.posix.normalize(file))) problems.push(`${where}: ${file} is not a file npm run build makes`);
  }
  return problems;
}
