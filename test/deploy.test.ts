/**
 * The deployment files agree with the code (issue 13): every YAML document under deploy/ parses;
 * the Kubernetes manifests (the base, and each overlay as kustomize builds it when kubectl is on
 * the PATH), the Nomad jobs and docker-compose.yml set only env names and flags their service
 * accepts (its settings table), with values its own config loader accepts; sockets, probes,
 * ports, images, the driver name, class parameters and the shared pool directory line up; whatever
 * runs our image (manifests, Nomad jobs, compose, the Dockerfile's CMD) is plain node on a file
 * `npm run build` makes, and the Dockerfile's final stage has production dependencies only, no
 * tsx (test/image.test.ts replays that stage for real), and checks its own runtime needs (python3's
 * rados and rbd, the node tools); the Swarm plugin (deploy/swarm/) serves both CSI interfaces on one
 * socket through the mux, in front of the controller's and the node-agent's (`npm run e2e` runs
 * the image, the compose file and the plugin for real). The second half breaks one thing at a time
 * in a copy of the real files and sees each check fail.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { PLUGIN_NAME } from "@csi/contracts";
import { CONTROLLER_SETTINGS } from "@csi/controller/testing";
import { NODE_AGENT_SETTINGS } from "@csi/node-agent/testing";
import { envNames } from "@csi/runtime";
import {
  builtOutputs,
  type CommandRun,
  type Compose,
  CSICTL_DIST,
  checkCommands,
  checkCompose,
  checkDockerfile,
  checkKubernetes,
  checkKustomization,
  checkNomad,
  composeCommands,
  composeSeconds,
  execForm,
  type K8sObject,
  type Kustomization,
  kubernetesCommands,
  type NomadJob,
  nomadCommands,
  parseDockerfile,
  serviceMain,
} from "@csi/testkit";
import { parseAllDocuments } from "yaml";

const ROOT = path.resolve(import.meta.dirname, "..");
const K8S = path.join(ROOT, "deploy/kubernetes");
const rel = (p: string) => path.relative(ROOT, p);
const read = (p: string) => readFileSync(path.join(ROOT, p), "utf8");
const CLUSTERS = read("deploy/clusters.json");
const VERSION = JSON.parse(read("package.json")).version as string;
const IMAGE = `csi-event-driver:${VERSION}`;
const IMAGE_NAME = "csi-event-driver";
/** What `npm run build` makes (from the tsconfigs; nothing needs to be built for this file). */
const BUILT = builtOutputs(ROOT);

/** Every document of a YAML text; a syntax error or warning fails with the file's name. */
function parseYaml(text: string, where: string): K8sObject[] {
  return parseAllDocuments(text).flatMap((d) => {
    const bad = [...d.errors, ...d.warnings];
    if (bad.length > 0) throw new Error(`${where}: ${bad.map((e) => e.message).join("; ")}`);
    const js = d.toJS();
    return js === null ? [] : [js as K8sObject];
  });
}

function filesUnder(dir: string, re: RegExp): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = path.join(dir, e);
    return statSync(p).isDirectory() ? filesUnder(p, re) : re.test(e) ? [p] : [];
  });
}

/** The objects a kustomization's resources name, recursively (no patches applied). */
function resourcesOf(dir: string): K8sObject[] {
  const k = parseYaml(readFileSync(path.join(dir, "kustomization.yaml"), "utf8"), rel(dir))[0] as unknown as Kustomization;
  return [...(k.resources ?? []), ...(k.components ?? [])].flatMap((r) => {
    const p = path.join(dir, r);
    return statSync(p).isDirectory() ? resourcesOf(p) : parseYaml(readFileSync(p, "utf8"), rel(p));
  });
}

const baseDocs = () => resourcesOf(path.join(K8S, "base"));
const compose = () => parseYaml(read("docker-compose.yml"), "docker-compose.yml")[0] as unknown as Compose;
const nomadJobs = () => filesUnder(path.join(ROOT, "deploy/nomad"), /\.nomad\.json$/).map((f) => JSON.parse(readFileSync(f, "utf8")) as NomadJob);
/** Every command line of our image: Kubernetes (the base and the optional NATS/Redis component's Job), Nomad, compose, the Swarm plugin's entrypoint. */
const ourRuns = (
  docs = [...baseDocs(), ...resourcesOf(path.join(K8S, "components/nats-redis"))],
  jobs = nomadJobs(),
  c = compose(),
  entrypoint = read(SWARM_ENTRYPOINT),
): CommandRun[] => [...kubernetesCommands(docs, IMAGE_NAME), ...nomadCommands(jobs, IMAGE_NAME), ...composeCommands(c), ...entrypointCommands(entrypoint)];
const dockerfile = (text = read("Dockerfile")) => parseDockerfile(text);

/** The Swarm plugin (deploy/swarm/): its config.json and the entrypoint.sh make-plugin.sh installs as its entrypoint. */
const SWARM_ENTRYPOINT = "deploy/swarm/entrypoint.sh";
interface PluginConfig {
  entrypoint: string[];
  workdir: string;
  interface: { types: string[]; socket: string };
  network: { type: string };
  propagatedMount: string;
  linux: { capabilities: string[]; allowAllDevices: boolean };
  mounts: { name?: string; source: string; destination: string; settable?: string[] }[];
  env: { name: string; value: string }[];
}
const pluginConfig = () => JSON.parse(read("deploy/swarm/config.json")) as PluginConfig;

/** The `node <file> ...` lines of the plugin's entrypoint (continuation lines joined, `&` dropped). */
function entrypointCommands(text: string): CommandRun[] {
  return text
    .replace(/\\\n\s*/g, " ")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^node\s/.test(l))
    .map((l) => ({ where: `${SWARM_ENTRYPOINT} (Swarm plugin)`, argv: l.replace(/\s*&$/, "").split(/\s+/) }));
}

/** The value of `--flag` in a command line. */
const flagOf = (argv: string[], flag: string) => argv[argv.indexOf(`--${flag}`) + 1];

/**
 * The plugin as Swarm needs it (docs/deploy.md, "Docker Swarm"): both CSI interfaces on one socket,
 * which the mux serves at /run/docker/plugins/<socket>, forwarding to the controller's and the
 * node-agent's sockets as they serve them; the propagated mount Swarm publishes under
 * (/data/published); the pool directory at the compose file's path; CAP_SYS_ADMIN and the host's
 * devices; only env names the services read; the entrypoint make-plugin.sh installs.
 */
function checkSwarmPlugin(cfg: PluginConfig, entrypoint: string, makePlugin: string): string[] {
  const problems: string[] = [];
  for (const t of ["docker.csicontroller/1.0", "docker.csinode/1.0"])
    if (!cfg.interface.types.includes(t)) problems.push(`config.json: interface type ${t} missing`);
  if (cfg.propagatedMount !== "/data/published")
    problems.push(`config.json: propagatedMount ${cfg.propagatedMount} is not /data/published, where Swarm publishes`);
  if (!cfg.linux.capabilities.includes("CAP_SYS_ADMIN") || !cfg.linux.allowAllDevices)
    problems.push("config.json: needs CAP_SYS_ADMIN and allowAllDevices (losetup, mount)");
  if (cfg.network.type !== "host") problems.push(`config.json: network ${cfg.network.type}: the plugin reaches NATS as the host does`);
  if (!cfg.mounts.some((m) => m.destination === "/var/lib/csi/pools" && m.settable?.includes("source")))
    problems.push("config.json: no settable pool mount at /var/lib/csi/pools");
  if (!cfg.mounts.some((m) => m.source === "/dev" && m.destination === "/dev")) problems.push("config.json: the host's /dev is not mounted");
  const known = new Set([...envNames(CONTROLLER_SETTINGS), ...envNames(NODE_AGENT_SETTINGS), "NODE_ENV"]);
  for (const e of cfg.env) if (!known.has(e.name)) problems.push(`config.json: env ${e.name} is read by neither the controller nor the node-agent`);
  const install = /install -m 755 "\$here\/entrypoint\.sh" "\$dir\/rootfs(\S+)"/.exec(makePlugin)?.[1];
  if (cfg.entrypoint.join(" ") !== install)
    problems.push(`config.json: entrypoint ${cfg.entrypoint.join(" ")} is not where make-plugin.sh installs entrypoint.sh (${install})`);
  const runs = entrypointCommands(entrypoint).map((r) => r.argv);
  const mux = runs.find((a) => a[1] === "services/controller/dist/plugin/main.js");
  const ctl = runs.find((a) => a[1] === rel(serviceMain("controller", "dist")));
  const node = runs.find((a) => a[1] === rel(serviceMain("node-agent", "dist")));
  if (!mux || !ctl || !node) return [...problems, "entrypoint.sh: starts not all of the plugin mux, the controller and the node-agent"];
  if (flagOf(mux, "endpoint") !== `unix:///run/docker/plugins/${cfg.interface.socket}`)
    problems.push(`entrypoint.sh: the mux serves ${flagOf(mux, "endpoint")}, not the plugin's socket`);
  if (flagOf(mux, "controller-endpoint") !== flagOf(ctl, "endpoint"))
    problems.push("entrypoint.sh: the mux's --controller-endpoint is not the controller's --endpoint");
  if (flagOf(mux, "node-endpoint") !== flagOf(node, "endpoint")) problems.push("entrypoint.sh: the mux's --node-endpoint is not the node-agent's --endpoint");
  return problems;
}

/**
 * The final stage's runtime needs (issue 35): python3-rados beside python3-rbd (bookworm's
 * python3-rbd does not pull it in), and a RUN that checks inside the image that the RBD helper's
 * imports and every tool the node-agent runs are there; no `# syntax=` line (BuildKit would fetch
 * the frontend from Docker Hub: no build without it).
 */
function checkImageNeeds(text: string): string[] {
  const problems: string[] = [];
  if (/^#\s*syntax\s*=/m.test(text)) problems.push("the Dockerfile has a # syntax= line: BuildKit fetches that frontend image (no offline build)");
  const final = parseDockerfile(text).at(-1)?.instructions ?? [];
  const apt = final.find((i) => i.op === "RUN" && /apt-get install/.test(i.args))?.args ?? "";
  for (const p of ["python3-rbd", "python3-rados", "rbd-fuse", "e2fsprogs", "xfsprogs", "util-linux", "mount"])
    if (!new RegExp(`\\s${p}(\\s|$)`).test(apt)) problems.push(`the final stage does not install ${p}`);
  const check = final.find((i) => i.op === "RUN" && i.args.includes('python3 -c "import rados, rbd"'));
  if (!check) problems.push('the final stage does not check python3 -c "import rados, rbd" in the image');
  const tools = /for t in ([^;]+); do command -v "\$t"/.exec(check?.args ?? "")?.[1]?.split(/\s+/) ?? [];
  for (const t of ["rbd-fuse", "losetup", "blockdev", "blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "xfs_growfs", "mount", "umount"])
    if (!tools.includes(t)) problems.push(`the final stage's check does not look for ${t}`);
  return problems;
}
/** The final stage's CMD as a run, and the Dockerfile's checks given the deployment files' runs. */
const dockerCmd = (text = read("Dockerfile")): CommandRun => ({
  where: "Dockerfile CMD",
  argv:
    execForm(
      dockerfile(text)
        .at(-1)
        ?.instructions.findLast((i) => i.op === "CMD"),
    ) ?? [],
});
const checkImage = (text = read("Dockerfile"), runs = ourRuns()) => [
  ...checkCommands([...runs, dockerCmd(text)], BUILT),
  ...checkDockerfile(
    dockerfile(text),
    runs.flatMap((r) => (r.argv[0] === "node" && r.argv[1] ? [r.argv[1]] : [])),
  ),
];
const kubectl = spawnSync("kubectl", ["version", "--client"], { encoding: "utf8", timeout: 30_000 }).status === 0;
const overlays = readdirSync(path.join(K8S, "overlays")).map((o) => path.join(K8S, "overlays", o));

/** A deep copy of documents with one change, for the failing half. */
function changed<T>(docs: T, change: (copy: T) => void): T {
  const copy = structuredClone(docs);
  change(copy);
  return copy;
}
const byName = (docs: K8sObject[], kind: string, name: string) => {
  const d = docs.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(d, `${kind}/${name} in the manifests`);
  return d;
};
const container = (docs: K8sObject[], kind: string, name: string, c: string) => {
  const x = byName(docs, kind, name).spec.template.spec.containers.find((y: { name: string }) => y.name === c);
  assert.ok(x, `container ${c} of ${kind}/${name}`);
  return x;
};
/** A check on broken input reports a problem matching `re` (and only problems it is about). */
function fails(problems: string[], re: RegExp): void {
  assert.ok(
    problems.some((p) => re.test(p)),
    `expected a problem matching ${re}, got:\n  ${problems.join("\n  ") || "(none)"}`,
  );
}

describe("deployment files agree with the code", () => {
  test("every YAML document under deploy/ and docker-compose.yml parses", () => {
    const files = [...filesUnder(path.join(ROOT, "deploy"), /\.ya?ml$/), path.join(ROOT, "docker-compose.yml")];
    assert.ok(files.length >= 20, `found ${files.length} YAML files`);
    for (const f of files) assert.ok(parseYaml(readFileSync(f, "utf8"), rel(f)).length > 0, `${rel(f)} has documents`);
  });

  test("every kustomization names files that exist", () => {
    const ks = filesUnder(K8S, /^kustomization\.yaml$/);
    assert.ok(ks.length >= 5);
    for (const f of ks) {
      const k = parseYaml(readFileSync(f, "utf8"), rel(f))[0] as unknown as Kustomization;
      assert.deepEqual(checkKustomization(path.dirname(f), k, existsSync), [], rel(f));
    }
  });

  test("kubernetes base: services, sidecars, sockets, probes, pools, classes, RBAC", () => {
    const docs = baseDocs();
    assert.deepEqual(checkKubernetes(docs, CLUSTERS), []);
    // One image for every service, tagged with the project's version; the kustomization sets the same tag.
    const ours = docs.flatMap((d) => d.spec?.template?.spec?.containers ?? []).filter((c: { image: string }) => c.image.startsWith("csi-event-driver"));
    assert.ok(ours.length === 3 && ours.every((c: { image: string }) => c.image === IMAGE), `our containers run ${IMAGE}`);
    const k = parseYaml(read("deploy/kubernetes/base/kustomization.yaml"), "base")[0];
    assert.deepEqual(k?.images, [{ name: "csi-event-driver", newTag: VERSION }]);
  });

  for (const dir of overlays)
    test(`kubernetes ${rel(dir)} as kustomize builds it`, { skip: kubectl ? false : "kubectl is not on the PATH" }, () => {
      const out = spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8", timeout: 60_000 });
      assert.equal(out.status, 0, out.stderr);
      const docs = parseYaml(out.stdout, rel(dir));
      assert.deepEqual(checkKubernetes(docs, CLUSTERS), []);
      // Everything in the driver's namespace; the optional NATS has 3 replicas and JetStream R3 streams.
      for (const d of docs.filter((x) => x.metadata.namespace !== undefined))
        assert.equal(d.metadata.namespace, "csi-event-driver", `${d.kind}/${d.metadata.name}`);
      const nats = docs.find((d) => d.kind === "StatefulSet" && d.metadata.name === "csi-nats");
      if (nats) {
        assert.equal(nats.spec.replicas, 3);
        assert.equal(byName(docs, "ConfigMap", "csi-event-driver-config").data.STREAM_REPLICAS, "3");
      }
    });

  test("the optional NATS and Redis: JetStream cluster, auth include from csi-nats-auth, AOF, compose's images", () => {
    const docs = resourcesOf(path.join(K8S, "components/nats-redis"));
    const conf = byName(docs, "ConfigMap", "csi-nats-config").data["nats.conf"] as string;
    assert.match(conf, /jetstream\s*\{/);
    assert.match(conf, /cluster\s*\{[\s\S]*routes/);
    assert.match(conf, /include "auth\.conf"/);
    const nats = byName(docs, "StatefulSet", "csi-nats");
    const sources = nats.spec.template.spec.volumes.find((v: { name: string }) => v.name === "config").projected.sources;
    assert.ok(
      sources.some(
        (s: { secret?: { name: string; items: { key: string }[] } }) => s.secret?.name === "csi-nats-auth" && s.secret.items[0]?.key === "auth.conf",
      ),
    );
    assert.match(byName(docs, "ConfigMap", "csi-redis-config").data["redis.conf"], /^appendonly yes$/m);
    const services = compose().services as Record<string, { image?: string }>;
    assert.equal(nats.spec.template.spec.containers[0].image, services.nats?.image);
    assert.equal(byName(docs, "StatefulSet", "csi-redis").spec.template.spec.containers[0].image, services.redis?.image);
    // The base's URLs name these services.
    const cfg = byName(baseDocs(), "ConfigMap", "csi-event-driver-config").data;
    assert.equal(cfg.NATS_URL, "nats://csi-nats:4222");
    assert.equal(cfg.REDIS_URL, "redis://csi-redis:6379");
    byName(docs, "Service", "csi-nats");
    byName(docs, "Service", "csi-redis");
  });

  test("nomad jobs (JSON, as `nomad job run -json` takes them)", () => {
    const jobs = nomadJobs();
    assert.equal(jobs.length, 3);
    assert.deepEqual(checkNomad(jobs, CLUSTERS, IMAGE), []);
  });

  test("docker-compose.yml", () => {
    assert.deepEqual(checkCompose(compose(), "deploy/clusters.json", read), []);
  });

  // Both Compose versions read the file (docs/deploy.md, "docker compose"); each runs where it is installed.
  for (const [name, argv, probe, missing] of [
    [
      "Compose v1.29 (Debian's docker-compose)",
      ["docker-compose", "-f", "docker-compose.yml", "config", "-q"],
      ["docker-compose", "version"],
      "docker-compose is not installed (Debian: apt-get install docker-compose)",
    ],
    [
      "Compose v2 (docker compose)",
      ["docker", "compose", "-f", "docker-compose.yml", "config", "-q"],
      ["docker", "compose", "version"],
      "the Compose v2 plugin (docker compose) is not installed",
    ],
  ] as const) {
    const why = spawnSync(probe[0], probe.slice(1), { encoding: "utf8", timeout: 30_000 }).status === 0 ? false : missing;
    test(`docker-compose.yml as ${name} reads it`, { skip: why }, () => {
      const out = spawnSync(argv[0], argv.slice(1), { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
      assert.equal(out.status, 0, `${argv.join(" ")}: ${out.stderr}`);
    });
  }

  test("npm run build makes every service's main and csictl's, and ships no test file", () => {
    for (const s of ["journal", "controller", "node-agent"] as const) assert.ok(BUILT.has(rel(serviceMain(s, "dist"))), s);
    assert.ok(BUILT.has(rel(CSICTL_DIST)));
    assert.deepEqual(
      [...BUILT].filter((f) => /\.test\.js$/.test(f) || f.startsWith("test/")),
      [],
    );
  });

  test("our image runs plain node on built files everywhere; the Dockerfile's final stage has production dependencies only, no tsx", () => {
    const runs = ourRuns();
    // Each service (and csictl's Redis loader and fleet init) in each kind of deployment file.
    const kinds = { journal: "Deployment/", controller: "Deployment/", "node-agent": "DaemonSet/" } as const;
    for (const [s, k8sKind] of Object.entries(kinds) as [keyof typeof kinds, string][])
      for (const kind of [k8sKind, "nomad job", "docker-compose"])
        assert.ok(
          runs.some((r) => r.where.startsWith(kind) && r.argv[1] === rel(serviceMain(s, "dist"))),
          `${s} in ${kind}`,
        );
    assert.equal(runs.filter((r) => r.argv[1] === rel(CSICTL_DIST)).length, 3, "csictl: the journal's init container and task, the fleet-init Job");
    assert.deepEqual(checkImage(), []);
    assert.equal(runs.filter((r) => r.where.includes("Swarm plugin")).length, 3, "the plugin's controller, node-agent and mux");
  });

  test("the Swarm plugin: both CSI interfaces on one socket, served by the mux in front of the controller's and the node-agent's sockets", () => {
    assert.deepEqual(checkSwarmPlugin(pluginConfig(), read(SWARM_ENTRYPOINT), read("deploy/swarm/make-plugin.sh")), []);
  });

  test("the image's runtime needs: python3-rados beside python3-rbd, checked inside the image with every node tool; no # syntax= line", () => {
    assert.deepEqual(checkImageNeeds(read("Dockerfile")), []);
  });
});

describe("each check fails on a broken copy", () => {
  const docs = baseDocs();
  const k8s = (change: (d: K8sObject[]) => void) => checkKubernetes(changed(docs, change), CLUSTERS);
  const ctl = (d: K8sObject[], c = "controller") => container(d, "Deployment", "csi-event-driver-controller", c);
  const journal = (d: K8sObject[]) => container(d, "Deployment", "csi-event-driver-journal", "journal");
  const node = (d: K8sObject[], c = "node-agent") => container(d, "DaemonSet", "csi-event-driver-node", c);

  test("env names and flags come from the service's settings table; required ones are set", () => {
    fails(
      k8s((d) => journal(d).env.push({ name: "NATS_PASSWD", value: "x" })),
      /env NATS_PASSWD is not a setting of the journal/,
    );
    fails(
      k8s((d) => ctl(d).command.push("--nodeid", "x")),
      /flag --nodeid is not a setting of the controller/,
    );
    fails(
      k8s((d) => (journal(d).env = journal(d).env.filter((e: { name: string }) => e.name !== "REDIS_URL"))),
      /REDIS_URL must be set/,
    );
    // A value the service's own loader refuses.
    fails(
      k8s((d) => (byName(d, "ConfigMap", "csi-event-driver-config").data.STREAM_REPLICAS = "7")),
      /journal refuses its configuration: STREAM_REPLICAS/,
    );
    fails(
      k8s((d) => ctl(d).env.push({ name: "LOG_LEVEL2", valueFrom: { configMapKeyRef: { name: "nope", key: "x" } } })),
      /reads ConfigMap nope/,
    );
  });

  test("the sidecars' --csi-address is the driver's socket", () => {
    fails(
      k8s((d) => (ctl(d, "csi-attacher").args[0] = "--csi-address=/csi/other.sock")),
      /csi-attacher: --csi-address \/csi\/other\.sock is not the driver's socket/,
    );
    // The same path, but the sidecar mounts another volume there.
    fails(
      k8s((d) => {
        byName(d, "Deployment", "csi-event-driver-controller").spec.template.spec.volumes.push({ name: "other", emptyDir: {} });
        ctl(d, "csi-resizer").volumeMounts[0].name = "other";
      }),
      /csi-resizer: --csi-address .* is not the driver's socket/,
    );
    fails(
      k8s((d) => (ctl(d).command[3] = "unix:///tmp/c.sock")),
      /not the driver's socket/,
    );
  });

  test("the registrar's kubelet path is the socket's host path under plugins/<driver>", () => {
    fails(
      k8s((d) => (node(d, "node-driver-registrar").args[1] = "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi-node.sock")),
      /--kubelet-registration-path .* is not the socket's host path/,
    );
    fails(
      k8s((d) => {
        const v = byName(d, "DaemonSet", "csi-event-driver-node").spec.template.spec.volumes.find((x: { name: string }) => x.name === "plugin-dir");
        v.hostPath.path = "/var/lib/kubelet/plugins/other.driver";
      }),
      /host directory .* is not \/var\/lib\/kubelet\/plugins\/nats\.csi\.event-driver\.io/,
    );
  });

  test("probes and the metrics port agree", () => {
    fails(
      k8s((d) => (ctl(d).env.find((e: { name: string }) => e.name === "METRICS_ADDR").value = "0.0.0.0:9999")),
      /containerPort "metrics" is 9810, METRICS_ADDR's port is 9999/,
    );
    fails(
      k8s((d) => (journal(d).readinessProbe.httpGet.path = "/healthz")),
      /readinessProbe must GET \/readyz/,
    );
    fails(
      k8s((d) => (journal(d).livenessProbe.httpGet.port = 9808)),
      /livenessProbe port 9808 is not the metrics port 9812/,
    );
    // The controller and the node-agent are alive when their CSI socket answers: through the livenessprobe sidecar.
    fails(
      k8s((d) => (node(d).livenessProbe.httpGet.port = "metrics")),
      /csi-event-driver-node container node-agent: livenessProbe must GET \/healthz on 9808, the liveness-probe sidecar's \(CSI Probe over the socket\)/,
    );
    fails(
      k8s((d) => delete ctl(d).livenessProbe),
      /container controller: livenessProbe must GET \/healthz on 9808/,
    );
    fails(
      k8s((d) => (ctl(d, "liveness-probe").args = ctl(d, "liveness-probe").args.filter((a: string) => !a.startsWith("--http-endpoint")))),
      /liveness-probe: no --http-endpoint for the kubelet's liveness probe/,
    );
    fails(
      k8s((d) => (byName(d, "Deployment", "csi-event-driver-journal").spec.template.metadata.annotations["prometheus.io/port"] = "9810")),
      /prometheus\.io\/port 9810 is not the metrics port 9812/,
    );
    fails(
      k8s((d) => (ctl(d, "csi-resizer").args[3] = "--http-endpoint=:8080")),
      /port 8080 is used by both csi-provisioner and csi-resizer/,
    );
  });

  test("the ops listener binds the pod IP, from status.podIP through $(POD_IP)", () => {
    type Env = { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
    const entry = (env: Env, name: string) => env.find((e) => e.name === name) as Env[number];
    fails(
      k8s((d) => (entry(journal(d).env, "METRICS_ADDR").value = "0.0.0.0:9812")),
      /METRICS_ADDR 0\.0\.0\.0:9812 does not bind the pod IP/,
    );
    fails(
      k8s((d) => (entry(ctl(d).env, "METRICS_ADDR").value = "127.0.0.1:9810")),
      /METRICS_ADDR 127\.0\.0\.1:9810 does not bind the pod IP/,
    );
    fails(
      k8s((d) => ((entry(node(d).env, "POD_IP").valueFrom as { fieldRef: { fieldPath: string } }).fieldRef.fieldPath = "status.hostIP")),
      /does not bind the pod IP/,
    );
    fails(
      k8s((d) => {
        const env = node(d).env as Env;
        env.push(...env.splice(env.indexOf(entry(env, "POD_IP")), 1)); // listed after METRICS_ADDR
      }),
      /env METRICS_ADDR refers to \$\(POD_IP\), which is not set above it/,
    );
    fails(
      k8s((d) => (entry(journal(d).env, "POD_IP").name = "MY_IP")),
      /env MY_IP is not a setting of the journal/,
    );
  });

  test("graceful stop outlasts SHUTDOWN_GRACE_MS", () => {
    fails(
      k8s((d) => (byName(d, "DaemonSet", "csi-event-driver-node").spec.template.spec.terminationGracePeriodSeconds = 20)),
      /terminationGracePeriodSeconds 20/,
    );
    fails(
      k8s((d) => (journal(d).env.find((e: { name: string }) => e.name === "SHUTDOWN_GRACE_MS").value = "45000")),
      /terminationGracePeriodSeconds 30 is not above/,
    );
  });

  test("images, sidecars, leader election, replicas, the node-agent's host access", () => {
    fails(
      k8s((d) => (journal(d).image = "csi-event-driver:0.0.9")),
      /the services run different images/,
    );
    fails(
      k8s((d) => (node(d, "liveness-probe").image = "registry.k8s.io/sig-storage/livenessprobe:v2.19.0")),
      /livenessprobe runs in several versions/,
    );
    fails(
      k8s((d) => (ctl(d, "csi-snapshotter").image = "registry.k8s.io/sig-storage/csi-snapshotter:latest")),
      /is not a pinned/,
    );
    fails(
      k8s((d) => (ctl(d, "csi-provisioner").args = ctl(d, "csi-provisioner").args.filter((a: string) => !a.startsWith("--leader")))),
      /--leader-election must be on/,
    );
    fails(
      k8s((d) => {
        const spec = byName(d, "Deployment", "csi-event-driver-controller").spec.template.spec;
        spec.containers = spec.containers.filter((c: { name: string }) => c.name !== "csi-attacher");
      }),
      /no csi-attacher sidecar/,
    );
    fails(
      k8s((d) => (byName(d, "Deployment", "csi-event-driver-journal").spec.replicas = 1)),
      /1 replicas, at least 2 wanted/,
    );
    fails(
      k8s((d) => (node(d).securityContext.privileged = false)),
      /must be privileged/,
    );
    fails(
      k8s((d) => delete byName(d, "DaemonSet", "csi-event-driver-node").spec.template.spec.shareProcessNamespace),
      /shareProcessNamespace must be true: a PID 1 that reaps orphans \(rbd-fuse daemonizes\)/,
    );
    fails(
      k8s((d) => delete node(d).volumeMounts.find((m: { name: string }) => m.name === "kubelet-dir").mountPropagation),
      /mountPropagation Bidirectional/,
    );
    fails(
      k8s((d) => (node(d).env.find((e: { name: string }) => e.name === "NODE_ID").valueFrom = { fieldRef: { fieldPath: "metadata.name" } })),
      /NODE_ID must come from spec\.nodeName/,
    );
  });

  test("the sidecars as they document themselves: flags of their pinned version, none deprecated, the metadata flags on", () => {
    fails(
      k8s((d) => ctl(d, "csi-provisioner").args.push("--extra-create-metdata")),
      /container csi-provisioner: --extra-create-metdata is not a flag of csi-provisioner:v6\.4\.0/,
    );
    fails(
      k8s((d) => node(d, "node-driver-registrar").args.push("-leader-election")),
      /node-driver-registrar: --leader-election is not a flag of csi-node-driver-registrar:v2\.18\.0/,
    );
    fails(
      k8s((d) => {
        for (const c of [ctl(d, "liveness-probe"), node(d, "liveness-probe")]) c.image = "registry.k8s.io/sig-storage/livenessprobe:v2.21.0";
      }),
      /no documented flag list for livenessprobe:v2\.21\.0/,
    );
    fails(
      k8s((d) => (node(d, "liveness-probe").args = node(d, "liveness-probe").args.map((a: string) => a.replace("--http-endpoint=:", "--health-port=")))),
      /liveness-probe: --health-port is deprecated: use --http-endpoint/,
    );
    for (const sidecar of ["csi-provisioner", "csi-snapshotter"])
      fails(
        k8s((d) => (ctl(d, sidecar).args = ctl(d, sidecar).args.filter((a: string) => a !== "--extra-create-metadata"))),
        new RegExp(`container ${sidecar}: --extra-create-metadata must be on`),
      );
    fails(
      k8s((d) => (byName(d, "CSIDriver", PLUGIN_NAME).spec.podInfoOnMount = false)),
      /podInfoOnMount must be true/,
    );
  });

  test("beside the privileged node-agent every sidecar on its socket is privileged (SELinux); the controller's need not be", () => {
    for (const sidecar of ["node-driver-registrar", "liveness-probe"])
      fails(
        k8s((d) => delete node(d, sidecar).securityContext),
        new RegExp(`container ${sidecar}: must be privileged like node-agent, whose socket it connects to`),
      );
    assert.deepEqual(
      k8s((d) => assert.ok(!ctl(d, "csi-provisioner").securityContext?.privileged)),
      [],
      "the controller is not privileged: its sidecars need not be",
    );
  });

  test("every sidecar's metrics port is declared and, with the PodMonitor, scraped", () => {
    const monitored = [...docs, ...resourcesOf(path.join(K8S, "components/podmonitor"))];
    assert.deepEqual(checkKubernetes(monitored, CLUSTERS), [], "the base with the PodMonitor component");
    const withMonitor = (change: (d: K8sObject[]) => void) => checkKubernetes(changed(monitored, change), CLUSTERS);
    fails(
      withMonitor((d) => {
        const m = byName(d, "PodMonitor", "csi-event-driver");
        m.spec.podMetricsEndpoints = m.spec.podMetricsEndpoints.filter((e: { port: string }) => e.port !== "snapshotter-hc");
      }),
      /Deployment\/csi-event-driver-controller: no PodMonitor scrapes its metrics port snapshotter-hc/,
    );
    fails(
      withMonitor((d) => (node(d, "liveness-probe").ports = [])),
      /liveness-probe: --http-endpoint port 9808 is not a named containerPort/,
    );
  });

  test("the journal and the node-agent share one pool directory holding every pool root", () => {
    fails(
      k8s(
        (d) =>
          (byName(d, "DaemonSet", "csi-event-driver-node").spec.template.spec.volumes.find((v: { name: string }) => v.name === "pools").hostPath.path =
            "/srv/pools"),
      ),
      /do not share one pool directory/,
    );
    const moved = JSON.parse(CLUSTERS);
    moved.clusters[0].pools[0].root = "/srv/pools/local/default";
    fails(
      k8s((d) => (byName(d, "ConfigMap", "csi-event-driver-clusters").data["clusters.json"] = JSON.stringify(moved))),
      /root \/srv\/pools\/local\/default is not under the shared pool directory/,
    );
    fails(
      k8s((d) => (byName(d, "ConfigMap", "csi-event-driver-clusters").data["clusters.json"] = "{}")),
      /clusters\.json: /,
    );
  });

  test("driver name and class parameters are the controller's", () => {
    fails(
      k8s((d) => (byName(d, "StorageClass", "csi-event-driver").provisioner = "other.csi.io")),
      /StorageClass\/csi-event-driver provisioner is other\.csi\.io/,
    );
    fails(
      k8s((d) => (byName(d, "CSIDriver", PLUGIN_NAME).spec.attachRequired = false)),
      /attachRequired must be true/,
    );
    fails(
      k8s((d) => (byName(d, "StorageClass", "csi-event-driver").parameters.replication = "3")),
      /parameter replication is not one the controller reads/,
    );
    fails(
      k8s((d) => (byName(d, "StorageClass", "csi-event-driver").parameters.pool = "fast")),
      /pool fast is not a pool of cluster local/,
    );
    fails(
      k8s((d) => (byName(d, "StorageClass", "csi-event-driver").parameters.clusterID = "east")),
      /clusterID east is not in the clusters file/,
    );
    fails(
      k8s((d) => (byName(d, "StorageClass", "csi-event-driver").parameters.readIOPS = "-1")),
      /the controller refuses the parameters/,
    );
    fails(
      k8s((d) => (byName(d, "VolumeAttributesClass", "csi-event-driver-limited").parameters.iops = "100")),
      /VolumeAttributesClass\/csi-event-driver-limited: .*unknown key/,
    );
    fails(
      k8s((d) => (byName(d, "VolumeAttributesClass", "csi-event-driver-limited").parameters.readBytesPerSecond = "100")),
      /readBytesPerSecond/,
    );
    fails(
      k8s((d) => (byName(d, "VolumeSnapshotClass", "csi-event-driver").parameters = { tier: "gold" })),
      /parameter tier is not one the controller reads/,
    );
  });

  test("each sidecar's RBAC is bound to the controller's ServiceAccount", () => {
    fails(
      k8s((d) => (byName(d, "ClusterRoleBinding", "csi-event-driver-external-attacher").subjects[0].name = "default")),
      /no ClusterRole lets the external-attacher/,
    );
    fails(
      k8s((d) => (byName(d, "Role", "csi-event-driver-leader-election").rules = [])),
      /leader election/,
    );
    fails(
      k8s((d) => (byName(d, "Deployment", "csi-event-driver-controller").spec.template.spec.serviceAccountName = "nobody")),
      /ServiceAccount nobody is not in the manifests/,
    );
  });

  test("kustomization paths", () => {
    fails(checkKustomization(path.join(K8S, "base"), { resources: ["missing.yaml"] }, existsSync), /missing\.yaml does not exist/);
    fails(checkKustomization(K8S, { resources: ["components"] }, existsSync), /components has no kustomization\.yaml/);
  });

  test("nomad: plugin id and type, socket in mount_dir, env, checks, kill timeout, pools", () => {
    const jobs = nomadJobs();
    const task = (j: NomadJob[], id: string) => {
      const t = j.find((x) => x.Job.ID === id)?.Job.TaskGroups[0]?.Tasks[0];
      assert.ok(t, id);
      return t;
    };
    const nomad = (change: (j: NomadJob[]) => void) => checkNomad(changed(jobs, change), CLUSTERS, IMAGE);
    fails(
      nomad((j) => ((task(j, "csi-event-driver-controller").CSIPluginConfig as { ID: string }).ID = "event-driver")),
      /csi_plugin id event-driver/,
    );
    fails(
      nomad((j) => ((task(j, "csi-event-driver-node").CSIPluginConfig as { Type: string }).Type = "monolith")),
      /csi_plugin type monolith is not node/,
    );
    fails(
      nomad((j) => task(j, "csi-event-driver-node").Config.args?.splice(-1, 1, "unix:///csi/node.sock")),
      /is not <mount_dir>\/csi\.sock/,
    );
    fails(
      nomad((j) => ((task(j, "csi-event-driver-journal").Env as Record<string, string>).REDIS_HOST = "x")),
      /env REDIS_HOST is not a setting of the journal/,
    );
    fails(
      nomad((j) => (task(j, "csi-event-driver-journal").KillTimeout = 5e9)),
      /KillTimeout is not above/,
    );
    fails(
      nomad((j) => (task(j, "csi-event-driver-node").Config.volumes = ["local/clusters.json:/etc/csi/clusters.json"])),
      /no host directory is mounted at \/var\/lib\/csi\/pools/,
    );
    fails(
      nomad((j) => delete task(j, "csi-event-driver-node").Config.init),
      /task node-agent: init must be true: a PID 1 that reaps orphans/,
    );
    fails(
      nomad((j) => (task(j, "csi-event-driver-controller").Config.image = "csi-event-driver:latest")),
      /is not csi-event-driver:/,
    );
    fails(
      nomad((j) => ((j[0] as NomadJob).Job.TaskGroups[0]!.Services![0]!.Checks = [])),
      /no http check of \/healthz/,
    );
    fails(
      nomad((j) => delete (task(j, "csi-event-driver-journal").Env as Record<string, string>).METRICS_ADDR),
      /METRICS_ADDR 127\.0\.0\.1:9812 is loopback: the mapped port and the checks cannot reach it/,
    );
    // The journal's group loads the Redis function library first, as the admin (not the journal's user).
    const loader = (j: NomadJob[]) => {
      const t = j.find((x) => x.Job.ID === "csi-event-driver-journal")?.Job.TaskGroups[0]?.Tasks.find((x) => x.Name === "redis-functions");
      assert.ok(t, "the journal's redis-functions task");
      return t;
    };
    const journalGroup = (j: NomadJob[]) => j.find((x) => x.Job.ID === "csi-event-driver-journal")!.Job.TaskGroups[0]!;
    fails(
      nomad((j) => (journalGroup(j).Tasks = journalGroup(j).Tasks.filter((t) => t.Name !== "redis-functions"))),
      /not one task that loads the journal's Redis function library/,
    );
    fails(
      nomad((j) => (loader(j).Lifecycle = { Hook: "poststart", Sidecar: false })),
      /must be a prestart task/,
    );
    fails(
      nomad((j) => (loader(j).Templates = task(j, "csi-event-driver-journal").Templates)),
      /loads the functions as the journal's Redis user/,
    );
    fails(
      nomad((j) => ((loader(j).Env as Record<string, string>).REDIS_URL = "redis://elsewhere:6379")),
      /REDIS_URL redis:\/\/elsewhere:6379 is not the journal's/,
    );
  });

  test("kubernetes: the journal's init container loads the Redis function library as the admin", () => {
    const init = (d: K8sObject[]) => byName(d, "Deployment", "csi-event-driver-journal").spec.template.spec;
    fails(
      k8s((d) => (init(d).initContainers = [])),
      /not one init container that loads the journal's Redis function library/,
    );
    fails(
      k8s((d) => {
        const env = init(d).initContainers[0].env.find((e: { name: string }) => e.name === "REDIS_USERNAME");
        env.valueFrom.secretKeyRef.name = "csi-redis-journal";
      }),
      /loads the functions as the journal's Redis user \(csi-redis-journal\)/,
    );
    fails(
      k8s((d) => init(d).initContainers[0].env.push({ name: "REDIS_SENTINELS", value: "a:26379" })),
      /REDIS_SENTINELS a:26379 is not the journal's/,
    );
    fails(
      k8s((d) => (init(d).initContainers[0].image = "csi-event-driver:latest")),
      /image csi-event-driver:latest is not the journal's/,
    );
    fails(
      k8s((d) => init(d).initContainers[0].env.push({ name: "NATS_URL", value: "nats://x" })),
      /env NATS_URL is not a Redis setting of csictl/,
    );
  });

  test("compose: env, stop grace, shared pool volume", () => {
    const c = compose();
    const svc = (x: Compose, name: string) => x.services[name] as { environment: Record<string, string>; volumes: unknown[]; stop_grace_period?: string };
    fails(
      checkCompose(
        changed(c, (x) => (svc(x, "journal").environment.REDIS_PASS = "x")),
        "deploy/clusters.json",
        read,
      ),
      /env REDIS_PASS is not a setting/,
    );
    fails(
      checkCompose(
        changed(c, (x) => delete (x.services["node-agent"] as { init?: boolean }).init),
        "deploy/clusters.json",
        read,
      ),
      /service node-agent: init must be true: a PID 1 that reaps orphans/,
    );
    fails(
      checkCompose(
        changed(c, (x) => delete svc(x, "node-agent").stop_grace_period),
        "deploy/clusters.json",
        read,
      ),
      /stop_grace_period 10s \(default\)/,
    );
    fails(
      checkCompose(
        changed(
          c,
          (x) => (svc(x, "node-agent").volumes = svc(x, "node-agent").volumes.map((v) => (v === "pools:/var/lib/csi/pools" ? "pools2:/var/lib/csi/pools" : v))),
        ),
        "deploy/clusters.json",
        read,
      ),
      /do not share one pool volume/,
    );
    assert.equal(composeSeconds("1m30s"), 90);
    // Keys only Compose v2 reads: Debian's docker-compose 1.29 refuses the file.
    const node = (x: Compose) => x.services["node-agent"] as Record<string, unknown> & { volumes: unknown[] };
    fails(
      checkCompose(
        changed(c, (x) => (node(x).cgroup = "host")),
        "deploy/clusters.json",
        read,
      ),
      /service node-agent: cgroup is not read by Compose v1\.29/,
    );
    fails(
      checkCompose(
        changed(c, (x) =>
          node(x).volumes.push({
            type: "bind",
            source: "/var/lib/kubelet",
            target: "/var/lib/kubelet",
            bind: { propagation: "rshared", create_host_path: true },
          }),
        ),
        "deploy/clusters.json",
        read,
      ),
      /service node-agent volume bind: create_host_path is not read by Compose v1\.29/,
    );
  });

  test("our image: built files, plain node, no tsx; the Dockerfile's final stage", () => {
    const runs = (change: (d: K8sObject[]) => void) => ourRuns(changed(docs, change));
    fails(
      checkImage(
        undefined,
        runs((d) => (journal(d).command = ["node", "--import", "tsx", "services/journal/src/main.ts"])),
      ),
      /container journal: runs tsx/,
    );
    fails(
      checkImage(
        undefined,
        runs((d) => (journal(d).command = ["node", "--conditions=source", "services/journal/dist/main.js"])),
      ),
      /node --conditions=source: plain node on a built file, no options before it/,
    );
    fails(
      checkImage(
        undefined,
        runs((d) => (journal(d).command = ["node", "services/journal/src/main.ts"])),
      ),
      /services\/journal\/src\/main\.ts is not a file npm run build makes/,
    );
    fails(
      checkImage(
        undefined,
        runs((d) => (ctl(d).command[1] = "services/controller/dist/mian.js")),
      ),
      /services\/controller\/dist\/mian\.js is not a file npm run build makes/,
    );
    fails(
      checkImage(
        undefined,
        runs((d) => delete node(d).command),
      ),
      /csi-event-driver-node container node-agent: sets no command/,
    );
    const jobs = nomadJobs();
    const loader = changed(jobs, (j) => {
      const t = j.flatMap((x) => x.Job.TaskGroups.flatMap((g) => g.Tasks)).find((x) => x.Name === "redis-functions");
      assert.ok(t?.Config.args);
      t.Config.args[0] = "tools/csictl/bin/csictl.mjs";
    });
    fails(checkImage(undefined, ourRuns(undefined, loader)), /task redis-functions: tools\/csictl\/bin\/csictl\.mjs is not a file npm run build makes/);
    const c = changed(compose(), (x) => (x.services.controller!.command = ["npx", "tsx", "services/controller/src/main.ts"]));
    fails(checkImage(undefined, ourRuns(undefined, undefined, c)), /docker-compose service controller: runs npx, not node/);

    // The Dockerfile, one change at a time.
    const text = read("Dockerfile");
    const edit = (from: string | RegExp, to: string) => {
      const t = text.replace(from, to);
      assert.notEqual(t, text, `the Dockerfile has ${from}`);
      return checkImage(t);
    };
    fails(
      edit("RUN npm ci --engine-strict --omit=dev", "RUN npm ci --engine-strict"),
      /npm ci --engine-strict --no-audit .*: production installs with npm ci --omit=dev/,
    );
    fails(edit("RUN mkdir -p /csi", "RUN npm install -g tsx && mkdir -p /csi"), /the final stage must not have tsx or typescript/);
    fails(edit('CMD ["node", "services/journal/dist/main.js"]', 'CMD ["node", "--import", "tsx", "services/journal/src/main.ts"]'), /Dockerfile CMD: runs tsx/);
    fails(edit('CMD ["node", "services/journal/dist/main.js"]', "CMD node services/journal/dist/main.js"), /CMD is not in exec form/);
    fails(
      edit(/COPY --from=build \/app\/services\/controller\/dist .*\n/, ""),
      /the final stage does not copy services\/controller\/dist\/main\.js from the build stage/,
    );
    fails(
      edit("COPY --from=build /app/tools/csictl/dist tools/csictl/dist", "COPY tools/csictl/dist tools/csictl/dist"),
      /tools\/csictl\/dist\/main\.js is not built in the image: it would come from the build context/,
    );
    fails(edit("RUN npm run build", "RUN true"), /is not built in the image: it would come from the build context/);
    const needs = (from: string | RegExp, to: string) => {
      const t = text.replace(from, to);
      assert.notEqual(t, text, `the Dockerfile has ${from}`);
      return checkImageNeeds(t);
    };
    fails(needs(/^/, "# syntax=docker/dockerfile:1\n"), /# syntax= line/);
    fails(needs("mount python3-rados python3-rbd", "mount python3-rbd"), /does not install python3-rados/);
    fails(needs('python3 -c "import rados, rbd"', 'python3 -c "import rbd"'), /does not check python3 -c "import rados, rbd"/);
    fails(needs(" mkfs.xfs resize2fs", " resize2fs"), /check does not look for mkfs\.xfs/);
  });

  test("the Swarm plugin", () => {
    const cfg = pluginConfig();
    const entry = read(SWARM_ENTRYPOINT);
    const make = read("deploy/swarm/make-plugin.sh");
    const plugin = (change: (c: PluginConfig) => void, e = entry, m = make) => checkSwarmPlugin(changed(cfg, change), e, m);
    fails(
      plugin((c) => (c.interface.types = ["docker.csinode/1.0"])),
      /interface type docker\.csicontroller\/1\.0 missing/,
    );
    fails(
      plugin((c) => (c.propagatedMount = "/data")),
      /propagatedMount \/data is not \/data\/published/,
    );
    fails(
      plugin((c) => (c.linux.capabilities = [])),
      /needs CAP_SYS_ADMIN/,
    );
    fails(
      plugin((c) => (c.mounts = c.mounts.filter((m) => m.name !== "pools"))),
      /no settable pool mount/,
    );
    fails(
      plugin((c) => c.env.push({ name: "NAT_URL", value: "x" })),
      /env NAT_URL is read by neither/,
    );
    fails(
      plugin((c) => (c.interface.socket = "plugin.sock")),
      /the mux serves unix:\/\/\/run\/docker\/plugins\/csi\.sock, not the plugin's socket/,
    );
    fails(
      plugin((c) => (c.entrypoint = ["/entrypoint.sh"])),
      /is not where make-plugin\.sh installs entrypoint\.sh/,
    );
    fails(
      plugin(() => {}, entry.replace("--node-endpoint unix:///run/csi/csi-node.sock", "--node-endpoint unix:///run/csi/node.sock")),
      /--node-endpoint is not the node-agent's/,
    );
    fails(
      plugin(() => {}, entry.replace("node services/controller/dist/plugin/main.js", "node services/controller/src/plugin/main.ts")),
      /starts not all of/,
    );
    const runs = ourRuns(undefined, undefined, undefined, entry.replace("services/controller/dist/main.js", "services/controller/dist/mian.js"));
    fails(checkImage(undefined, runs), /Swarm plugin\): services\/controller\/dist\/mian\.js is not a file npm run build makes/);
  });
});
