/**
 * The kubernetes-csi sidecars of our pods as their own repositories document them (docs/deploy.md,
 * "The sidecars as they document themselves"): every flag one their pinned version takes (and no
 * deprecated one), --extra-create-metadata where the history needs it, privileged beside a
 * privileged driver (SELinux), the kubelet's liveness probe of the driver going through the
 * livenessprobe sidecar, and every sidecar metrics port declared and scraped. Pure: documents in,
 * one line per problem out. deploy-checks.ts calls these for each of our pods.
 */
import type { Container, K8sObject, Pod } from "./deploy-shapes.js";
import { DEPRECATED_SIDECAR_FLAGS, SIDECAR_FLAGS } from "./sidecar-flags.js";

export const SIDECAR_RE = /^registry\.k8s\.io\/sig-storage\/([a-z-]+):(v\d+\.\d+\.\d+)$/;

/** The sidecar image and version a container runs, if it runs one. */
export function sidecarOf(c: Container): { name: string; version: string } | undefined {
  const m = SIDECAR_RE.exec(c.image ?? "");
  return m ? { name: m[1] as string, version: m[2] as string } : undefined;
}

/** The value of `--name=value` or `--name value` in an argument list. */
export function flagValue(args: readonly string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === `--${name}`) return args[i + 1];
    if (a.startsWith(`--${name}=`)) return a.slice(name.length + 3);
  }
  return undefined;
}

/** The port of a "host:port" address (or ":port"). */
export function portOf(addr: string | undefined): number | undefined {
  const m = /:(\d+)$/.exec(addr ?? "");
  return m ? Number(m[1]) : undefined;
}

/** The flag names of an argument list (Go's flag package takes `-name` and `--name`, with `=value` or not). */
const flagNamesOf = (args: readonly string[]) => args.flatMap((a) => (/^--?[a-z]/.test(a) ? [a.replace(/^--?/, "").split("=")[0] as string] : []));

/** Sidecars whose flag must be on, and why. */
const REQUIRED_FLAGS: Record<string, [flag: string, why: string][]> = {
  "csi-provisioner": [["extra-create-metadata", "CreateVolume must name the PVC and PV for the volume's history"]],
  "csi-snapshotter": [["extra-create-metadata", "CreateSnapshot must name the VolumeSnapshot for the snapshot's history"]],
};
const isOn = (args: readonly string[], flag: string) => args.some((a) => a === `--${flag}` || a === `--${flag}=true` || a === `-${flag}`);

/** Every flag of every sidecar is one its pinned version documents, none deprecated; the flags the driver needs are on. */
export function checkSidecarFlags(pod: Pod, problems: string[]): void {
  for (const x of pod.spec.containers) {
    const s = sidecarOf(x);
    if (!s) continue;
    const where = `${pod.where} container ${x.name}`;
    const args = x.args ?? [];
    const known = SIDECAR_FLAGS[`${s.name}:${s.version}`];
    if (!known)
      problems.push(`${where}: no documented flag list for ${s.name}:${s.version} (tools/testkit/src/sidecar-flags.ts): read its release notes and add it`);
    for (const f of flagNamesOf(args)) {
      if (known && !known.includes(f)) problems.push(`${where}: --${f} is not a flag of ${s.name}:${s.version}`);
      else if (DEPRECATED_SIDECAR_FLAGS[f]) problems.push(`${where}: --${f} is deprecated: use ${DEPRECATED_SIDECAR_FLAGS[f]}`);
    }
    for (const [flag, why] of REQUIRED_FLAGS[s.name] ?? []) if (!isOn(args, flag)) problems.push(`${where}: --${flag} must be on: ${why}`);
  }
}

/**
 * On SELinux nodes a container that is not privileged cannot connect to a socket a privileged one
 * made (the kubernetes-csi references set `privileged: true` on their sidecars for this): beside a
 * privileged driver, every sidecar that mounts its socket's volume is privileged.
 */
export function checkSidecarPrivilege(pod: Pod, driver: Container, socketVolume: string | undefined, problems: string[]): void {
  if (!driver.securityContext?.privileged || !socketVolume) return;
  for (const x of pod.spec.containers)
    if (x !== driver && sidecarOf(x) && x.volumeMounts?.some((m) => m.name === socketVolume) && !x.securityContext?.privileged)
      problems.push(
        `${pod.where} container ${x.name}: must be privileged like ${driver.name}, whose socket it connects to (SELinux nodes refuse an unprivileged container that socket)`,
      );
}

/** The port a container listens on for HTTP (its --http-endpoint), and the name it declares for it. */
function httpPort(x: Container): { port: number; name: string | undefined } | undefined {
  const port = portOf(flagValue(x.args ?? [], "http-endpoint"));
  return port === undefined ? undefined : { port, name: x.ports?.find((p) => p.containerPort === port)?.name };
}

/**
 * The driver's liveness: the kubelet GETs the livenessprobe sidecar's /healthz, which calls the
 * driver's CSI Probe over its socket (the sidecar's --csi-address is checked to be that socket).
 */
export function checkDriverLiveness(pod: Pod, driver: Container, problems: string[]): void {
  const sidecar = pod.spec.containers.find((x) => sidecarOf(x)?.name === "livenessprobe");
  if (!sidecar) return; // checkSidecars says it is missing
  const where = `${pod.where} container ${driver.name}`;
  const http = httpPort(sidecar);
  if (!http) return void problems.push(`${pod.where} container ${sidecar.name}: no --http-endpoint for the kubelet's liveness probe`);
  const get = driver.livenessProbe?.httpGet;
  const port = typeof get?.port === "string" ? driver.ports?.find((p) => p.name === get.port)?.containerPort : get?.port;
  if (get?.path !== "/healthz" || port !== http.port)
    problems.push(
      `${where}: livenessProbe must GET /healthz on ${http.port}, the ${sidecar.name} sidecar's (CSI Probe over the socket); it has ${get?.path} on ${get?.port}`,
    );
}

/** The sidecars that serve Prometheus metrics on their --http-endpoint (node-driver-registrar serves none). */
const NO_METRICS = new Set(["csi-node-driver-registrar"]);

/** Every metrics port of every pod of ours: the service's own ("metrics") and each sidecar's, by the name it declares. */
export function metricsPorts(pods: { pod: Pod; driver: Container }[], problems: string[]): { pod: Pod; names: string[] }[] {
  return pods.map(({ pod, driver }) => {
    const names = driver.ports?.some((p) => p.name === "metrics") ? ["metrics"] : [];
    for (const x of pod.spec.containers) {
      const s = sidecarOf(x);
      if (!s || NO_METRICS.has(s.name)) continue;
      const http = httpPort(x);
      if (!http) problems.push(`${pod.where} container ${x.name}: no --http-endpoint: its metrics are not served`);
      else if (!http.name)
        problems.push(`${pod.where} container ${x.name}: --http-endpoint port ${http.port} is not a named containerPort (nothing can scrape it by name)`);
      else names.push(http.name);
    }
    return { pod, names };
  });
}

/** With a PodMonitor in the documents: it selects our pods and scrapes every metrics port of theirs. */
export function checkScraping(docs: K8sObject[], ports: { pod: Pod; names: string[] }[]): string[] {
  const monitors = docs.filter((d) => d.kind === "PodMonitor");
  if (monitors.length === 0) return [];
  const problems: string[] = [];
  for (const { pod, names } of ports) {
    const selecting = monitors.filter((m) => Object.entries(m.spec?.selector?.matchLabels ?? {}).every(([k, v]) => pod.labels[k] === v));
    const scraped = new Set(selecting.flatMap((m) => (m.spec?.podMetricsEndpoints ?? []).map((e: { port?: string }) => e.port)));
    for (const n of names) if (!scraped.has(n)) problems.push(`${pod.where}: no PodMonitor scrapes its metrics port ${n}`);
  }
  return problems;
}
